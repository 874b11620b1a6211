"""The benchmarks, declared together, one section each: how its real rows become samples (SPEC §7), its metrics
beside the shared ones, the published numbers it is set against (SPEC §7's table of the with-tool protocol:
accuracy %, Charades mIoU), and its fixture copy (rows whose questions are about synth's two schedules, see
``fixture_files``). Each section says its row schema as the dataset publishes it.

A row that lacks a field its benchmark needs becomes a sample with ``error`` set: it is recorded and counted
as an error, never run, never dropped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from paravt_core import storage
from paravt_core.eval.formats import aligned_subtitles, parse_srt, release_subtitle_text, subtitle_text
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
    RowError,
    Sample,
    layout,
    letter_of,
    lettered,
    mcq_question,
    media,
    need,
    release_missing_mp4,
    stem,
    video_file,
    with_direct,
)

# ---------------------------------------------------------------------------------------------------------
# Video-MME: ``lmms-lab/Video-MME`` (test): ``videoID``, ``question_id``, ``duration`` (short/medium/long),
# ``domain``, ``task_type``, ``question``, ``options`` (["A. …", …]), ``answer`` (letter); video
# ``data/<videoID>.mp4``; subtitles ``subtitle/<videoID>.srt`` (``videomme_wsub``).


def _videomme(row: dict[str, Any], ctx: Context, subtitles: bool) -> Sample:
    options = [str(o) for o in need(row, "options")]
    video_id = str(need(row, "videoID"))
    block = lettered(options) if layout(ctx).videomme_options == "lettered" else "\n".join(options)
    t = ctx.texts
    prefix = None
    missing = release_missing_mp4(ctx, f"data/{video_id}")
    if subtitles and not missing:
        root = ctx.subtitles_root or media(ctx, "subtitle")
        join = "\n" if layout(ctx).subtitle_lines == "line" else " "
        srt = media(Context(root, texts=ctx.texts), f"{video_id}.srt")
        if ctx.subtitle_frames:
            text = _aligned(ctx, srt, video_file(ctx, f"data/{video_id}"), join)
        elif ctx.preset == "release":  # the release's positional reader (formats.release_srt_lines)
            text = release_subtitle_text(srt)
        else:
            text = subtitle_text(srt, join)
        # a set whose no_subtitles is "" leaves the block out for a video without subtitles (the release)
        prefix = text or t.no_subtitles or None
    question_text = need(row, "question")

    def build(hint: str) -> str:
        question = mcq_question(ctx, question_text, block, hint)
        if prefix is None:
            return question
        return t.subtitle_block.format(header=t.subtitle_header, subtitles=prefix, question=question)

    sample = Sample(
        benchmark="",
        id=str(need(row, "question_id")),
        video=media(ctx, f"data/{video_id}.mp4") if missing else video_file(ctx, f"data/{video_id}"),
        gold=letter_of(need(row, "answer"), options),
        letters=LETTERS[: len(options)],
        meta={
            "duration": str(need(row, "duration")),
            "task_type": row.get("task_type"),
            "domain": row.get("domain"),
        },
    )
    if missing:
        sample.error, sample.error_reason = missing, "video_not_found"
    return with_direct(ctx, sample, build)


def _aligned(ctx: Context, srt: str, video: str, join: str) -> str | None:
    """The cues of ``srt`` that cover ``ctx.subtitle_frames`` sampled frames of ``video`` (None: no file)."""
    try:
        raw = storage.read_bytes(srt).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None
    from paravt_core.video import api as video_api

    try:
        info = video_api.probe(video)
    except Exception as err:  # the frames the cues are aligned to cannot be known
        raise RowError(
            f"subtitle_mode=aligned needs the video's frame count ({type(err).__name__}: {err})"
        ) from None
    return aligned_subtitles(parse_srt(raw, join), info.fps, info.num_frames, ctx.subtitle_frames)


VIDEOMME_GROUPS = ("short", "medium", "long")


def videomme_breakdown(records: Records, shared: Mapping[str, Any], error_rule: str) -> Breakdown:
    """Video-MME: accuracy per ``duration`` group (short / medium / long)."""
    return Breakdown({"by_duration": grouped_accuracy(records, "duration", VIDEOMME_GROUPS)})


VIDEOMME_ROWS = [
    {"video_id": "001", "duration": "short", "domain": "Knowledge", "sub_category": "Humanity & History",
     "url": "https://www.youtube.com/watch?v=fxSynthA001", "videoID": "fxSynthA001", "question_id": "001-1",
     "task_type": "Object Recognition", "question": "Which shape appears first in the video?",
     "options": ["A. A blue square.", "B. A red circle.", "C. A green triangle.", "D. A yellow circle."],
     "answer": "B"},
    {"video_id": "002", "duration": "medium", "domain": "Life Record", "sub_category": "Daily Life",
     "url": "https://www.youtube.com/watch?v=fxSynthB002", "videoID": "fxSynthB002", "question_id": "002-1",
     "task_type": "Attribute Perception", "question": "What colour is the circle in the video?",
     "options": ["A. Red.", "B. Blue.", "C. Yellow.", "D. Green."], "answer": "C"},
    {"video_id": "003", "duration": "long", "domain": "Knowledge", "sub_category": "Technology",
     "url": "https://www.youtube.com/watch?v=fxSynthC003", "videoID": "fxSynthC003", "question_id": "003-1",
     "task_type": "Counting Problem", "question": "How many shapes appear one after another?",
     "options": ["A. One.", "B. Two.", "C. Three.", "D. Four."], "answer": "B"},
]  # fmt: skip


VIDEOMME_SUBTITLES = {
    "fxSynthA001": [(0.5, 2.9, "A red circle shows up."), (4.4, 6.6, "Now a blue square.")],
    "fxSynthB002": [(0.4, 2.6, "First a green triangle."), (4.9, 7.1, "Then a yellow circle.")],
}  # fxSynthC003 has no subtitle file: the question says so


def videomme_files() -> dict[str, bytes]:
    out = {"videomme/test-00000-of-00001.parquet": files.parquet(VIDEOMME_ROWS)}
    out.update({f"subtitle/{video_id}.srt": files.srt(cues) for video_id, cues in VIDEOMME_SUBTITLES.items()})
    return out


VIDEOMME = Benchmark(
    "videomme",
    "lmms-lab/Video-MME",
    "test",
    lambda r, c: _videomme(r, c, False),
    ("question_id",),
    answers="multiple choice (A-D)",
    metrics=Metrics(breakdown=videomme_breakdown, grouped="by_duration", details=("by_duration",)),
    published=Published({"Qwen3-VL-8B": 59.9, "LongVT-RFT-7B": 59.5, "ParaVT-8B": 62.1}),
    fixture=Fixture(
        "videomme",
        source="videomme",
        files=videomme_files,
        videos=(("data/fxSynthA001.mp4", "A"), ("data/fxSynthB002.mp4", "B"), ("data/fxSynthC003.mp4", "A")),
    ),
)


VIDEOMME_WSUB = Benchmark(
    "videomme_wsub",
    "lmms-lab/Video-MME",
    "test",
    lambda r, c: _videomme(r, c, True),
    ("question_id",),
    answers="multiple choice (A-D), subtitles prepended",
    subtitles=True,
    metrics=VIDEOMME.metrics,
    published=Published({"Qwen3-VL-8B": 68.4, "LongVT-RFT-7B": 66.0, "ParaVT-8B": 69.4}),
    fixture=Fixture("videomme", source="videomme", subtitles="subtitle"),  # videomme's rows, with subtitles
)


# ---------------------------------------------------------------------------------------------------------
# LongVideoBench: ``longvideobench/LongVideoBench`` (validation): ``id``, ``video_path``, ``question``,
# ``option0..option4`` ("N/A" when unused), ``correct_choice`` (int), ``duration`` (s), ``duration_group``,
# ``question_category``; video ``videos/<video_path>``.


def _longvideobench(row: dict[str, Any], ctx: Context) -> Sample:
    options = []
    for i in range(5):
        value = row.get(f"option{i}")
        if value is None or str(value) == "N/A":
            break
        options.append(str(value))
    if not options and isinstance(row.get("candidates"), list):  # the json-only copy (lvb_val.json)
        options = [str(c) for c in row["candidates"] if str(c) != "N/A"]
    if not options:
        raise RowError("missing field 'option0' (or 'candidates')")
    choice = need(row, "correct_choice")
    question = need(row, "question")
    sample = Sample(
        benchmark="",
        id=str(need(row, "id")),
        video=media(ctx, f"videos/{need(row, 'video_path')}"),
        gold=letter_of(int(choice), options),
        letters=LETTERS[: len(options)],
        meta={
            "duration_group": str(row.get("duration_group")),
            "question_category": row.get("question_category"),
        },
    )
    return with_direct(ctx, sample, lambda hint: mcq_question(ctx, question, lettered(options), hint))


# LongVideoBench's duration groups (seconds), shortest first: as strings they would sort 15, 3600, 60, 600
LONGVIDEOBENCH_GROUPS = ("15", "60", "600", "3600")


# a multiple-choice answer that names no option
UNREAD = ("unparseable_letter", "hedged_letter", "empty_answer")


def longvideobench_breakdown(records: Records, shared: Mapping[str, Any], error_rule: str) -> Breakdown:
    """LongVideoBench: accuracy per duration group; unparseable answers count as wrong. The release's
    extractor falls back to the reply's first character (right when it happens to be the gold letter) and
    lmms-eval's parser answers a random letter, which adds about 1/n of them (n options): the count is
    reported so the three can be related."""
    unread = sum(r.get("score_reason") in UNREAD for r in scored(records))
    note = (f"{unread} unparseable answer(s) counted wrong; the release reads the reply's first character for "
            "them (right when it is the gold letter) and lmms-eval's LongVideoBench parser answers a random "
            "letter (about 1 in 4-5 of them right by chance)")  # fmt: skip
    by_group = grouped_accuracy(records, "duration_group", LONGVIDEOBENCH_GROUPS)
    return Breakdown({"by_duration_group": by_group, "unparseable_as_wrong": unread}, (note,))


LVB_ROWS = [
    {"video_id": "fxLvbA0001", "id": "fxLvbA0001_0", "video_path": "fxLvbA0001.mp4",
     "subtitle_path": "fxLvbA0001_en.json", "correct_choice": 1,
     "question": "What is on screen at 2 seconds?", "option0": "a blue square", "option1": "a red circle",
     "option2": "a green triangle", "option3": "an empty grey frame", "option4": "N/A", "duration": 8.0,
     "duration_group": 15, "question_category": "T3O", "topic_category": "KI-Knowledge",
     "starting_timestamp_for_subtitles": 0.0},
    {"video_id": "fxLvbB0002", "id": "fxLvbB0002_0", "video_path": "fxLvbB0002.mp4",
     "subtitle_path": "fxLvbB0002_en.json", "correct_choice": 4,
     "question": "Which shape is visible right before the yellow circle?", "option0": "a red circle",
     "option1": "a blue square", "option2": "a yellow triangle", "option3": "a red triangle",
     "option4": "a green triangle", "duration": 8.0, "duration_group": 15, "question_category": "E2O",
     "topic_category": "NP-News-Programs", "starting_timestamp_for_subtitles": 0.0},
]  # fmt: skip


def longvideobench_files() -> dict[str, bytes]:
    subtitles = [{"start": "00:00:01.000", "end": "00:00:03.000", "line": "A red circle."}]
    return {
        "validation-00000-of-00001.parquet": files.parquet(LVB_ROWS),
        "subtitles/fxLvbA0001_en.json": files.json_file(subtitles),
    }


LONGVIDEOBENCH = Benchmark(
    "longvideobench",
    "longvideobench/LongVideoBench",
    "validation",
    _longvideobench,
    ("id",),
    answers="multiple choice (A-E)",
    metrics=Metrics(
        breakdown=longvideobench_breakdown, details=("by_duration_group", "unparseable_as_wrong")
    ),
    published=Published(
        {"Qwen3-VL-8B": 52.2, "LongVT-RFT-7B": 54.7, "ParaVT-8B": 60.4},
        caveat="an unreadable answer is wrong here; the release's extractor reads the reply's first character, "
        "lmms-eval draws a random letter (the count is in the breakdowns)",
    ),
    fixture=Fixture(
        "longvideobench",
        files=longvideobench_files,
        videos=(("videos/fxLvbA0001.mp4", "A"), ("videos/fxLvbB0002.mp4", "B")),
    ),
)


# ---------------------------------------------------------------------------------------------------------
# LVBench: ``lmms-lab/LVBench``: the options are inside ``question`` as ``(A) …`` lines (or, in the migrated
# copy, an ``options`` list, lettered under the question as lmms-eval does); ``answer`` (letter), ``uid``,
# ``question_type`` (list), ``time_reference``, ``video_path``; the original ``video_info.meta.jsonl`` nesting
# (``key`` + ``qa`` list) is read as well.


_PAREN_OPTION = re.compile(r"^\(([A-J])\)\s*(.*)$")


def _lvbench(row: dict[str, Any], ctx: Context) -> Sample:
    question = str(need(row, "question"))
    options = [m.group(2) for ln in question.splitlines() if (m := _PAREN_OPTION.match(ln.strip()))]
    listed = row.get("options")
    if not options and isinstance(listed, list | tuple) and listed:
        # the migrated copy lists the options apart: lettered "(A) ..." under the question, as lmms-eval 0.7.3's
        # lvbench_doc_to_text writes them; preset=release shows the question field as it is (the release's loader,
        # paravt/eval/utils.py lines 320-334 at cf55249: the question field, then the
        # instruction (line 329); no options list is read)
        options = [str(o) for o in listed]
        if ctx.preset != "release":
            question = question + "\n" + "\n".join(f"({LETTERS[i]}) {o}" for i, o in enumerate(options))
    if not options:
        raise RowError("question holds no (A)…(D) options and the row has no options list")
    qtypes = row.get("question_type") or []
    template = ctx.texts.lvbench_question or "Question: {question}\n{hint}"
    sample = Sample(
        benchmark="",
        id=str(need(row, "uid")),
        video=media(ctx, str(need(row, "video_path"))),
        gold=letter_of(need(row, "answer"), options),
        letters=LETTERS[: len(options)],
        meta={"question_type": list(qtypes) if isinstance(qtypes, list | tuple) else [qtypes]},
    )
    return with_direct(ctx, sample, lambda hint: template.format(question=stem(ctx, question), hint=hint))


def flatten_lvbench(rows: Records) -> Records:
    """LVBench's ``video_info.meta.jsonl`` nests the questions of a video under ``qa``: one row per question,
    the video at ``<key>.mp4``."""
    out = []
    for row in rows:
        if isinstance(row.get("qa"), list):
            for qa in row["qa"]:
                out.append({"video_path": f"{row.get('key')}.mp4", "video_type": row.get("type"), **qa})
        else:
            out.append(row)
    return out


LVBENCH_META = [
    {"key": "fxLvbenchB", "type": "cartoon",
     "video_info": {"duration_minutes": files.SECONDS / 60, "fps": files.FPS,
                    "resolution": {"width": files.SIZE[0], "height": files.SIZE[1]}},
     "qa": [
         {"uid": "90001", "question": "Which shape appears last?\n(A) green triangle\n(B) yellow circle\n"
                                      "(C) red circle\n(D) blue square",
          "answer": "B", "question_type": ["key information retrieval"], "time_reference": "00:05-00:07"},
         {"uid": "90002", "question": "What colour is the triangle?\n(A) green\n(B) red\n(C) blue\n(D) yellow",
          "answer": "A", "question_type": ["entity recognition"], "time_reference": "00:00-00:03"},
     ]},
]  # fmt: skip


LVBENCH = Benchmark(
    "lvbench",
    "lmms-lab/LVBench",
    "train",
    _lvbench,
    ("uid",),
    answers="multiple choice (A-D)",
    prepare=flatten_lvbench,
    published=Published({"Qwen3-VL-8B": 33.1, "LongVT-RFT-7B": 37.9, "ParaVT-8B": 39.8}),
    fixture=Fixture(
        "lvbench",
        files=lambda: {"video_info.meta.jsonl": files.jsonl(LVBENCH_META)},  # the original nesting
        videos=(("fxLvbenchB.mp4", "B"),),
    ),
)


# ---------------------------------------------------------------------------------------------------------
# MLVU: ``sy1998/MLVU_dev`` (test): ``video_name``, ``duration``, ``question`` (may carry the options after its
# first line), ``candidates`` (list), ``answer`` (letter or candidate text), ``task_type``, ``question_id``.


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


# ---------------------------------------------------------------------------------------------------------
# synthetic: ``paravt synth``'s ``eval/synthetic_eval.parquet``: ``id``, ``video`` (sentinel path), ``question``,
# ``options``, ``answer``, ``question_type``, ``duration``.


def _synthetic(row: dict[str, Any], ctx: Context) -> Sample:
    qtype = str(need(row, "question_type"))
    options = [str(o) for o in (row.get("options") or [])]
    return Sample(
        benchmark="",
        id=str(need(row, "id")),
        video=media(ctx, str(need(row, "video"))),
        question=str(need(row, "question")),
        gold=str(need(row, "answer")),
        qtype=qtype if qtype in ("mcq", "tvg") else "oe",
        letters=LETTERS[: len(options)],
        meta={"question_type": qtype},
    )


SYNTHETIC = Benchmark(
    "synthetic",
    "",
    "",
    _synthetic,
    ("id",),
    answers="multiple choice, time span, open-ended",
    nightly=False,
    fixture=Fixture("synthetic", source="eval", media_root="media", synthesized=True),
)
