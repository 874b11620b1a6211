"""Every file under configs/ loads as its stage's config and its sources resolve, without network.

The stage is the file's directory (configs/<stage>/*.yaml). "Resolves" means what the stage does with the
string before it fetches anything: the data stage's ``parse_source`` on both sources, the eval stage's
``source_spec`` (hf:// ids must be the registry's datasets) and the model URI shapes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from paravt_core.config import load_config, stage_config
from paravt_core.data.download import parse_source
from paravt_core.eval import benchmarks as registry
from paravt_core.eval.stage import resolve_benchmarks, source_spec
from tests.support.paths import ROOT

REPO = ROOT
# configs/ablations/ holds study files (paravt_core.ablation), not a stage's config: checked below.
CONFIGS = sorted(p for p in (REPO / "configs").rglob("*.yaml") if p.parent.name != "ablations")
STUDIES = sorted((REPO / "configs" / "ablations").glob("*.yaml"))
STAGES = {"data", "sft", "rl", "eval", "report"}


def test_every_stage_ships_a_tiny_config_and_nothing_else_lies_around() -> None:
    assert {p.parent.name for p in CONFIGS} == STAGES
    assert {p.parent.name for p in CONFIGS if p.name == "tiny.yaml"} == STAGES
    assert (REPO / "configs" / "data" / "paravt_source.yaml").is_file()


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_config_loads_and_its_sources_resolve(path: Path, eval_fixtures_dir: Path) -> None:
    stage = path.parent.name
    cfg = load_config(stage_config(stage), path)
    if stage == "data":
        for spec in (cfg.download.media_source, cfg.download.parquet_source):
            src = parse_source(spec)
            if spec.startswith("hf://"):
                assert src.kind == "hf" and src.location == spec.removeprefix("hf://")
            else:
                assert src.kind == "local"
    if stage == "eval":
        if cfg.demo_data:  # tiny: the fixtures stand in for every benchmark (written locally, no network)
            cfg.demo_data = str(eval_fixtures_dir)
        resolved = resolve_benchmarks(cfg)
        assert resolved
        for b in resolved:
            spec = source_spec(b)
            if spec.startswith(
                "hf://"
            ):  # the published recipes: the registry's dataset, fetched from the hub
                assert parse_source(spec).kind == "hf"
                assert spec == f"hf://{registry.get(b.name).hub_id}", b.name
            else:
                assert Path(spec).exists(), spec


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.name)
def test_shipped_study_rows_load_on_the_rl_and_eval_configs(path: Path) -> None:
    from paravt_core.ablation import eval_overrides, load_study_file, rl_overrides

    study = load_study_file(path)
    assert all(registry.get(b) for b in study.benchmarks)
    for name in study.names():
        load_config(
            stage_config("rl"), REPO / "configs" / "rl" / "paragrpo_8b.yaml", rl_overrides(study, name, [])
        )
        load_config(
            stage_config("eval"), REPO / "configs" / "eval" / "release.yaml", eval_overrides(study, name, [])
        )


def _tiny(stage: str):
    return load_config(stage_config(stage), REPO / "configs" / stage / "tiny.yaml")


def test_tiny_configs_chain_with_the_demo_paths() -> None:
    """data -> SFT -> RL -> eval -> report: each tiny config reads what the one before writes, under
    demo-out/ (``make demo``'s directory; the demo's own run writes the same tree)."""
    data, sft, rl, ev, report = (_tiny(s) for s in ("data", "sft", "rl", "eval", "report"))
    assert data.download.media_source == "demo-out/synth/source"  # `paravt synth demo-out/synth`
    assert data.download.parquet_source == "demo-out/synth/parquet"
    assert sft.model.uri == "demo-out/tiny-model"  # `paravt tiny-model demo-out/tiny-model`
    assert sft.data.input == data.output == rl.data == "demo-out/data"
    assert rl.model == f"{sft.output}/final" == "demo-out/run/sft/final"
    assert ev.model == f"{rl.output}/final" == "demo-out/run/rl/final"
    assert report.eval_outputs == [ev.output] and report.sft_output == sft.output
    assert report.rl_output == rl.output and report.output == "demo-out/run/report"
