"""Benchmark metrics from per-sample records (pure functions; percentages, rounded only when shown).

A record is the dict the runner writes: ``status`` ``ok`` (scored, ``score`` in [0, 1]) or ``error``. The
*error rule* decides what an error is worth in the headline:

- ``paravt`` (ours): errors never enter a denominator as wrong answers: every metric is over the scored
  samples, and the error count sits beside it (``accuracy_errors_as_wrong`` is the lower bound a reader may want);
- ``release`` (the released driver, ``paravt/eval/utils.py`` ``run_dataset``/``base_result`` and ``driver.py``
  ``eval_one`` at cf55249): a multiple-choice error is a wrong answer (its result has ``correct=False`` and stays in
  the denominator), so the headline is ``accuracy_errors_as_wrong``; Charades leaves out results with an
  ``error`` (a missing video, a crash) but scores an engine failure inside the agent loop as the reply
  "[API error: ...]", which names no interval: IoU 0 (``miou_errors_as_zero`` counts our engine errors, timeouts
  and context overflows that way).

- accuracy: mean score x 100 (MCQ scores are 0/1; an answer that names no option, or two, scores 0);
- Video-MME: accuracy per ``duration`` group (short / medium / long);
- MLVU: micro (over all samples; the headline: the release's driver, which made the published number, reports
  the accuracy over all questions) and M-avg (mean of the per-``task_type`` accuracies: lmms-eval's MLVU score),
  side by side;
- MMVU: multiple-choice accuracy (the headline) and open-ended accuracy apart, and ``all_items_accuracy`` (over
  every scored item, lmms-eval's ``mmvu_val`` number) beside them; open-ended items scored by token F1 (no judge,
  or a judge that fell back) are marked not comparable with a judged number;
- LongVideoBench: unparseable answers count as wrong; the release's extractor falls back to the reply's first
  character (right when it happens to be the gold letter) and lmms-eval's parser answers a random letter, which
  adds about 1/n of them (n options) - the count is reported so the three can be related;
- Charades: mIoU (mean IoU x 100) and R@0.3 / 0.5 / 0.7 (share of samples with IoU >= t, x 100).

``headline`` names the metric the published table's number corresponds to; ``notes`` say how it relates to the
published and to lmms-eval's number.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

RECALL_THRESHOLDS = (0.3, 0.5, 0.7)
ERROR_RULES = ("paravt", "release")
# Errors that happen inside the release's agent loop (a failed completion): scored there as a reply.
IN_LOOP_ERRORS = ("engine_error", "engine_timeout", "context_overflow")
UNREAD = (
    "unparseable_letter",
    "hedged_letter",
    "empty_answer",
)  # a multiple-choice answer that names no option
VIDEOMME_GROUPS = ("short", "medium", "long")
# LongVideoBench's duration groups (seconds), shortest first: as strings they would sort 15, 3600, 60, 600
LONGVIDEOBENCH_GROUPS = ("15", "60", "600", "3600")


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


def benchmark_metrics(
    benchmark: str, records: list[dict[str, Any]], error_rule: str = "paravt"
) -> dict[str, Any]:
    """Headline and breakdowns of one benchmark under one protocol (``error_rule``: see the module docstring)."""
    if error_rule not in ERROR_RULES:
        raise ValueError(f"unknown error rule {error_rule!r}; known: {', '.join(ERROR_RULES)}")
    ok = scored(records)
    errors = [r for r in records if r.get("status") == "error"]
    out: dict[str, Any] = {
        "samples": len(records),
        "scored": len(ok),
        "errors": len(errors),
        "error_rule": error_rule,
    }
    if benchmark == "charades":
        out.update(charades_metrics(records))
        out["headline"] = "miou"
        in_loop = [r for r in errors if (r.get("error") or {}).get("reason") in IN_LOOP_ERRORS]
        total = len(ok) + len(in_loop)
        out["miou_errors_as_zero"] = 100.0 * sum(float(r["score"]) for r in ok) / total if total else None
        out["denominator"] = total if error_rule == "release" else len(ok)
        if error_rule == "release":
            out["headline"] = "miou_errors_as_zero"
    else:
        out["accuracy"] = accuracy(records)
        out["headline"] = "accuracy"
        total = len(ok) + len(errors)
        out["accuracy_errors_as_wrong"] = (
            100.0 * sum(float(r["score"]) for r in ok) / total if total else None
        )
        out["denominator"] = total if error_rule == "release" else len(ok)
        if error_rule == "release":
            out["headline"] = "accuracy_errors_as_wrong"
    if benchmark in ("videomme", "videomme_wsub"):
        out["by_duration"] = grouped_accuracy(records, "duration", VIDEOMME_GROUPS)
    notes: list[str] = []
    if benchmark == "longvideobench":
        out["by_duration_group"] = grouped_accuracy(records, "duration_group", LONGVIDEOBENCH_GROUPS)
        unread = sum(r.get("score_reason") in UNREAD for r in ok)
        out["unparseable_as_wrong"] = unread
        notes.append(
            f"{unread} unparseable answer(s) counted wrong; the release reads the reply's first character for "
            "them (right when it is the gold letter) and lmms-eval's LongVideoBench parser answers a random "
            "letter (about 1 in 4-5 of them right by chance)"
        )
    elif benchmark == "mlvu":
        per_type = grouped_accuracy(records, "task_type")
        out["by_task_type"] = per_type
        out["micro"] = out["accuracy"]
        vals = [v for v in per_type.values() if v is not None]
        out["macro"] = out["m_avg"] = sum(vals) / len(vals) if vals else None
        notes.append("headline: micro accuracy over all questions (the release's driver, published number); "
                     "M-avg over task types (lmms-eval's MLVU score) beside it")  # fmt: skip
    elif benchmark == "mmvu":
        kinds = grouped_accuracy(records, "kind")
        out["mc_accuracy"] = kinds.get("multiple-choice")
        out["oe_accuracy"] = kinds.get("open-ended")
        mc_all = [r for r in records if (r.get("meta") or {}).get("kind") == "multiple-choice"]
        mc_ok = scored(mc_all)
        out["mc_accuracy_errors_as_wrong"] = (
            100.0 * sum(float(r["score"]) for r in mc_ok) / len(mc_all) if mc_all else None
        )
        sources = sorted({r.get("score_source") for r in ok if r.get("qtype") == "oe"} - {None})
        out["oe_scored_by"] = sources
        out["oe_comparable"] = bool(sources) and sources == ["judge"]
        # lmms-eval's mmvu_val headline (tasks/mmvu/utils.py mmvu_aggregate_results_val, 0.7.3): correct over
        # ALL items, multiple choice and open-ended together (open-ended: rule scorer, then a judge)
        out["all_items_accuracy"] = out["accuracy"]
        out["headline"] = "mc_accuracy_errors_as_wrong" if error_rule == "release" else "mc_accuracy"
        out["denominator"] = len(mc_all) if error_rule == "release" else len(mc_ok)
        notes.append("headline: multiple-choice accuracy; open-ended items apart"
                     + ("" if out["oe_comparable"] or not sources else
                        " (scored by token F1, not by the LLM judge: not comparable)"))  # fmt: skip
    out["notes"] = notes
    out["errors_by_reason"] = dict(Counter(str(r.get("error", {}).get("reason")) for r in errors))
    out["finish_reasons"] = dict(Counter(str(r.get("finish_reason")) for r in records))
    calls = [int(r.get("tool_calls") or 0) for r in ok]
    out["avg_tool_calls"] = sum(calls) / len(calls) if calls else None
    out["tool_use_rate"] = _pct([1.0 if c > 0 else 0.0 for c in calls])
    return out


def headline(metrics: dict[str, Any]) -> float | None:
    return metrics.get(metrics.get("headline", "accuracy"))
