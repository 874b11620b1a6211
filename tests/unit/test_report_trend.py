"""Nightly trend as pure functions, on hand-made nights: values, deltas (skipping nights without a
value), failed nights shown as failed (including a stale RUNNING one), eval headline extraction."""

from __future__ import annotations

import pytest

from paravt_core.report.render import cell_text, trend_markdown
from paravt_core.report.trend import (
    FAILED,
    RUNNING,
    SUCCEEDED,
    BenchmarkResult,
    Cell,
    Night,
    Series,
    eval_scores,
    latest_deltas,
    night_state,
    trend_table,
)

TODAY = "2026-11-23"
VMME, CHAR = Series("videomme", "agentic"), Series("charades", "agentic")


def _ok(**scores: float) -> BenchmarkResult:
    return BenchmarkResult(SUCCEEDED, dict(scores))


NIGHTS = [
    # Given out of order: the table sorts by date.
    Night("2026-11-23", SUCCEEDED, "ckpt-4", {"videomme": _ok(agentic=61.0), "charades": _ok(agentic=49.5)}),
    Night("2026-11-20", SUCCEEDED, "ckpt-1", {"videomme": _ok(agentic=60.0), "charades": _ok(agentic=48.0)}),
    Night(
        "2026-11-21",
        FAILED,
        "ckpt-2",
        {"videomme": _ok(agentic=61.5), "charades": BenchmarkResult(FAILED, error="OOM")},
        error="task eval failed",
    ),
    Night("2026-11-22", RUNNING, "ckpt-3"),  # died before its final step
]


def test_trend_table_values_deltas_and_failed_nights() -> None:
    columns, rows = trend_table(NIGHTS, TODAY)
    assert columns == [CHAR, VMME]  # sorted by benchmark name
    assert [n.date for n, _ in rows] == ["2026-11-20", "2026-11-21", "2026-11-22", "2026-11-23"]
    got = [{s.benchmark: c for s, c in cells.items()} for _, cells in rows]
    # 11-20: first values, no delta.
    assert got[0] == {"videomme": Cell(SUCCEEDED, 60.0), "charades": Cell(SUCCEEDED, 48.0)}
    # 11-21: videomme 61.5 - 60.0 = +1.5; charades failed on a failed night.
    assert got[1]["videomme"] == Cell(SUCCEEDED, 61.5, pytest.approx(1.5))
    assert got[1]["charades"] == Cell(FAILED)
    # 11-22: RUNNING from an earlier date = failed, for every series (not missing).
    assert got[2] == {"videomme": Cell(FAILED), "charades": Cell(FAILED)}
    # 11-23: videomme 61.0 - 61.5 = -0.5; charades 49.5 - 48.0 = +1.5 (previous value: 11-20).
    assert got[3]["videomme"] == Cell(SUCCEEDED, 61.0, pytest.approx(-0.5))
    assert got[3]["charades"] == Cell(SUCCEEDED, 49.5, pytest.approx(1.5))


def test_running_night_of_today_is_running() -> None:
    night = Night(TODAY, RUNNING, "c", {"videomme": BenchmarkResult(RUNNING)})
    _, rows = trend_table([night], TODAY)
    assert rows[0][1] == {}  # no series has a value yet: no columns
    columns, rows = trend_table([NIGHTS[1], night], TODAY)
    assert rows[1][1][VMME] == Cell(RUNNING)


def test_latest_deltas() -> None:
    assert latest_deltas(NIGHTS, TODAY) == {
        "nights": 4.0,
        "failed_nights": 2.0,  # 11-21 (failed) and 11-22 (stale RUNNING)
        "videomme.agentic": 61.0,
        "videomme.agentic.delta": pytest.approx(-0.5),
        "charades.agentic": 49.5,
        "charades.agentic.delta": pytest.approx(1.5),
    }


def test_markdown_newest_first_with_failed_cells() -> None:
    columns, rows = trend_table(NIGHTS, TODAY)
    lines = trend_markdown(columns, rows, TODAY).splitlines()
    assert lines[0] == "| night | state | charades (agentic) | videomme (agentic) |"
    assert lines[2] == "| 2026-11-23 | succeeded | 49.5 (+1.5) | 61.0 (-0.5) |"
    assert lines[3] == "| 2026-11-22 | failed | failed | failed |"
    assert lines[4] == "| 2026-11-21 | failed | failed | 61.5 (+1.5) |"
    assert lines[5] == "| 2026-11-20 | succeeded | 48.0 | 60.0 |"
    assert cell_text(Cell("")) == "—"


def test_night_state() -> None:
    ok, bad = _ok(agentic=1.0), BenchmarkResult(FAILED)
    assert night_state("", {"a": ok}) == SUCCEEDED
    assert night_state("SUCCEEDED", {"a": ok}) == SUCCEEDED
    assert night_state("", {"a": ok, "b": bad}) == FAILED
    assert (
        night_state("SUCCEEDED", {"a": ok, "b": bad}) == FAILED
    )  # a benchmark without result fails the night
    assert night_state("CANCELED", {"a": ok}) == FAILED
    assert night_state("", {}) == FAILED  # nothing evaluated


def test_night_json_round_trip() -> None:
    for night in NIGHTS:
        assert Night.from_json(night.to_json()) == night


def test_eval_scores_take_each_protocols_headline() -> None:
    results = {
        "protocols": {
            "agentic": {
                "videomme": {"accuracy": 61.0, "headline": "accuracy", "errors": 0},
                "charades": {"miou": 49.5, "r@0.5": 52.0, "headline": "miou"},
            },
            "direct": {"videomme": {"accuracy": 55.25, "headline": "accuracy"}},
        }
    }
    assert eval_scores(results, "videomme") == {"agentic": 61.0, "direct": 55.25}
    assert eval_scores(results, "charades") == {"agentic": 49.5}
    assert eval_scores(results, "mlvu") == {}
