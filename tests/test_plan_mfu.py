"""`paravt plan`'s MFU: the latest GPU run recorded in docs/gpu-runs.md, else the assumed 40 %, with the source."""

from __future__ import annotations

from pathlib import Path

from paravt_core.plan.report import GPU_RUNS, MFU, learner_mfu


def test_latest_recorded_run_with_an_mfu_wins(tmp_path: Path) -> None:
    runs = tmp_path / "gpu-runs.md"
    runs.write_text(
        "# Runs\n"
        '<!-- gpu-run: {"date": "d1", "device": "H100", "mfu": 0.074, "tokens_per_s": 5742} -->\n'
        "text\n"
        '<!-- gpu-run: {"date": "d2", "device": "H200", "mfu": 0.31, "tokens_per_s": 24000} -->\n'
        '<!-- gpu-run: {"date": "d3", "device": "CPU", "mfu": null, "tokens_per_s": 1900} -->\n'
    )
    assert learner_mfu(runs) == (0.31, "measured: gpu-runs.md, d2 on H200")


def test_no_recorded_run_falls_back_to_the_assumption(tmp_path: Path) -> None:
    assert learner_mfu(tmp_path / "absent.md") == (MFU, "assumed: no GPU run recorded")
    empty = tmp_path / "gpu-runs.md"
    empty.write_text("# Runs on a real GPU\nnothing yet\n")
    assert learner_mfu(empty) == (0.40, "assumed: no GPU run recorded")


def test_the_repository_file_gives_the_2026_11_26_h100_run() -> None:
    mfu, source = learner_mfu()
    assert GPU_RUNS.name == "gpu-runs.md" and GPU_RUNS.is_file()
    assert mfu == 0.074 and "2026-11-26" in source and "H100" in source
