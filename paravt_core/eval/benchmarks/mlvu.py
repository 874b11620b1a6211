"""MLVU: ``sy1998/MLVU_dev`` (test): ``video_name``, ``duration``, ``question`` (may carry the options after its
first line), ``candidates`` (list), ``answer`` (letter or candidate text), ``task_type``, ``question_id``.

Its headline is the micro accuracy over all questions (the release's number); lmms-eval's M-avg over task
types is reported beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paravt_core.eval.tally import grouped_accuracy

from . import fixture_files as files
from .base import (
    LETTERS,
    Benchmark,
    Breakdown,
    Context,
    Fixture,
    Metrics,
    Published,
    Records,
    Sample,
    layout,
    letter_of,
    lettered,
    mcq_question,
    media,
    need,
    with_direct,
)


def _mlvu(row: dict[str, Any], ctx: Context) -> Sample:
    candidates = [str(c) for c in need(row, "candidates")]
    whole = str(need(row, "question"))
    first = whole.split("\n", 1)[0]  # options, when inlined, follow the first line
    asked = whole if layout(ctx).mlvu_question == "whole" else first
    sample = Sample(
        benchmark="",
        id=str(row.get("question_id") or f"{need(row, 'video_name')}::{first}"),
        video=media(ctx, str(need(row, "video_name"))),
        gold=letter_of(need(row, "answer"), candidates),
        letters=LETTERS[: len(candidates)],
        meta={"task_type": str(need(row, "task_type")), "duration": row.get("duration")},
    )
    return with_direct(ctx, sample, lambda hint: mcq_question(ctx, asked, lettered(candidates), hint))


def mlvu_breakdown(records: Records, shared: Mapping[str, Any], error_rule: str) -> Breakdown:
    """MLVU: micro (over all samples; the headline: the release's driver, which made the published number,
    reports the accuracy over all questions) and M-avg (mean of the per-``task_type`` accuracies: lmms-eval's
    MLVU score), side by side."""
    per_type = grouped_accuracy(records, "task_type")
    vals = [v for v in per_type.values() if v is not None]
    m_avg = sum(vals) / len(vals) if vals else None
    note = ("headline: micro accuracy over all questions (the release's driver, published number); "
            "M-avg over task types (lmms-eval's MLVU score) beside it")  # fmt: skip
    return Breakdown(
        {"by_task_type": per_type, "micro": shared["accuracy"], "macro": m_avg, "m_avg": m_avg}, (note,)
    )


MLVU_ROWS = [
    {"video_name": "fx_plotQA_1.mp4", "duration": 8.0,
     "question": "What colour is the square?\n(A) Red\n(B) Blue\n(C) Green\n(D) Yellow",
     "candidates": ["Red", "Blue", "Green", "Yellow"], "answer": "B", "task_type": "plotQA",
     "question_id": "fx_plotQA_1"},
    {"video_name": "fx_count_1.mp4", "duration": 8.0, "question": "How many shapes appear in the video?",
     "candidates": ["1", "2", "3", "4"], "answer": "B", "task_type": "count", "question_id": "fx_count_1"},
    {"video_name": "fx_order_1.mp4", "duration": 8.0, "question": "In which order do the shapes appear?",
     "candidates": ["yellow circle, green triangle", "green triangle, yellow circle"], "answer": "B",
     "task_type": "order", "question_id": "fx_order_1"},
]  # fmt: skip


MLVU = Benchmark(
    "mlvu",
    "sy1998/MLVU_dev",
    "test",
    _mlvu,
    ("question_id", "video_name"),
    answers="multiple choice",
    metrics=Metrics(
        breakdown=mlvu_breakdown,
        scalars=("micro", "macro", "m_avg"),
        details=("by_task_type", "micro", "m_avg"),
    ),
    published=Published(
        {"Qwen3-VL-8B": 58.3, "LongVT-RFT-7B": 59.4, "ParaVT-8B": 65.0},
        caveat="micro accuracy, as the release reports it (lmms-eval's M-avg is in the breakdowns)",
    ),
    fixture=Fixture(
        "mlvu",
        files=lambda: {"test-00000-of-00001.parquet": files.parquet(MLVU_ROWS)},
        videos=(("fx_plotQA_1.mp4", "A"), ("fx_count_1.mp4", "A"), ("fx_order_1.mp4", "B")),
    ),
)
