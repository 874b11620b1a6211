"""Charades-STA: ``lmms-lab/charades_sta`` (test): ``video`` (file name), ``caption``, ``timestamp``
([start, end] seconds); video ``Charades_v1_480/<video>``.

Temporal grounding: the question asks when the caption happens, the gold is the [start, end] interval, and the
headline is mIoU (with R@0.3/0.5/0.7). The release sends its video as a ``video_url`` the server decodes;
its with-tool prompt is the bare envelope.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from . import fixture_files as files
from .base import Benchmark, Context, Fixture, Metrics, Published, RowError, Sample, media, need


def _charades(row: dict[str, Any], ctx: Context) -> Sample:
    stamp = need(row, "timestamp")
    try:
        start, end = (float(v) for v in stamp)
    except (TypeError, ValueError):
        raise RowError(f"timestamp {stamp!r} is not a [start, end] pair") from None
    video = str(need(row, "video"))
    caption = str(need(row, "caption")).strip()
    return Sample(
        benchmark="",
        id=f"{video}::{caption}::{start:g}-{end:g}",
        video=media(ctx, f"Charades_v1_480/{video}"),
        question=ctx.texts.charades_question.format(caption=caption),
        gold=f"{start!r}, {end!r}",  # for reading; scoring uses gold_interval, the numbers themselves
        gold_interval=(start, end),
        qtype="tvg",
    )


# Charades: the release sends the whole video as ``video_url`` (``driver.py --video_channel video_url``: vLLM
# decodes it server-side with its own sampling and gives the model the frames' times). So does preset=release
# on an engine whose server decodes it (vLLM: ``overview_channels`` in the results); elsewhere ours sends
# labelled frames, and the row gets no difference.
CHARADES_INPUT = ("the release feeds Charades as video_url (vLLM decodes the whole video server-side); ours "
                  "sends 64 labelled frames")  # fmt: skip


def charades_input(results: Mapping[str, Any], name: str) -> str:
    """Not comparable unless the overview travelled as the release sends it (the whole video as video_url)."""
    return "" if (results.get("overview_channels") or {}).get(name) == "video_url" else CHARADES_INPUT


CHARADES_ROWS = [
    {"video": "FXA01.mp4", "caption": "a red circle appears", "timestamp": [1.0, 3.0]},
    {"video": "FXB02.mp4", "caption": "a yellow circle appears", "timestamp": [5.0, 7.0]},
]


def charades_files() -> dict[str, bytes]:
    """The rows as the hub's copy stores them: ``timestamp`` as float16 pairs."""
    import numpy as np

    schema = pa.schema(
        [("video", pa.string()), ("caption", pa.string()), ("timestamp", pa.list_(pa.float16()))]
    )
    rows = [{**r, "timestamp": [np.float16(v) for v in r["timestamp"]]} for r in CHARADES_ROWS]
    return {"data/test-00000-of-00001.parquet": files.parquet(rows, schema)}


CHARADES = Benchmark(
    "charades",
    "lmms-lab/charades_sta",
    "test",
    _charades,
    ("video",),
    tool_prompt="agentic_minimal",
    release_channel="video_url",
    answers="time span (mIoU, R@0.3/0.5/0.7)",
    title="Charades-STA",
    metrics=Metrics(headline="miou"),
    published=Published(
        {"Qwen3-VL-8B": 49.3, "LongVT-RFT-7B": 23.4, "ParaVT-8B": 50.1}, rules=(charades_input,)
    ),
    fixture=Fixture(
        "charades",
        source="data",
        files=charades_files,
        videos=(("Charades_v1_480/FXA01.mp4", "A"), ("Charades_v1_480/FXB02.mp4", "B")),
    ),
)
