"""Reading a benchmark's local copy: parquet, Arrow (a ``save_to_disk`` directory), JSON and JSON Lines.

A source is a file or a directory. A directory is searched (recursively) for the first format present, in the
order parquet, arrow, jsonl, json; ``split`` narrows the files to those whose path mentions it (Hugging Face
layouts: ``videomme/test-00000-of-00001.parquet``, ``data/validation-*.parquet``, ``validation.json``).
Rows come back as plain dicts. Hand-written over ``datasets.load_from_disk`` because the images do not ship
``datasets``; Arrow files of a saved dataset are plain IPC streams that pyarrow reads directly.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from paravt_core.user_errors import ParavtUserError

SUFFIXES = (".parquet", ".arrow", ".jsonl", ".json")
# Short names of a split in file names (LongVideoBench's json-only copy: lvb_val.json beside lvb_test_wo_gt.json
# and subtitles/*.json).
SPLIT_ALIASES = {"validation": ("val",)}


class FormatError(ParavtUserError, ValueError):
    """A source that holds no readable rows."""


def find_files(source: str, split: str = "") -> list[Path]:
    """The row files of ``source`` (one format, sorted), narrowed to ``split`` when any file names it."""
    path = Path(source)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FormatError(f"benchmark source {source} does not exist")
    for suffix in SUFFIXES:
        files = sorted(p for p in path.rglob(f"*{suffix}") if p.is_file() and not _hidden(p, path))
        if split:
            names = "|".join(re.escape(n) for n in (split, *SPLIT_ALIASES.get(split, ())))
            named = [p for p in files if re.search(rf"(^|[/_\-.])({names})([/_\-.]|$)", _rel(p, path))]
            files = named or files
        if files:
            return files
    raise FormatError(f"no {', '.join(SUFFIXES)} files under {source}")


def _rel(p: Path, root: Path) -> str:
    return p.relative_to(root).as_posix()


def _hidden(p: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in p.relative_to(root).parts)


def read_rows(source: str, split: str = "") -> list[dict[str, Any]]:
    """Every row of ``source`` as a dict, in file order."""
    rows: list[dict[str, Any]] = []
    for f in find_files(source, split):
        rows.extend(_read_file(f))
    return rows


def _read_file(path: Path) -> list[dict[str, Any]]:
    try:
        if path.suffix == ".parquet":
            return pq.read_table(path).to_pylist()
        if path.suffix == ".arrow":
            with pa.memory_map(str(path)) as source:
                try:
                    table = pa.ipc.open_stream(source).read_all()
                except pa.ArrowInvalid:
                    source.seek(0)
                    table = pa.ipc.open_file(source).read_all()
            return table.to_pylist()
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".jsonl":
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        data = json.loads(text)
    except (OSError, ValueError, pa.ArrowException) as err:
        raise FormatError(f"{path}: cannot be read ({type(err).__name__}: {err})") from None
    if isinstance(data, dict):  # {"split": [...]} or {"data": [...]}
        lists = [v for v in data.values() if isinstance(v, list)]
        data = lists[0] if len(lists) == 1 else [data]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise FormatError(f"{path}: expected a list of objects")
    return data


# ---------------------------------------------------------------------------------------------------------
# Subtitles


_SRT_TIME = re.compile(r"(\d+):(\d{2}):(\d{2})[,.](\d{1,3})")
_TAGS = re.compile(r"<[^>]+>")


def srt_seconds(text: str) -> float:
    """``00:01:02,500`` -> 62.5."""
    m = _SRT_TIME.fullmatch(text.strip())
    if not m:
        raise ValueError(f"not an SRT time: {text!r}")
    h, mi, s, ms = m.groups()
    return int(h) * 3600 + int(mi) * 60 + int(s) + int(ms.ljust(3, "0")) / 1000


def parse_srt(text: str, join: str = " ") -> list[tuple[float, float, str]]:
    """(start, end, text) cues of an SRT file; markup such as ``<font ...>`` is removed. A cue's lines are
    joined by ``join`` (the release's driver keeps one subtitle line per line: ``join="\n"``)."""
    cues = []
    for block in re.split(r"\r?\n\s*\r?\n", text.strip()):
        lines = [ln.strip() for ln in block.splitlines() if ln.strip()]
        arrow = next((i for i, ln in enumerate(lines) if "-->" in ln), None)
        if arrow is None:
            continue
        start, end = (part.strip() for part in lines[arrow].split("-->", 1))
        try:
            a, b = srt_seconds(start), srt_seconds(end.split()[0])
        except ValueError:
            continue
        body = join.join(t for ln in lines[arrow + 1 :] if (t := _TAGS.sub("", ln).strip())).strip()
        if body:
            cues.append((a, b, body))
    return cues


def subtitle_text(uri: str, join: str = " ") -> str | None:
    """The cue texts of a subtitle file (local path or ``s3://`` URI), one per line (a cue's own lines joined
    by ``join``); None when it does not exist (Video-MME has no subtitle file for some videos)."""
    data = _subtitle_bytes(uri)
    if data is None:
        return None
    raw = data.decode("utf-8", errors="replace")
    if str(uri).endswith(".json"):  # LongVideoBench: [{"start", "end", "line"}] or [{"timestamp", "text"}]
        items = json.loads(raw)
        return "\n".join(str(i.get("line", i.get("text", ""))).strip() for i in items if isinstance(i, dict))
    return "\n".join(body for _, _, body in parse_srt(raw, join))


def aligned_subtitles(
    cues: list[tuple[float, float, str]], fps: float, total_frames: int, frame_num: int
) -> str:
    """The cues that cover the ``frame_num`` uniformly sampled frames, one per line, in file order: lmms-eval
    0.7.3's Video-MME with subtitles (tasks/videomme/utils.py ``videomme_doc_to_text_subtitle`` with
    ``frame_num``): frames ``linspace(0, total_frames - 1, frame_num)`` truncated to ints; a cue [start, end)
    covers frame f when ``int(start * fps) <= f < int(end * fps)``."""
    if frame_num <= 0 or total_frames <= 0 or fps <= 0:
        return ""
    if frame_num == 1:
        sampled = [0]
    else:
        step = (total_frames - 1) / (frame_num - 1)
        sampled = [int(i * step) for i in range(frame_num)]
    spans = [(int(a * fps), int(b * fps)) for a, b, _ in cues]
    kept = [i for i, (lo, hi) in enumerate(spans) if any(lo <= f < hi for f in sampled)]
    return "\n".join(cues[i][2] for i in kept)


def release_srt_lines(raw: bytes) -> str:
    """The subtitle text the release's driver gives the model (``parse_srt``, ``paravt/eval/utils.py`` lines
    178-195 at cf55249), our own code written from its behaviour: the bytes decoded as UTF-8 with undecodable
    bytes dropped, line ends made ``\\n`` (Python's text mode), blocks split at blank lines, and in each block
    of at least three lines every line after the **second** (by position: a block without its index line loses
    its first text line, and a broken time line is not noticed), markup removed, one line per line."""
    text = raw.decode("utf-8", errors="ignore").replace("\r\n", "\n").replace("\r", "\n")
    lines = []
    for block in re.split(r"\n\s*\n", text.strip()):
        parts = block.strip().split("\n")
        if len(parts) < 3:
            continue
        lines += [t for ln in parts[2:] if (t := _TAGS.sub("", ln).strip())]
    return "\n".join(lines)


def release_subtitle_text(uri: str) -> str | None:
    """:func:`release_srt_lines` of a subtitle file (local path or ``s3://`` URI); None when it does not exist."""
    raw = _subtitle_bytes(uri)
    return None if raw is None else release_srt_lines(raw)


def _subtitle_bytes(uri: str) -> bytes | None:
    """A subtitle file's bytes, None when it does not exist (Video-MME has no subtitle file for some videos)."""
    from paravt_core import storage

    try:
        return storage.read_bytes(uri)
    except FileNotFoundError:
        return None
