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

- accuracy: mean score x 100 (MCQ scores are 0/1; an answer that names no option, or two, scores 0), or for a
  benchmark whose headline is ``miou`` (Charades) mIoU (mean IoU x 100) and R@0.3 / 0.5 / 0.7 (share of samples
  with IoU >= t, x 100);
- each benchmark's own breakdowns and notes beside these (``Benchmark.metrics.breakdown``: Video-MME's
  duration groups, MLVU's micro and M-avg, MMVU's multiple-choice and open-ended parts, LongVideoBench's
  unparseable answers; their docstrings say how each relates to the published and to lmms-eval's number).

Readers: ``robust`` (ours, ``scoring.score_sample``: the record's ``score``) and ``release`` (the release's
``extract_letter`` / ``extract_time_from_response``, ``readers.release_score``: the record's ``release_score``,
worked out from ``final_text`` when a record predates it). The headline uses one (by default the release's under
error rule release, ours otherwise); both headlines are kept (``accuracy_robust`` / ``accuracy_release``, Charades
``miou_robust`` / ``miou_release``) with the number of samples the two read differently (``reader_differences``).

``headline`` names the metric the published table's number corresponds to; ``notes`` say how it relates to the
published and to lmms-eval's number.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from . import benchmarks as registry
from .readers import release_score
from .tally import accuracy, pct, scored

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


def interval_metrics(records: list[dict[str, Any]]) -> dict[str, Any]:
    """mIoU and R@t of time-span records (their scores are IoUs)."""
    ious = [float(r["score"]) for r in scored(records)]
    out: dict[str, Any] = {"miou": pct(ious)}
    for t in RECALL_THRESHOLDS:
        out[f"r@{t}"] = pct([1.0 if iou >= t else 0.0 for iou in ious])
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
    base = registry.metrics_of(benchmark).headline
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
    spec = registry.metrics_of(benchmark)
    ok = scored(records)
    errors = [r for r in records if r.get("status") == "error"]
    out: dict[str, Any] = {
        "samples": len(records),
        "scored": len(ok),
        "errors": len(errors),
        "error_rule": error_rule,
    }
    if spec.headline == "miou":
        out.update(interval_metrics(records))
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
    notes: list[str] = []
    if (
        spec.breakdown is not None
    ):  # the benchmark's own numbers; they may set the headline and its denominator
        own = spec.breakdown(records, dict(out), error_rule)
        out.update(own.values)
        notes += own.notes
    out["notes"] = notes
    out["errors_by_reason"] = dict(Counter(str(r.get("error", {}).get("reason")) for r in errors))
    out["finish_reasons"] = dict(Counter(str(r.get("finish_reason")) for r in records))
    calls = [int(r.get("tool_calls") or 0) for r in ok]
    out["avg_tool_calls"] = sum(calls) / len(calls) if calls else None
    out["tool_use_rate"] = pct([1.0 if c > 0 else 0.0 for c in calls])
    return out


def headline(metrics: dict[str, Any]) -> float | None:
    return metrics.get(metrics.get("headline", "accuracy"))
