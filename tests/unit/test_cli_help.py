"""Help that teaches: fields with type, default, allowed values and description; each verb's own example;
--version; --list-benchmarks; config show."""

from __future__ import annotations

import pytest
import yaml

from paravt_core.cli import main
from paravt_core.cli_help import EXAMPLES, describe_fields, field_description
from paravt_core.config import config_to_dict, load_config, stage_config
from paravt_core.eval import benchmarks as registry
from tests.support.paths import ROOT

REPO = ROOT
STAGES = ("data", "sft", "rl", "eval", "report")


def _out(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    return capsys.readouterr().out


def _leaf_keys(data: dict, prefix: str = "") -> list[str]:
    keys = []
    for key, value in data.items():
        if isinstance(value, dict) and value:
            keys += _leaf_keys(value, f"{prefix}{key}.")
        else:
            keys.append(f"{prefix}{key}")
    return keys


@pytest.mark.parametrize("stage", STAGES)
def test_stage_help_lists_every_field_with_its_type_and_its_own_example(stage: str, capsys) -> None:
    text = _out([stage, "--help"], capsys)
    cfg = stage_config(stage)()
    for key in _leaf_keys(config_to_dict(cfg)):
        assert f"\n  {key} = " in text, key
    assert EXAMPLES[stage].splitlines()[0] in text and f"paravt {stage} " in EXAMPLES[stage]
    assert "extract.workers=4" not in text or stage == "data"  # the data stage's example, nobody else's


def test_help_shows_allowed_values_bounds_and_descriptions(capsys) -> None:
    text = _out(["rl", "--help"], capsys)
    assert "paravt.preset = para_grpo   (choice; one of para_grpo, vanilla_grpo)" in text
    assert "steps = 700   (int; >= 1)" in text
    assert "engine.kind = transformers   (choice; one of transformers, sglang, vllm)" in text
    assert "group_size = 8   (int; >= 2)\n      rollouts per prompt (GRPO group n)" in text


def test_field_description_is_the_pydantic_description() -> None:
    from pydantic import Field

    from paravt_core.config_base import StrictModel

    class Demo(StrictModel):
        a: int = Field(default=1, description="from pydantic")
        b: int = 2  # a comment is not a description (tests/unit/test_config_descriptions.py requires Field's)

    assert [field_description(Demo, n) for n in "ab"] == ["from pydantic", ""]
    assert describe_fields(Demo) == ["a = 1   (int)", "    from pydantic", "b = 2   (int)"]


def test_version_and_benchmark_list(capsys) -> None:
    assert _out(["--version"], capsys).startswith("paravt ")
    assert main(["eval", "--list-benchmarks"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = [line.split()[0] for line in lines[1:-1]]
    assert names == list(registry.REGISTRY)
    videomme = next(line for line in lines if line.startswith("videomme "))
    assert "lmms-lab/Video-MME" in videomme and videomme.rstrip().endswith(
        "62.1"
    )  # docs/method.md §7, ParaVT-8B


@pytest.mark.parametrize("stage", STAGES)
def test_config_show_is_the_resolved_config_with_comments(stage: str, capsys) -> None:
    path = REPO / "configs" / stage / "tiny.yaml"
    assert main(["config", "show", stage, "--config", str(path), "output=/x/y"]) == 0
    text = capsys.readouterr().out
    expected = config_to_dict(load_config(stage_config(stage), path, ["output=/x/y"]))
    assert yaml.safe_load(text) == expected
    assert text.count("\n# ") + text.count("  # ") > 0


def test_compile_usage_advertises_the_one_name_and_output_it_takes(capsys, tmp_path) -> None:
    """argparse writes a ``nargs="+"`` positional as ``X [X ...]`` (CPython Lib/argparse.py,
    ``_format_args``, ONE_OR_MORE): the usage offered repeated ``[NAME] OUT`` pairs that the command then
    refused. One optional NAME and one OUT.yaml: what it accepts, and a third word is refused by argparse."""
    import re

    text = _out(["pipeline", "compile", "--help"], capsys)
    usage = " ".join(text.split("\n\n")[0].split())
    assert usage.endswith("[NAME] OUT.yaml") and "..." not in usage
    with pytest.raises(SystemExit) as refused:
        main(["pipeline", "compile", "train", str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")])
    assert refused.value.code == 2
    assert re.search(r"unrecognized arguments: \S*b\.yaml", capsys.readouterr().err)
