"""Names shared by the synthetic data generator and the data stage (docs/method.md §2).

Kept deliberately small: sentinel buckets, required columns, question types and the
parquet file-name conventions of ``ParaVT/ParaVT-Parquet``. No I/O here.
"""

from __future__ import annotations

import re

# The four sentinel buckets (docs/method.md §2.2). Every media path in a released parquet starts with one of them.
SENTINEL_BUCKETS: tuple[str, ...] = ("longvt_source", "museg/charades", "museg/et_instruct_164k", "selfqa")
SENTINEL_PREFIXES: tuple[str, ...] = tuple(b + "/" for b in SENTINEL_BUCKETS)

# SFT (docs/method.md §2.3): `messages` is a JSON string (or a native nested list) of {role, content: [parts]}.
SFT_REQUIRED_COLUMNS: tuple[str, ...] = ("messages",)
SFT_ROLES: tuple[str, ...] = ("system", "user", "assistant")
MEDIA_PART_TYPES: tuple[str, ...] = ("video_url", "image_url")
SFT_SPLITS: tuple[str, ...] = (
    "charades",
    "geminicot",
    "longvideoreason",
    "museg",
    "selftrace",
    "tvg",
    "videor1",
)

# RL (docs/method.md §2.4): `prompt` list<{role, content: str}>, `videos` list<{video}>, `extra_info` {answer, question_type}.
RL_REQUIRED_COLUMNS: tuple[str, ...] = ("prompt", "videos", "extra_info")
RL_EXTRA_INFO_KEYS: tuple[str, ...] = ("answer", "question_type")
VIDEO_PLACEHOLDER = "<video>"

# `mcq`: answer is a letter; `tvg`: answer is "start, end" in seconds; anything else is open-ended.
QUESTION_TYPES: tuple[str, ...] = ("mcq", "tvg", "oe")

# Synthetic eval split written by `paravt synth` (one row per item; `video` is a sentinel path).
EVAL_COLUMNS: tuple[str, ...] = ("id", "video", "question", "options", "answer", "question_type", "duration")

_PARQUET_NAME = re.compile(r"^paravt_(sft|rl)_([a-z0-9]+(?:_[a-z0-9]+)*?)_(\d+(?:k\d*)?)\.parquet$")


def bucket_of(path: str) -> str | None:
    """The sentinel bucket a relative path belongs to, or None if it is not a sentinel path."""
    for bucket, prefix in zip(SENTINEL_BUCKETS, SENTINEL_PREFIXES, strict=True):
        if path.startswith(prefix):
            return bucket
    return None


def parquet_kind(filename: str) -> str | None:
    """'sft' or 'rl' for a released parquet file name (``paravt_sft_tvg_6k3.parquet``), else None."""
    m = _PARQUET_NAME.match(filename.rsplit("/", 1)[-1])
    return m.group(1) if m else None


def count_tag(n: int) -> str:
    """Row-count suffix in the release's style: 6 -> '6', 4800 -> '4k8', 50000 -> '50k'."""
    if n < 1000:
        return str(n)
    tenths = (n % 1000) // 100
    return f"{n // 1000}k{tenths}" if tenths else f"{n // 1000}k"
