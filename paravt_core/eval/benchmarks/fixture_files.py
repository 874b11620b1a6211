"""The bytes of a benchmark's fixture files in the formats the datasets publish (parquet, JSON, JSON Lines,
SRT): what a benchmark's ``Fixture.files`` returns, for ``paravt_core/synth/eval_fixtures.py`` to write.

A fixture's rows are a few hand-written ones in the benchmark's real schema and file layout; their questions
are about the coloured shapes of synth's two schedules, which ``Fixture.videos`` names: A, a red circle
[1, 3) s then a blue square [4.5, 6.5) s; B, a green triangle [0.5, 2.5) s then a yellow circle [5, 7) s."""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

# Every fixture video (synth writes them): 8 s at 8 fps, 64 frames, the count the release's overview samples
# (qwen-vl-utils ``nframes=64``; a shorter video gets no frames at all under preset=release), at 128 x 96.
SECONDS, FPS, SIZE = 8.0, 8.0, (128, 96)


def parquet(rows: list[dict[str, Any]], schema: pa.Schema | None = None) -> bytes:
    """``rows`` as one parquet file (``schema``: column types the rows alone would not give, e.g. float16)."""
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), buf)
    return buf.getvalue()


def json_file(value: Any, indent: int | None = None) -> bytes:
    return json.dumps(value, indent=indent).encode()


def jsonl(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def srt(cues: list[tuple[float, float, str]]) -> bytes:
    """SubRip cues ``(start s, end s, text)``, the text in the ``<font>`` markup Video-MME's files carry."""

    def stamp(t: float) -> str:
        ms = round(t * 1000)
        return f"{ms // 3600000:02d}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d},{ms % 1000:03d}"

    blocks = [
        f'{i}\n{stamp(a)} --> {stamp(b)}\n<font color="white" size=".72c">{text}</font>'
        for i, (a, b, text) in enumerate(cues, 1)
    ]
    return ("\n\n".join(blocks) + "\n").encode()
