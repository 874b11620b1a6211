"""Every ``paravt`` verb answers a bad argument with one clear line on stderr and exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from paravt_core.cli import main
from tests.support.paths import ROOT


def run_main(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse exits by itself
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.err


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["synth", "{out}", "--videos", "3"], ["paravt synth: error:", "--videos", "must be >= 4, got 3"]),
        (["synth", "{out}", "--videos", "many"], ["--videos", "expected a whole number, got 'many'"]),
        (["synth", "{out}", "--seconds", "4"], ["--seconds", "must be a finite number >= 5, got 4"]),
        (["synth", "{out}", "--seconds", "nan"], ["--seconds", "got nan"]),
        (["synth", "{out}", "--seed", "-1"], ["--seed", "must be >= 0, got -1"]),
        (["synth"], ["the following arguments are required: out_dir"]),
        (["demo", "--out-dir", "{out}", "--videos", "2"], ["paravt demo: error:", "must be >= 4, got 2"]),
        (["tiny-model", "{out}", "--seed", "x"], ["paravt tiny-model: error:", "--seed"]),
        (
            ["pipeline", "compile", "bogus", "{out}/p.yaml"],
            ["unknown pipeline 'bogus'; known: ablations, nightly, train"],
        ),
        (["pipeline"], ["required: pipeline_command"]),
        (["data", "--config", "{out}/missing.yaml"], ["config file not found", "missing.yaml"]),
        (["data", "nosuch.key=1"], ["config error: unknown config key 'nosuch'"]),
        (["agent", "run", "--model", "m"], ["paravt agent run: error:", "--video, --question"]),
        (["agent", "run", "--model", "m", "--video", "v", "--question", "q", "--engine", "x"], ["--engine"]),
        (["plan", "--config", "{out}/missing.yaml"], ["config file not found", "missing.yaml"]),
        (
            ["plan", "--config", "c.yaml", "--gpus", "0"],
            ["paravt plan: error:", "--gpus", "must be >= 1, got 0"],
        ),
        (["bogus"], ["invalid choice: 'bogus'"]),
    ],
)
def test_bad_arguments_are_one_line_with_status_2(argv, needles, tmp_path, capsys):
    out = tmp_path / "out"
    code, err = run_main([a.replace("{out}", str(out)) for a in argv], capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and err.endswith("\n"), err  # exactly one line
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    assert not out.exists()  # nothing was written for a bad argument


def test_synth_into_a_foreign_directory(tmp_path, capsys):
    (tmp_path / "parquet").mkdir()
    code, err = run_main(["synth", str(tmp_path)], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "not written by `paravt synth`" in err and "Traceback" not in err


def test_the_installed_entry_point(tmp_path):
    """``paravt synth OUT --videos 3`` through a real interpreter: a usage error (exit 2), no ValueError traceback."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "paravt_core.cli", "synth", str(tmp_path / "out"), "--videos", "3"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr == (
        "paravt synth: error: argument --videos: must be >= 4, got 3 (see paravt synth --help)\n"
    )
