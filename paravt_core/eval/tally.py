"""Counting over per-sample records: what every benchmark's metrics are made of (pure; percentages).

A record is the dict the runner writes: ``status`` ``ok`` (scored, ``score`` in [0, 1]) or ``error``. These
helpers name no benchmark: ``metrics`` builds the shared headline from them and each benchmark's own
breakdown (``benchmarks/<name>.py``) its groups.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any


def pct(values: list[float]) -> float | None:
    """The mean of ``values`` x 100; None for no values."""
    return 100.0 * sum(values) / len(values) if values else None


def scored(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("status") == "ok"]


def accuracy(records: list[dict[str, Any]]) -> float | None:
    return pct([float(r["score"]) for r in scored(records)])


def grouped_accuracy(records: list[dict[str, Any]], key: str, order: tuple[str, ...] = ()) -> dict[str, Any]:
    """Accuracy per value of ``meta[key]``: the groups of ``order`` first (those present), then the rest sorted."""
    groups: dict[str, list[float]] = defaultdict(list)
    for r in scored(records):
        groups[str((r.get("meta") or {}).get(key))].append(float(r["score"]))
    names = [g for g in order if g in groups] + sorted(g for g in groups if g not in order)
    return {g: pct(groups[g]) for g in names}
