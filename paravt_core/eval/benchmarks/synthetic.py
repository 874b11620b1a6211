"""synthetic: ``paravt synth``'s ``eval/synthetic_eval.parquet``: ``id``, ``video`` (sentinel path), ``question``,
``options``, ``answer``, ``question_type``, ``duration``.

The rows ``paravt synth`` writes (multiple choice, time spans, open-ended) about its own videos; its fixture is
that dataset itself (``Fixture.synthesized``), and it is not part of the nightly default.
"""

from __future__ import annotations

from typing import Any

from .base import (
    LETTERS,
    Benchmark,
    Context,
    Fixture,
    Sample,
    media,
    need,
)


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
