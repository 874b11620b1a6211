"""MMVU: ``yale-nlp/MMVU`` (validation): ``id``, ``video`` (URL) or ``video_path``, ``question``, ``choices``
({"A": …, …}, empty for open-ended), ``answer``, ``question_type`` (multiple-choice / open-ended),
``metadata.subject``.

The multiple-choice items are lettered from ``choices``; an open-ended item is asked as it is (or, under the
release's layout, as a multiple-choice question with an empty options block and a forced letter). Its metrics
keep the two kinds apart beside lmms-eval's all-items number.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paravt_core.eval.tally import grouped_accuracy, scored

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


def _mmvu(row: dict[str, Any], ctx: Context) -> Sample:
    qtype = str(need(row, "question_type"))
    rel = row.get("video_path") or need(row, "video")
    rel = str(rel)
    if "://" in rel and "/videos/" in rel:  # the published rows carry hub URLs; the copy is local
        rel = "videos/" + rel.split("/videos/", 1)[1]
    subject = (row.get("metadata") or {}).get("subject") if isinstance(row.get("metadata"), dict) else None
    sample = Sample(
        benchmark="",
        id=str(need(row, "id")),
        video=media(ctx, rel),
        meta={"subject": subject, "kind": qtype},
    )
    if qtype == "multiple-choice":
        choices = need(row, "choices")
        options = [str(choices[k]) for k in LETTERS if str(choices.get(k) or "").strip()]
        question = need(row, "question")
        sample.gold = letter_of(need(row, "answer"), options)
        sample.letters = LETTERS[: len(options)]
        return with_direct(ctx, sample, lambda hint: mcq_question(ctx, question, lettered(options), hint))
    sample.gold, sample.qtype = str(need(row, "answer")), "oe"
    if layout(ctx).mmvu_open_ended == "as_mcq":  # the release: empty options block, letter asked and forced
        question = need(row, "question")
        sample.forced = "mcq"
        return with_direct(ctx, sample, lambda hint: mcq_question(ctx, question, "", hint))
    sample.question = f"Question: {str(need(row, 'question')).strip()}"
    return sample


def mmvu_breakdown(records: Records, shared: Mapping[str, Any], error_rule: str) -> Breakdown:
    """MMVU: multiple-choice accuracy (the headline under error rule paravt) and open-ended accuracy apart,
    and ``all_items_accuracy`` (over every scored item, lmms-eval's ``mmvu_val`` number) beside them; under
    error rule release the headline is the release's: correct over every item (its loader makes every
    validation item multiple choice, so an open-ended item is right only when its gold is the letter read;
    errors wrong), the multiple-choice-only number beside it; open-ended items scored by token F1 (no judge,
    or a judge that fell back) are marked not comparable with a judged number."""
    kinds = grouped_accuracy(records, "kind")
    mc_all = [r for r in records if (r.get("meta") or {}).get("kind") == "multiple-choice"]
    mc_ok = scored(mc_all)
    sources = sorted({r.get("score_source") for r in scored(records) if r.get("qtype") == "oe"} - {None})
    out: dict[str, Any] = {
        "mc_accuracy": kinds.get("multiple-choice"),
        "oe_accuracy": kinds.get("open-ended"),
        "mc_accuracy_errors_as_wrong": (
            100.0 * sum(float(r["score"]) for r in mc_ok) / len(mc_all) if mc_all else None
        ),
        "oe_scored_by": sources,
        # judged (lmms-eval's way) or read as the release reads them (the published number's way)
        "oe_comparable": sources in (["judge"], ["release"]),
        # lmms-eval's mmvu_val headline (tasks/mmvu/utils.py mmvu_aggregate_results_val, 0.7.3): correct over
        # ALL items, multiple choice and open-ended together (open-ended: rule scorer, then a judge)
        "all_items_accuracy": shared["accuracy"],
    }
    if error_rule == "release":
        # the release (utils.py load_samples lines 376-429: every item is_mcq; run_dataset lines 706-711:
        # correct / every result, errors included): all items, errors wrong; MC-only beside it
        out["headline"] = "accuracy_errors_as_wrong"
        return Breakdown(out, ("headline: correct over every item, errors wrong (the release's number); "
                               "multiple-choice only beside it (mc_accuracy_errors_as_wrong)",))  # fmt: skip
    out["headline"] = "mc_accuracy"
    out["denominator"] = len(mc_ok)
    return Breakdown(out, ("headline: multiple-choice accuracy; open-ended items apart"
                           + ("" if out["oe_comparable"] or not sources else
                              " (scored by token F1, not by the LLM judge: not comparable)"),))  # fmt: skip


def mmvu_all_items(m: Mapping[str, Any]) -> tuple[str, str] | None:
    """MMVU: lmms-eval's mmvu_val number (all items) beside our multiple-choice headline, labelled."""
    if "all_items_accuracy" not in m or m.get("reader") == "release":
        return None  # under the release's reader the headline is that number itself
    judged = (
        "" if m.get("oe_comparable") or not m.get("oe_scored_by") else "; open-ended by token F1, not a judge"
    )
    value = m["all_items_accuracy"]
    shown = "–" if value is None else f"{value:.1f}"
    return "lmms", f"lmms-eval mmvu_val (all items, multiple choice + open-ended{judged}): {shown}"


def mmvu_open_ended_scoring(results: Mapping[str, Any], name: str) -> str:
    """Not comparable when any protocol's open-ended items were scored by token F1 (no judge, or one that fell
    back): the published number reads them as the release does."""
    for per in results["protocols"].values():
        m = per.get(name) or {}
        if m.get("oe_scored_by") and not m.get("oe_comparable"):
            return "MMVU open-ended items scored by token F1, not the judge or the release's reader"
    return ""


MMVU_ROWS = [
    {"id": "fx-mc-0", "video": "https://huggingface.co/datasets/yale-nlp/MMVU/resolve/main/videos/Physics/fx_0.mp4",
     "question": "Which shape appears after the red circle?",
     "choices": {"A": "green triangle", "B": "blue square", "C": "yellow circle", "D": "red square", "E": "nothing"},
     "answer": "B", "question_type": "multiple-choice",
     "metadata": {"subject": "Physics", "textbook": "synthetic", "rationale": "the square follows the circle"}},
    {"id": "fx-oe-0", "video": "https://huggingface.co/datasets/yale-nlp/MMVU/resolve/main/videos/Physics/fx_0.mp4",
     "question": "What colour is the square?", "choices": {}, "answer": "blue", "question_type": "open-ended",
     "metadata": {"subject": "Physics", "textbook": "synthetic", "rationale": "the square is blue"}},
]  # fmt: skip


MMVU = Benchmark(
    "mmvu",
    "yale-nlp/MMVU",
    "validation",
    _mmvu,
    ("id",),
    answers="multiple choice + open-ended (LLM judge)",
    metrics=Metrics(
        breakdown=mmvu_breakdown,
        scalars=("mc_accuracy", "mc_accuracy_errors_as_wrong", "all_items_accuracy", "oe_accuracy"),
        details=(
            "mc_accuracy",
            "oe_accuracy",
            "oe_scored_by",
            "oe_comparable",
            "mc_accuracy_errors_as_wrong",
            "all_items_accuracy",
        ),
        denominators=("mc_accuracy", "mc_accuracy_errors_as_wrong"),
        aside=mmvu_all_items,
    ),
    published=Published(
        {"Qwen3-VL-8B": 68.0, "LongVT-RFT-7B": 63.4, "ParaVT-8B": 68.6},
        caveat="the release's loader reads every MMVU item as multiple choice and divides by all of them "
        "(open-ended items right only when the gold is the letter read); multiple-choice only in the breakdowns",
        rules=(mmvu_open_ended_scoring,),
    ),
    fixture=Fixture(
        "mmvu",
        files=lambda: {"validation.json": files.json_file(MMVU_ROWS, indent=1)},  # hub URLs for videos
        videos=(("videos/Physics/fx_0.mp4", "A"),),
    ),
)
