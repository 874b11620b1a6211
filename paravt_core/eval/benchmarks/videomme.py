"""Video-MME: ``lmms-lab/Video-MME`` (test): ``videoID``, ``question_id``, ``duration`` (short/medium/long),
``domain``, ``task_type``, ``question``, ``options`` (["A. …", …]), ``answer`` (letter); video
``data/<videoID>.mp4``; subtitles ``subtitle/<videoID>.srt`` (``videomme_wsub``).

Two benchmarks read these rows: ``videomme`` asks the question alone, ``videomme_wsub`` prepends the video's
subtitles (every cue, or only the cues covering the sampled frames: ``subtitle_mode``). Both report the accuracy
per duration group.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paravt_core import storage
from paravt_core.eval.formats import aligned_subtitles, parse_srt, release_subtitle_text, subtitle_text
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
    RowError,
    Sample,
    layout,
    letter_of,
    lettered,
    mcq_question,
    media,
    need,
    release_missing_mp4,
    video_file,
    with_direct,
)


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
