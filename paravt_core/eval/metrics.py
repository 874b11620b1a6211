"""Benchmark metrics from per-sample records (pure functions; percentages, rounded only when shown).

A record is the dict the runner writes: ``status`` ``ok`` (scored, ``score`` in [0, 1]) or ``error``. Errors
never enter a denominator as wrong answers: every metric is over the scored samples, and the error count sits
beside it (``accuracy_errors_as_wrong`` is the lower bound a reader may want).

- accuracy: mean score x 100 (MCQ scores are 0/1);
- Video-MME: accuracy per ``duration`` group (short / medium / long);
- MLVU: micro (over all samples) and macro (mean of the per-``task_type`` accuracies);
- MMVU: multiple-choice accuracy and open-ended accuracy (judge scores, or token F1 without a judge);
- Charades: mIoU (mean IoU x 100) and R@0.3 / 0.5 / 0.7 (share of samples with IoU >= t, x 100).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

RECALL_THRESHOLDS = (0.3, 0.5, 0.7)
VIDEOMME_GROUPS = ("short", "medium", "long")


def _pct(values: list[float]) -> float | None:
    return 100.0 * sum(values) / len(values) if values else None


def scored(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("status") == "ok"]


def accuracy(records: list[dict[str, Any]]) -> float | None:
    return _pct([float(r["score"]) for r in scored(records)])


def grouped_accuracy(records: list[dict[str, Any]], key: str, order: tuple[str, ...] = ()) -> dict[str, Any]:
    groups: dict[str, list[float]] = defaultdict(list)
    for r in scored(records):
        groups[str((r.get("meta") or {}).get(key))].append(float(r["score"]))
    names = [g for g in order if g in groups] + sorted(g for g in groups if g not in order)
    return {g: _pct(groups[g]) for g in names}


def charades_metrics(records: list[dict[str, Any]]) -> dict[str, Any]:
    ious = [float(r["score"]) for r in scored(records)]
    out: dict[str, Any] = {"miou": _pct(ious)}
    for t in RECALL_THRESHOLDS:
        out[f"r@{t}"] = _pct([1.0 if iou >= t else 0.0 for iou in ious])
    return out


def benchmark_metrics(benchmark: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Headline and breakdowns of one benchmark under one protocol."""
    ok = scored(records)
    errors = [r for r in records if r.get("status") == "error"]
    out: dict[str, Any] = {"samples": len(records), "scored": len(ok), "errors": len(errors)}
    if benchmark == "charades":
        out.update(charades_metrics(records))
        out["headline"] = "miou"
    else:
        out["accuracy"] = accuracy(records)
        out["headline"] = "accuracy"
        total = len(ok) + len(errors)
        out["accuracy_errors_as_wrong"] = (
            100.0 * sum(float(r["score"]) for r in ok) / total if total else None
        )
    if benchmark in ("videomme", "videomme_wsub"):
        out["by_duration"] = grouped_accuracy(records, "duration", VIDEOMME_GROUPS)
    elif benchmark == "longvideobench":
        out["by_duration_group"] = grouped_accuracy(records, "duration_group")
    elif benchmark == "mlvu":
        per_type = grouped_accuracy(records, "task_type")
        out["by_task_type"] = per_type
        out["micro"] = out["accuracy"]
        vals = [v for v in per_type.values() if v is not None]
        out["macro"] = sum(vals) / len(vals) if vals else None
    elif benchmark == "mmvu":
        kinds = grouped_accuracy(records, "kind")
        out["mc_accuracy"] = kinds.get("multiple-choice")
        out["oe_accuracy"] = kinds.get("open-ended")
        out["oe_scored_by"] = sorted({r.get("score_source") for r in ok if r.get("qtype") == "oe"} - {None})
    out["errors_by_reason"] = dict(Counter(str(r.get("error", {}).get("reason")) for r in errors))
    out["finish_reasons"] = dict(Counter(str(r.get("finish_reason")) for r in records))
    calls = [int(r.get("tool_calls") or 0) for r in ok]
    out["avg_tool_calls"] = sum(calls) / len(calls) if calls else None
    out["tool_use_rate"] = _pct([1.0 if c > 0 else 0.0 for c in calls])
    return out


def headline(metrics: dict[str, Any]) -> float | None:
    return metrics.get(metrics.get("headline", "accuracy"))
