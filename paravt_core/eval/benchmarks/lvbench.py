"""LVBench: ``lmms-lab/LVBench``: the options are inside ``question`` as ``(A) …`` lines (or, in the migrated
copy, an ``options`` list, lettered under the question as lmms-eval does); ``answer`` (letter), ``uid``,
``question_type`` (list), ``time_reference``, ``video_path``; the original ``video_info.meta.jsonl`` nesting
(``key`` + ``qa`` list) is read as well.

The rows are un-nested first (``prepare``): one row per question of a video.
"""

from __future__ import annotations

import re
from typing import Any

from . import fixture_files as files
from .base import (
    LETTERS,
    Benchmark,
    Context,
    Fixture,
    Published,
    Records,
    RowError,
    Sample,
    letter_of,
    media,
    need,
    stem,
    with_direct,
)

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
