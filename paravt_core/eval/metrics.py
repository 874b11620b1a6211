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
  and context overflows that way under ``agentic``; without the tool the release's failure is an error result,
  left out).

- accuracy: mean score x 100 (MCQ scores are 0/1; an answer that names no option, or two, scores 0);
- Video-MME: accuracy per ``duration`` group (short / medium / long);
- MLVU: micro (over all samples; the headline: the release's driver, which made the published number, reports
  the accuracy over all questions) and M-avg (mean of the per-``task_type`` accuracies: lmms-eval's MLVU score),
  side by side;
- MMVU: multiple-choice accuracy (the headline under error rule paravt) and open-ended accuracy apart, and
  ``all_items_accuracy`` (over every scored item, lmms-eval's ``mmvu_val`` number) beside them; under error rule
  release the headline is the release's: correct over every item (its loader makes every validation item
  multiple choice, so an open-ended item is right only when its gold is the letter read; errors wrong), the
  multiple-choice-only number beside it; open-ended items scored by token F1 (no judge, or a judge that fell
  back) are marked not comparable with a judged number;
- LongVideoBench: unparseable answers count as wrong; the release's extractor falls back to the reply's first
  character (right when it happens to be the gold letter) and lmms-eval's parser answers a random letter, which
  adds about 1/n of them (n options) - the count is reported so the three can be related;
- Charades: mIoU (mean IoU x 100) and R@0.3 / 0.5 / 0.7 (share of samples with IoU >= t, x 100).

Readers: ``robust`` (ours, ``scoring.score_sample``: the record's ``score``) and ``release`` (the release's
``extract_letter`` / ``extract_time_from_response``, ``readers.release_score``: the record's ``release_score``,
worked out from ``final_text`` when a record predates it). The headline uses one (by default the release's under
error rule release, ours otherwise); both headlines are kept (``accuracy_robust`` / ``accuracy_release``, Charades
``miou_robust`` / ``miou_release``) with the number of samples the two read differently (``reader_differences``).

``headline`` names the metric the published table's number corresponds to; ``notes`` say how it relates to the
published and to lmms-eval's number.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from .readers import release_score

RECALL_THRESHOLDS = (0.3, 0.5, 0.7)
ERROR_RULES = ("paravt", "release")
READERS = ("robust", "release")
# A judge that could not answer is an error of our reader only: the release reads every MMVU item as a letter.
JUDGE_ERRORS = ("judge_error", "judge_timeout", "judge_unparseable")
# Errors that happen inside the release's agent loop (a failed completion): scored there as a reply. Without the
# tool (direct, reasoning) the same failure is an error result (driver.py eval_one lines 453-460 at cf55249), which
# Charades leaves out (utils.py run_dataset line 729).
IN_LOOP_ERRORS = ("engine_error", "engine_refused", "engine_timeout", "context_overflow")
IN_LOOP_PROTOCOLS = ("agentic",)
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


def default_reader(error_rule: str) -> str:
    """The reader of the headline when none is chosen: the release's under its error rule, ours otherwise."""
    return "release" if error_rule == "release" else "robust"


def release_fields(record: dict[str, Any]) -> tuple[float, Any] | None:
    """(score, what was read) of a record by the release's reader: recorded, or worked out from its reply;
    None for a record that holds neither (it keeps its recorded score)."""
    if record.get("release_score") is not None:
        return float(record["release_score"]), record.get("release_prediction")
    if record.get("final_text") is None:
        return None
    return release_score(record["final_text"], str(record.get("qtype") or "mcq"), str(record.get("gold") or ""),
                         record.get("gold_interval"))  # fmt: skip


def with_reader(records: Iterable[dict[str, Any]], reader: str) -> list[dict[str, Any]]:
    """The records as ``reader`` scores them (``robust``: as recorded). Under ``release`` a scored record gets
    the release's score and reading, and a judge failure (an error of our reader only) is scored too."""
    if reader not in READERS:
        raise ValueError(f"unknown reader {reader!r}; known: {', '.join(READERS)}")
    if reader == "robust":
        return list(records)
    out = []
    for r in records:
        judge_failed = r.get("status") == "error" and (r.get("error") or {}).get("reason") in JUDGE_ERRORS
        release = release_fields(r) if r.get("status") == "ok" or judge_failed else None
        if release is not None:
            r = {**r, "status": "ok", "score": release[0], "prediction": release[1], "score_source": "release",
                 "score_reason": None, "error": None}  # fmt: skip
        out.append(r)
    return out


def benchmark_metrics(
    benchmark: str,
    records: list[dict[str, Any]],
    error_rule: str = "paravt",
    reader: str | None = None,
    protocol: str = "agentic",
) -> dict[str, Any]:
    """Headline and breakdowns of one benchmark under one protocol (``error_rule``, ``reader``: see the module
    docstring), with the other reader's headline beside it."""
    if error_rule not in ERROR_RULES:
        raise ValueError(f"unknown error rule {error_rule!r}; known: {', '.join(ERROR_RULES)}")
    reader = reader or default_reader(error_rule)
    views = {name: with_reader(records, name) for name in READERS}
    out = _metrics(benchmark, views[reader], error_rule, protocol)
    base = "miou" if benchmark == "charades" else "accuracy"
    for name in READERS:
        out[f"{base}_{name}"] = headline(
            out if name == reader else _metrics(benchmark, views[name], error_rule, protocol)
        )
    out["reader"] = reader
    out["reader_differences"] = sum(
        (a.get("status"), a.get("score")) != (b.get("status"), b.get("score"))
        for a, b in zip(views["robust"], views["release"], strict=True)
    )
    return out


def _metrics(
    benchmark: str, records: list[dict[str, Any]], error_rule: str, protocol: str = "agentic"
) -> dict[str, Any]:
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
        in_loop = [r for r in errors if (r.get("error") or {}).get("reason") in IN_LOOP_ERRORS
                   and protocol in IN_LOOP_PROTOCOLS]  # fmt: skip
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
        # judged (lmms-eval's way) or read as the release reads them (the published number's way)
        out["oe_comparable"] = sources in (["judge"], ["release"])
        # lmms-eval's mmvu_val headline (tasks/mmvu/utils.py mmvu_aggregate_results_val, 0.7.3): correct over
        # ALL items, multiple choice and open-ended together (open-ended: rule scorer, then a judge)
        out["all_items_accuracy"] = out["accuracy"]
        if error_rule == "release":
            # the release (utils.py load_samples lines 376-429: every item is_mcq; run_dataset lines 706-711:
            # correct / every result, errors included): all items, errors wrong; MC-only beside it
            out["headline"] = "accuracy_errors_as_wrong"
            notes.append("headline: correct over every item, errors wrong (the release's number); "
                         "multiple-choice only beside it (mc_accuracy_errors_as_wrong)")  # fmt: skip
        else:
            out["headline"] = "mc_accuracy"
            out["denominator"] = len(mc_ok)
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
