"""The ``crop_video`` tool as the agent calls it.

The model's arguments choose only a time window. Whatever ``video_path`` it writes is ignored: the tool
always crops the sample's own video, so a model cannot make us open an arbitrary file.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

from .api import Frames, clamp_note, crop
from .errors import VideoError, for_model
from .timeparse import parse_time, shown

log = logging.getLogger(__name__)

START_KEYS = ("start_time", "start")
END_KEYS = ("end_time", "end")


@dataclass(frozen=True)
class ToolResult:
    ok: bool
    frames: Frames | None
    text: str  # a short description on success, an error message for the model otherwise


def _pick(arguments: Mapping, keys: tuple[str, ...]) -> object:
    for key in keys:
        if key in arguments:
            return arguments[key]
    return None


def parse_crop_arguments(arguments: object) -> tuple[float, float]:
    """``(start, end)`` in seconds from the model's arguments; raises ``VideoError`` subclasses with
    messages meant for the model. Window checks that need the video (duration) happen in ``crop``."""
    if not isinstance(arguments, Mapping):
        raise _ArgumentError(
            f"arguments must be a JSON object with start_time and end_time, got {shown(arguments)}"
        )
    start = _pick(arguments, START_KEYS)
    end = _pick(arguments, END_KEYS)
    if start is None or end is None:
        missing = [keys[0] for keys, value in ((START_KEYS, start), (END_KEYS, end)) if value is None]
        raise _ArgumentError(f"missing {' and '.join(missing)} (seconds, e.g. 12.5, or MM:SS)")
    return parse_time(start, "start_time"), parse_time(end, "end_time")


class _ArgumentError(VideoError, ValueError):
    pass


def crop_video_tool(video_uri: str | os.PathLike, arguments: object, **crop_kwargs) -> ToolResult:
    """Run ``crop_video`` on the sample's video. Never raises for bad arguments or a bad video file; error
    texts name the video by its file name only (the full path goes to the log)."""
    try:
        start, end = parse_crop_arguments(arguments)
        frames = crop(video_uri, start, end, **crop_kwargs)
    except VideoError as exc:
        log.info("crop_video on %s failed: %s", os.fspath(video_uri), exc)
        text = for_model(str(exc), os.fspath(video_uri))
        return ToolResult(ok=False, frames=None, text=f"Error: crop_video failed: {text}")
    s, e = frames.window or (start, end)
    text = f"Cropped {s:.1f}s to {e:.1f}s: {len(frames)} frames."
    note = clamp_note(frames)
    return ToolResult(ok=True, frames=frames, text=f"{text} {note}" if note else text)
