"""``paravt_core.stage``'s smaller rules, on a toy config in a tmp directory: the result's JSON written out by
hand, ``file://`` locations, when ``PARAVT_SHOW_CONFIG`` prints the whole config (highlighted as YAML on a
terminal) and the reused line printed without rich's highlighting. In-process, milliseconds each."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from pydantic import BaseModel
from rich.console import Console

from paravt_core import stage
from paravt_core.stage import StageResult, StageRun, announce_config, same_location


class Toy(BaseModel):
    output: str = ""
    steps: int = 3


def _terminal() -> tuple[Console, io.StringIO]:
    """A console that writes colours, as on a terminal (the module's writes none to a pipe)."""
    out = io.StringIO()
    return Console(file=out, force_terminal=True, color_system="standard", width=120, soft_wrap=True), out


def test_the_results_json_by_hand():
    result = StageResult("sft", {"model": "s3://b/final"}, {"loss": 0.5})
    assert result.to_json() == (
        '{\n  "stage": "sft",\n  "outputs": {\n    "model": "s3://b/final"\n  },\n  "metrics": {\n'
        '    "loss": 0.5\n  }\n}'
    )


def test_a_file_uri_names_the_same_place_as_its_path(tmp_path: Path):
    assert same_location(f"file://{tmp_path}/out", str(tmp_path / "out"))
    assert same_location(f"file://{tmp_path}/out/", f"{tmp_path}/./out")
    assert not same_location(f"file://{tmp_path}/out", str(tmp_path / "other"))
    assert same_location("s3://b/run/", "s3://b/run") and not same_location("s3://b/run", "s3://b/run2")


@pytest.mark.parametrize(("value", "shown"), [("", False), ("0", False), ("false", False), (" 0 ", False),
                                              ("1", True), ("yes", True)])  # fmt: skip
def test_the_whole_config_is_printed_only_when_asked(value, shown, tmp_path: Path, monkeypatch):
    console, out = _terminal()
    monkeypatch.setattr(stage, "console", console)
    monkeypatch.setenv("PARAVT_SHOW_CONFIG", value)
    announce_config("toy", Toy(output=str(tmp_path)), str(tmp_path))
    text = out.getvalue()
    assert ("paravt toy: resolved config\x1b" in text) is shown
    assert text.endswith(f"paravt toy: resolved config saved to {tmp_path / 'config.yaml'}\n")
    # the YAML lexer colours a key apart from its value (a plain-text lexer styles the whole line alike)
    assert bool(re.search(r"\x1b\[[0-9;]+msteps\x1b\[0m", text)) is shown


def test_the_reused_line_is_not_highlighted_on_a_terminal(tmp_path: Path):
    console, out = _terminal()
    run = StageRun("sft", str(tmp_path / "run-1"), complete=True, console=console)
    result = run.reused({"model": "m"}, {"loss": 0.5})
    assert result == StageResult("sft", {"model": "m"}, {"loss": 0.5, "reused_output": True})
    # rich's highlighter would colour the path and the number in it
    assert out.getvalue() == (
        f"paravt sft: {tmp_path / 'run-1'} is complete with the same config; reused, nothing to do\n"
    )
