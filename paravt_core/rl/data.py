"""RL prompts from the data stage's output: ``<data>/rl/*.parquet`` (docs/method.md §2.4 schema, media materialized).

A row becomes an ``RlPrompt``: its id, the video, the question (the prompt's text with the ``<video>``
placeholder removed: the episode puts the overview frames there itself), the gold answer and the question
type. Rows without a usable video or question are skipped and counted by reason, never silently dropped.
"""

from __future__ import annotations

import io
import json
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from paravt_core import storage
from paravt_core.data.schema import VIDEO_PLACEHOLDER
from paravt_core.data.validate import DataError


@dataclass(frozen=True)
class RlPrompt:
    row_id: str
    video: str
    question: str
    gold: str
    question_type: str

    def to_dict(self) -> dict[str, str]:
        return {
            "row_id": self.row_id,
            "video": self.video,
            "question": self.question,
            "gold": self.gold,
            "question_type": self.question_type,
        }


@dataclass
class RlDataset:
    prompts: list[RlPrompt]
    skipped: Counter  # reason -> rows
    files: list[str]


def _question(prompt: Any) -> str:
    if isinstance(prompt, str):
        prompt = json.loads(prompt)
    texts = [str(m.get("content") or "") for m in prompt if m.get("role") == "user"]
    return "\n".join(t.replace(VIDEO_PLACEHOLDER, "").strip() for t in texts).strip()


def _video_exists(uri: str) -> bool:
    return storage.exists(uri) if storage.is_s3(uri) else os.path.isfile(uri)


def to_prompt(
    row: dict[str, Any], index: int, *, check_video: bool = True
) -> tuple[RlPrompt | None, str | None]:
    """(prompt, None) or (None, why the row is skipped)."""
    try:
        info = row.get("extra_info") or {}
        if isinstance(info, str):
            info = json.loads(info)
        videos = row.get("videos") or []
        if not videos or not (videos[0] or {}).get("video"):
            return None, "no_video"
        video = str(videos[0]["video"])
        question = _question(row.get("prompt") or [])
        if not question:
            return None, "no_question"
        if "answer" not in info:
            return None, "no_answer"
        if check_video and not _video_exists(video):
            return None, "missing_video"
        row_id = str(row.get("id") or f"row-{index}")
        qtype = str(info.get("question_type") or "oe")
        return RlPrompt(row_id, video, question, str(info["answer"]), qtype), None
    except (TypeError, ValueError, AttributeError, KeyError):
        return None, "malformed_row"


def load_prompts(data_uri: str, *, check_video: bool = True) -> RlDataset:
    """Every usable prompt of ``<data_uri>/rl/*.parquet`` in file-name order, and the skip counts."""
    files = sorted(storage.list_uris(storage.join(data_uri, "rl"), suffix=".parquet"))
    if not files:
        raise FileNotFoundError(f"{storage.join(data_uri, 'rl')}: no RL parquet (run `paravt data` first)")
    prompts: list[RlPrompt] = []
    skipped: Counter = Counter()
    for uri in files:
        raw = storage.read_bytes(uri)  # a storage error says so itself
        try:
            table = pq.read_table(io.BytesIO(raw))
        except (pa.ArrowException, OSError) as err:  # truncated, overwritten, not a parquet at all
            raise DataError(f"{uri}: not a readable parquet file ({err}); rerun `paravt data`") from err
        for row in table.to_pylist():  # RL files are small (4.4K rows released): row dicts are fine here
            prompt, why = to_prompt(row, len(prompts) + sum(skipped.values()), check_video=check_video)
            if prompt is None:
                skipped[why] += 1
            else:
                prompts.append(prompt)
    return RlDataset(prompts, skipped, files)
