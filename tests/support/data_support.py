"""Builders for the data-stage tests: tiny real mp4s (ffmpeg), zips laid out like ParaVT-Source, parquets.

Layout written by ``build_dataset(tmp)``::

    source/museg/charades_0.zip              museg/charades/c0.mp4, museg/charades/c1.mp4
    source/selfqa/selfqa.zip                 selfqa/s0.mp4
    source/longvt_source/videor1_0.zip       longvt_source/videor1_0/v0.mp4
    source/longvt_source/videor1_0_images.zip  longvt_source/videor1_0/frames/v0_0.jpg
    parquet/paravt_sft_charades_3.parquet    3 rows (JSON messages), one per video reference below
    parquet/paravt_sft_videor1_2.parquet     2 rows (video + image)
    parquet/paravt_rl_diverse_3.parquet      3 rows
"""

from __future__ import annotations

import functools
import json
import os
import stat
import subprocess
import tempfile
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

SYSTEM = "You are a helpful assistant. Call crop_video(start, end) to look closer."


@functools.cache
def mp4_bytes(color: str = "red") -> bytes:
    """A real 0.4 s 32x32 H.264 mp4 (made once per session)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "v.mp4")
        subprocess.run(
            ["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi",
             "-i", f"color=c={color}:s=32x32:r=10:d=0.4", "-c:v", "libx264", "-pix_fmt", "yuv420p", out],
            check=True,
        )  # fmt: skip
        return Path(out).read_bytes()


@functools.cache
def jpg_bytes() -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "f.jpg")
        subprocess.run(
            ["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi",
             "-i", "color=c=blue:s=16x16:d=0.1", "-frames:v", "1", out],
            check=True,
        )  # fmt: skip
        return Path(out).read_bytes()


def write_zip(path: Path, members: dict[str, bytes], *, modes: dict[str, int] | None = None) -> Path:
    """A zip with ``members``; ``modes`` sets a member's unix mode (e.g. ``stat.S_IFLNK | 0o777``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.create_system = 3
            info.external_attr = ((modes or {}).get(name, stat.S_IFREG | 0o644)) << 16
            zf.writestr(info, data)
    return path


def messages(video: str | None = None, image: str | None = None, *, assistant: bool = True) -> list[dict]:
    """An SFT conversation: system prompt, a user turn with media, a tool round, an answer."""
    user: list[dict] = []
    if video is not None:
        user.append({"type": "video_url", "video_url": {"url": video}})
    user.append({"type": "text", "text": "What appears first?"})
    msgs = [
        {"role": "system", "content": [{"type": "text", "text": SYSTEM}]},
        {"role": "user", "content": user},
    ]
    if assistant:
        msgs.append(
            {"role": "assistant", "content": [{"type": "text", "text": "<think>look</think><tool_call>"
             '{"name": "crop_video", "arguments": {"start": 0, "end": 1}}</tool_call>'}]}
        )  # fmt: skip
    reply: list[dict] = [{"type": "text", "text": "<tool_response>a red square</tool_response>"}]
    if image is not None:
        reply.insert(0, {"type": "image_url", "image_url": {"url": image}})
    msgs.append({"role": "user", "content": reply})
    if assistant:
        msgs.append({"role": "assistant", "content": [{"type": "text", "text": "<answer>A</answer>"}]})
    return msgs


def sft_table(rows: list[str | None], ids: list[str] | None = None) -> pa.Table:
    """SFT parquet table: ``id``, JSON ``messages`` (strings given as is), ``source``."""
    ids = ids or [f"r{i}" for i in range(len(rows))]
    return pa.table(
        {
            "id": pa.array(ids, pa.string()),
            "messages": pa.array(rows, pa.string()),
            "source": pa.array(["test"] * len(rows), pa.string()),
        }
    )


RL_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("videos", pa.list_(pa.struct([("video", pa.string())]))),
        (
            "extra_info",
            pa.struct([("answer", pa.string()), ("question_type", pa.string()), ("index", pa.int64())]),
        ),
    ]
)


def rl_table(videos: list[list[str] | None], answers: list[str | None] | None = None) -> pa.Table:
    n = len(videos)
    answers = answers if answers is not None else ["A"] * n
    return pa.table(
        {
            "id": [f"rl{i}" for i in range(n)],
            "prompt": [[{"role": "user", "content": "<video>\nWhich shape? A. red B. blue"}]] * n,
            "videos": [None if v is None else [{"video": x} for x in v] for v in videos],
            "extra_info": [{"answer": a, "question_type": "mcq", "index": i} for i, a in enumerate(answers)],
        },
        schema=RL_SCHEMA,
    )


MEDIA = {
    "museg/charades_0.zip": ["museg/charades/c0.mp4", "museg/charades/c1.mp4"],
    "selfqa/selfqa.zip": ["selfqa/s0.mp4"],
    "longvt_source/videor1_0.zip": ["longvt_source/videor1_0/v0.mp4"],
    "longvt_source/videor1_0_images.zip": ["longvt_source/videor1_0/frames/v0_0.jpg"],
}


def build_dataset(tmp: Path) -> tuple[Path, Path]:
    """Write the layout in the module docstring; returns (source dir, parquet dir)."""
    source, parquet = tmp / "source", tmp / "parquet"
    for archive, names in MEDIA.items():
        members = {
            n: jpg_bytes() if n.endswith(".jpg") else mp4_bytes("red" if "c0" in n else "blue") for n in names
        }
        write_zip(source / archive, members)
    parquet.mkdir(parents=True, exist_ok=True)
    charades = [
        json.dumps(messages("museg/charades/c0.mp4")),
        json.dumps(messages("museg/charades/c1.mp4")),
        json.dumps(messages("selfqa/s0.mp4")),
    ]
    pq.write_table(sft_table(charades), parquet / "paravt_sft_charades_3.parquet")
    videor1 = [
        json.dumps(messages("longvt_source/videor1_0/v0.mp4", "longvt_source/videor1_0/frames/v0_0.jpg")),
        json.dumps(messages("longvt_source/videor1_0/v0.mp4")),
    ]
    pq.write_table(sft_table(videor1), parquet / "paravt_sft_videor1_2.parquet")
    rl = rl_table([["museg/charades/c0.mp4"], ["selfqa/s0.mp4"], ["longvt_source/videor1_0/v0.mp4"]])
    pq.write_table(rl, parquet / "paravt_rl_diverse_3.parquet")
    return source, parquet


# What the data stage writes for the whole of ``build_dataset``, relative to its output, sorted.
DATASET_OUTPUTS = [
    "_COMPLETE",
    "audit.json",
    "config.yaml",
    "metrics.json",
    "rl/paravt_rl_diverse_3.parquet",
    "sft/paravt_sft_charades_3.parquet",
    "sft/paravt_sft_videor1_2.parquet",
]


def read_messages(path: Path | str) -> list[list[dict]]:
    return [json.loads(m) for m in pq.read_table(path).column("messages").to_pylist()]


def media_urls(msgs: list[dict]) -> list[str]:
    return [
        part[kind]["url"]
        for m in msgs
        for part in m["content"]
        for kind in ("video_url", "image_url")
        if kind in part
    ]
