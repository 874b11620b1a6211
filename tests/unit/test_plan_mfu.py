"""`paravt plan`'s MFU: the latest GPU run recorded in docs/gpu-runs.md, else the assumed 40 %, with the
source; never a figure of one FLOP rule read as another (the model-FLOPs rule, the older 6N rule)."""

from __future__ import annotations

from pathlib import Path

import pytest

from paravt_core.plan.report import GPU_RUNS, LEGACY_6N_RATIOS, MFU, learner_mfu, learner_utilisation


def test_latest_recorded_run_with_an_mfu_wins(tmp_path: Path) -> None:
    runs = tmp_path / "gpu-runs.md"
    runs.write_text(
        "# Runs\n"
        '<!-- gpu-run: {"date": "d1", "device": "H100", "rule": "model", "mfu": 0.074, "hfu": 0.09} -->\n'
        "text\n"
        '<!-- gpu-run: {"date": "d2", "device": "H200", "rule": "model", "mfu": 0.31, "hfu": 0.4, '
        '"mfu_6n": 0.35, "tokens_per_s": 24000} -->\n'
        '<!-- gpu-run: {"date": "d3", "device": "CPU", "rule": "model", "mfu": null} -->\n'
    )
    assert learner_mfu(runs) == (0.31, "measured: gpu-runs.md, d2 on H200")
    u = learner_utilisation(runs)
    assert (u.mfu, u.hfu) == (0.31, 0.4)  # the model rule's figure, never the 6N one beside it


def test_a_rule_less_marker_is_the_6n_run_converted_another_rule_is_skipped(tmp_path: Path) -> None:
    runs = tmp_path / "gpu-runs.md"
    runs.write_text(
        '<!-- gpu-run: {"date": "d1", "device": "H100", "mfu": 0.074, "tokens_per_s": 5742} -->\n'
        '<!-- gpu-run: {"date": "d2", "device": "H200", "rule": "other", "mfu": 0.5} -->\n'
    )
    u = learner_utilisation(runs)
    assert u.mfu == pytest.approx(0.074 * 0.767) and u.hfu == pytest.approx(0.074 * 0.955)
    assert u.source == "measured: gpu-runs.md, d1 on H100, 6N-rule MFU 7.4% x 0.767 to the model rule"


def test_no_recorded_run_falls_back_to_the_assumption(tmp_path: Path) -> None:
    assert learner_mfu(tmp_path / "absent.md") == (MFU, "assumed: no GPU run recorded")
    empty = tmp_path / "gpu-runs.md"
    empty.write_text("# Runs on a real GPU\nnothing yet\n")
    assert learner_mfu(empty) == (0.40, "assumed: no GPU run recorded")
    assert learner_utilisation(empty).hfu is None


def test_the_repository_file_gives_the_2026_11_26_h100_run_under_the_model_rule() -> None:
    # its marker records 7.4 % under 6N; the model rule's MFU of the same run is 0.767 x that
    mfu, source = learner_mfu()
    assert GPU_RUNS.name == "gpu-runs.md" and GPU_RUNS.is_file()
    assert LEGACY_6N_RATIOS == {"mfu": 0.767, "hfu": 0.955}
    assert mfu == pytest.approx(0.074 * 0.767) and "2026-11-26" in source and "H100" in source
    assert "6N-rule MFU 7.4%" in source
