"""Nightly eval trend: night summaries, the per-series table of scores and deltas. Pure functions.

A *night* is one run of the nightly eval pipeline, keyed by its date. A *series* is one
(benchmark, protocol) pair followed across nights; its value on a night is the eval's headline metric
(accuracy in %, Charades mIoU). A night whose run failed is shown as failed, never dropped: its
benchmarks that produced no result are cells with state FAILED, and a night still marked RUNNING
from an earlier date (its run died before the final step) counts as failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SUCCEEDED, FAILED, RUNNING = "SUCCEEDED", "FAILED", "RUNNING"
# KFP final states that mean "this run did not finish well".
_FAILED_STATES = {"FAILED", "CANCELED", "CANCELLED", "ERROR"}


@dataclass(frozen=True)
class BenchmarkResult:
    state: str  # SUCCEEDED or FAILED
    scores: dict[str, float] = field(default_factory=dict)  # protocol -> headline value
    error: str = ""


@dataclass(frozen=True)
class Night:
    date: str  # YYYY-MM-DD
    state: str  # SUCCEEDED, FAILED or RUNNING
    checkpoint: str = ""
    benchmarks: dict[str, BenchmarkResult] = field(default_factory=dict)
    error: str = ""
    run_id: str = ""  # the KFP run that evaluated this night

    def to_json(self) -> dict[str, Any]:
        return {
            "date": self.date,
            "state": self.state,
            "checkpoint": self.checkpoint,
            "error": self.error,
            "run_id": self.run_id,
            "benchmarks": {
                name: {"state": b.state, "scores": dict(b.scores), "error": b.error}
                for name, b in sorted(self.benchmarks.items())
            },
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Night:
        benches = {
            name: BenchmarkResult(
                b["state"], {k: float(v) for k, v in b.get("scores", {}).items()}, b.get("error", "")
            )
            for name, b in data.get("benchmarks", {}).items()
        }
        return cls(
            data["date"],
            data["state"],
            data.get("checkpoint", ""),
            benches,
            data.get("error", ""),
            data.get("run_id", ""),
        )


@dataclass(frozen=True)
class Cell:
    state: str  # SUCCEEDED, FAILED (no value), RUNNING, or "" (series not evaluated that night)
    value: float | None = None
    delta: float | None = None  # value minus the series' previous value (skipping nights without one)


@dataclass(frozen=True)
class Series:
    benchmark: str
    protocol: str

    @property
    def label(self) -> str:
        return f"{self.benchmark} ({self.protocol})"


def eval_scores(results: dict[str, Any], benchmark: str) -> dict[str, float]:
    """Headline value per protocol of ``benchmark`` in an eval stage's ``results.json``
    (``protocols[protocol][benchmark]`` holds the metrics and names its headline metric)."""
    scores = {}
    for protocol, benches in results.get("protocols", {}).items():
        metrics = benches.get(benchmark)
        if not metrics:
            continue
        value = metrics.get(metrics.get("headline", "accuracy"))
        if isinstance(value, int | float) and not isinstance(value, bool):
            scores[protocol] = float(value)
    return scores


def night_state(run_state: str, benchmarks: dict[str, BenchmarkResult]) -> str:
    """FAILED when the run failed (KFP's final state) or any benchmark has no result; FAILED too when
    nothing was evaluated; else SUCCEEDED."""
    if run_state.upper() in _FAILED_STATES or any(b.state != SUCCEEDED for b in benchmarks.values()):
        return FAILED
    return SUCCEEDED if benchmarks or run_state.upper() == SUCCEEDED else FAILED


def effective_state(night: Night, today: str) -> str:
    """RUNNING on an earlier date means the run died before writing its final state: failed."""
    return FAILED if night.state == RUNNING and night.date < today else night.state


def series_of(nights: list[Night]) -> list[Series]:
    found = {
        Series(bench, protocol)
        for night in nights
        for bench, result in night.benchmarks.items()
        for protocol in result.scores
    }
    return sorted(found, key=lambda s: (s.benchmark, s.protocol))


def _cell(night: Night, series: Series, today: str) -> tuple[str, float | None]:
    state = effective_state(night, today)
    result = night.benchmarks.get(series.benchmark)
    if result is None:
        # Not evaluated: a failed or unfinished night still shows as such for every series.
        return (state, None) if state != SUCCEEDED else ("", None)
    if result.state == SUCCEEDED:
        # A benchmark that ran without this protocol: not evaluated, not failed.
        return (SUCCEEDED, result.scores[series.protocol]) if series.protocol in result.scores else ("", None)
    return (RUNNING if state == RUNNING and result.state != FAILED else FAILED), None


def trend_table(
    nights: list[Night], today: str
) -> tuple[list[Series], list[tuple[Night, dict[Series, Cell]]]]:
    """Series and, per night (oldest first), one cell per series with its delta against the
    series' previous value."""
    ordered = sorted(nights, key=lambda n: n.date)
    columns = series_of(ordered)
    previous: dict[Series, float] = {}
    rows = []
    for night in ordered:
        cells = {}
        for series in columns:
            state, value = _cell(night, series, today)
            delta = None
            if value is not None:
                if series in previous:
                    delta = value - previous[series]
                previous[series] = value
            cells[series] = Cell(state, value, delta)
        rows.append((night, cells))
    return columns, rows


def latest_deltas(nights: list[Night], today: str) -> dict[str, float]:
    """Flat metrics of the most recent night: ``<bench>.<protocol>`` value and ``.delta`` (when known),
    plus ``nights`` and ``failed_nights`` counted over the nights given."""
    columns, rows = trend_table(nights, today)
    out: dict[str, float] = {
        "nights": float(len(rows)),
        "failed_nights": float(sum(effective_state(n, today) == FAILED for n, _ in rows)),
    }
    if rows:
        _, cells = rows[-1]
        for series in columns:
            cell = cells[series]
            if cell.value is not None:
                out[f"{series.benchmark}.{series.protocol}"] = cell.value
            if cell.delta is not None:
                out[f"{series.benchmark}.{series.protocol}.delta"] = cell.delta
    return out
