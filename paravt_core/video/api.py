"""Public video API: probe, overview, crop and concurrent crops.

Frames come back as ``Frames``: a uint8 tensor laid out T x C x H x W (RGB, contiguous; the layout
torchvision and the Qwen processors use), the true presentation timestamp of each frame in seconds
(absolute in the source video), its display index and the ``<12.3 seconds>`` labels of the prompt.
Tensors handed out by the overview cache are shared between callers: treat them as read-only.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch

from .decoder import DecoderCache, FrameTable
from .errors import (
    CropError,
    InvalidWindowError,
    VideoDecodeError,
    VideoError,
    VideoNotFoundError,
    for_model,
)
from .sampling import (
    Run,
    crop_frame_count,
    frames_at,
    nearest_keyframe,
    plan_runs,
    uniform_times,
)
from .sizing import DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS, fit_to_grid
from .timeparse import parse_time, shown

DEFAULT_CACHE = DecoderCache()
T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VideoInfo:
    path: str  # local path actually opened (an s3:// video is a cached local copy)
    duration: float  # seconds from 0 to the end of the last frame (absolute timeline of the video)
    fps: float  # average frame rate over the stream
    num_frames: int
    keyframe_times: tuple[float, ...]
    width: int  # as shown: sample aspect ratio applied, sides swapped by a 90-degree rotation
    height: int
    start_time: float  # timestamp of the first frame (0.0 for almost every file)
    codec: str
    rotated: bool = False  # the container's display matrix turns or mirrors the picture


@dataclass(frozen=True, eq=False)  # eq on tensors is ambiguous: compare fields explicitly
class Frames:
    frames: torch.Tensor  # uint8, T x C x H x W, RGB
    timestamps: list[float]  # true presentation time of each frame, seconds, absolute
    indices: list[int]  # display index of each frame in the stream
    window: tuple[float, float] | None = None  # the [start, end] served for a crop (clamped to the video)
    requested: tuple[float, float] | None = None  # the [start, end] asked for, in seconds

    def labels(self) -> list[str]:
        """Prompt labels, one per frame: ``<12.3 seconds>``."""
        return [time_label(t) for t in self.timestamps]

    def __len__(self) -> int:
        return len(self.indices)


def time_label(seconds: float) -> str:
    return f"<{seconds:.1f} seconds>"


# s3:// URI -> local copy, remembered for the process: media objects do not change during a run.
_S3_PATHS: OrderedDict[str, str] = OrderedDict()
_S3_LOCK = threading.Lock()


def resolve(uri: str | os.PathLike) -> str:
    """Local path for a local path or an ``s3://`` URI (downloaded once into the local cache)."""
    text = os.fspath(uri)
    if not isinstance(text, str) or not text:
        raise VideoNotFoundError(f"invalid video location {uri!r}")
    if text.startswith("s3://"):
        with _S3_LOCK:
            known = _S3_PATHS.get(text)
        if known is not None and os.path.isfile(known):
            return known  # every crop of an episode would otherwise ask the object store again
        from paravt_core import storage  # imported lazily: local use needs no S3 client

        try:
            path = storage.local_copy(text)
        except Exception as exc:  # any failure to fetch means the video is not available
            raise VideoNotFoundError(f"cannot fetch video {text}: {exc}") from exc
        with _S3_LOCK:
            _S3_PATHS[text] = path
            while len(_S3_PATHS) > 4096:
                _S3_PATHS.popitem(last=False)
        return path
    if text.startswith("file://"):
        text = text[len("file://") :]
    return os.path.abspath(text)


def _table(uri: str | os.PathLike, cache: DecoderCache | None) -> tuple[str, FrameTable, DecoderCache]:
    cache = cache or DEFAULT_CACHE
    path = resolve(uri)
    return path, cache.table(path), cache


def _checked(cache: DecoderCache, table: FrameTable, work: Callable[[FrameTable], T]) -> T:
    """Run ``work(table)``; if a table taken from the container index proves wrong (a frame does not come
    out with its expected timestamp), rebuild it by a full scan and run once more."""
    try:
        return work(table)
    except VideoDecodeError:
        if not table.from_index:
            raise
    return work(cache.rescan(table.path))


def probe(uri: str | os.PathLike, *, cache: DecoderCache | None = None) -> VideoInfo:
    """Duration, average fps, frame count, keyframe times and size of a video."""
    path, table, _ = _table(uri, cache)
    span = table.end_time - table.start_time
    return VideoInfo(
        path=path,
        duration=table.end_time,
        fps=table.num_frames / span if span > 0 else 0.0,
        num_frames=table.num_frames,
        keyframe_times=tuple(table.times[k] for k in table.keyframes),
        width=table.shown_width,
        height=table.shown_height,
        start_time=table.start_time,
        codec=table.codec,
        rotated=table.display.transpose or table.display.flip_x or table.display.flip_y,
    )


def _frame_size(table: FrameTable, max_pixels: int, min_pixels: int) -> tuple[int, int]:
    # Sizes follow the shown picture (sample aspect ratio applied, rotation swapping the sides), so the
    # pixel budget applies to what a player shows.
    h, w = table.shown_height, table.shown_width
    try:
        return fit_to_grid(h, w, max_pixels=max_pixels, min_pixels=min_pixels)
    except ValueError as exc:  # e.g. a 1x1000 frame: the video is unusable, not the episode
        raise VideoDecodeError(f"{table.path}: frames of {w}x{h} cannot be served: {exc}") from exc


def _assemble(
    table: FrameTable,
    indices: Sequence[int],
    decoded: dict[int, np.ndarray],
    window: tuple[float, float] | None = None,
    requested: tuple[float, float] | None = None,
) -> Frames:
    stacked = np.stack([decoded[i] for i in indices])  # T x H x W x C
    tensor = torch.from_numpy(stacked).permute(0, 3, 1, 2).contiguous()
    return Frames(
        frames=tensor,
        timestamps=[table.times[i] for i in indices],
        indices=list(indices),
        window=window,
        requested=requested,
    )


class _OverviewCache:
    """Overviews by (file, k, budget, mode), bounded by bytes; concurrent requests for one key decode once."""

    def __init__(self, max_bytes: int = 512 * 2**20):
        self.max_bytes = max_bytes
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._items: OrderedDict[tuple, Frames] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._key_locks: dict[tuple, threading.Lock] = {}

    def get_or_make(self, key: tuple, make) -> Frames:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                if key in self._items:
                    return self._items[key]
            frames = make()
            size = frames.frames.numel()
            with self._lock:
                self._key_locks.pop(key, None)
                if size <= self.max_bytes:
                    self._items[key] = frames
                    self._bytes += size
                    while self._bytes > self.max_bytes:
                        _, old = self._items.popitem(last=False)
                        self._bytes -= old.frames.numel()
            return frames

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0


OVERVIEW_CACHE = _OverviewCache()


def overview(
    uri: str | os.PathLike,
    k: int,
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    min_pixels: int = DEFAULT_MIN_PIXELS,
    snap_to_keyframes: bool = False,
    cache: DecoderCache | None = None,
    max_workers: int | None = None,
    reuse: bool = True,
) -> Frames:
    """``k`` frames uniformly over the whole video (first to last frame, uniform in time).

    Exact by default: each target time gets the frame shown at that time. With ``snap_to_keyframes`` each
    target gets the nearest keyframe instead (one decode per frame: a cheap skim). Frames that two targets
    share are returned once, so fewer than ``k`` frames come back only for videos with fewer frames than
    ``k`` (or long still frames). The result is cached and reused for the same file, ``k`` and budget.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    path, table, cache = _table(uri, cache)
    size = _frame_size(table, max_pixels, min_pixels)

    def work(table: FrameTable) -> Frames:
        targets = uniform_times(table.start_time, table.times[-1], k)
        if snap_to_keyframes and table.keyframes:
            indices = sorted({nearest_keyframe(table.times, table.keyframes, t) for t in targets})
            runs = [Run(i, (i,)) for i in indices]
            decoded = cache.decode(table, runs, size, max_workers=max_workers, keyframes_only=True)
        else:
            indices = sorted(set(frames_at(table.times, targets)))
            runs = plan_runs(indices, table.keyframes)
            decoded = cache.decode(table, runs, size, max_workers=max_workers)
        return _assemble(table, indices, decoded)

    def make() -> Frames:
        return _checked(cache, table, work)

    if not reuse:
        return make()
    key = (path, os.stat(path).st_mtime_ns, k, size, snap_to_keyframes)
    return OVERVIEW_CACHE.get_or_make(key, make)


@dataclass(frozen=True)
class _CropPlan:
    window: tuple[float, float]
    indices: list[int]  # one per returned frame (a frame may repeat in windows shorter than a frame)
    requested: tuple[float, float]  # the window asked for, before clamping to the timeline


def _plan_crop(
    table: FrameTable,
    start: object,
    end: object,
    *,
    fps: float,
    min_frames: int,
    max_frames: int,
    rounding: str = "nearest",
) -> _CropPlan:
    requested = (parse_time(start, "start_time"), parse_time(end, "end_time"))
    s, e = requested
    first, duration = table.start_time, table.end_time
    if s >= e:
        raise InvalidWindowError(f"start_time ({s:g}) must be smaller than end_time ({e:g})")
    if s >= duration:
        raise InvalidWindowError(
            f"start_time ({s:g}) is at or after the end of the video (duration {duration:.1f} seconds)"
        )
    if e <= first:
        # Nothing is shown before the first frame: repeating it for the whole window would be a lie.
        raise InvalidWindowError(
            f"the window {s:g}-{e:g} s ends before the video's first frame at {first:.1f} s "
            f"(the video runs from {first:.1f} to {duration:.1f} seconds)"
        )
    s, e = max(s, first), min(e, duration)  # clamp to the timeline; the tool text says so
    span = duration - first
    video_fps = len(table.times) / span if span > 0 else None  # average rate, as torchcodec reports it
    count = crop_frame_count(s, e, fps=fps, min_frames=min_frames, max_frames=max_frames, rounding=rounding,
                             video_fps=video_fps)  # fmt: skip
    # Sample between the window's edges, but never past the last frame's own timestamp.
    last = max(s, min(e, table.times[-1]))
    indices = frames_at(table.times, uniform_times(s, last, count))
    return _CropPlan((s, e), indices, requested)


def crop(
    uri: str | os.PathLike,
    start: object,
    end: object,
    *,
    min_frames: int = 2,
    max_frames: int = 16,
    fps: float = 1.0,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    min_pixels: int = DEFAULT_MIN_PIXELS,
    cache: DecoderCache | None = None,
    max_workers: int | None = None,
    rounding: str = "nearest",
) -> Frames:
    """Frames of [start, end] at ``fps`` (even count in [min_frames, max_frames]), uniform in time.

    ``start``/``end`` are seconds (numbers or strings accepted by ``parse_time``). ``end`` past the video is
    clamped; an empty window, a start at/after the end of the video or a bad time raise a ``VideoError``.
    """
    result = run_crops(
        uri,
        [(start, end)],
        max_workers=max_workers,
        min_frames=min_frames,
        max_frames=max_frames,
        fps=fps,
        max_pixels=max_pixels,
        min_pixels=min_pixels,
        cache=cache,
        rounding=rounding,
    )[0]
    if isinstance(result, CropError):
        raise result.cause if isinstance(result.cause, VideoError) else result
    return result


def clamp_note(frames: Frames) -> str:
    """What a served crop changed about the window asked for ("" when nothing), for the model."""
    if frames.window is None or frames.requested is None:
        return ""
    (s, e), (rs, re_) = frames.window, frames.requested
    notes = []
    if s > rs:
        notes.append(f"start_time {rs:g} is before the video's first frame, clamped to {s:.1f}s.")
    if e < re_:
        notes.append(f"end_time {re_:g} is past the end of the video, clamped to {e:.1f}s.")
    return " ".join(notes)


def run_crops(
    uri: str | os.PathLike,
    windows: Sequence[tuple[object, object]],
    max_workers: int | None = None,
    *,
    min_frames: int = 2,
    max_frames: int = 16,
    fps: float = 1.0,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    min_pixels: int = DEFAULT_MIN_PIXELS,
    cache: DecoderCache | None = None,
    rounding: str = "nearest",
) -> list[Frames | CropError]:
    """All crops of one turn, decoded together and concurrently over the shared handle cache.

    Returns one entry per window, in order: ``Frames`` or a ``CropError`` (returned, not raised) whose
    message is meant for the model: it names the video by its file name only (the full path is logged).
    Frames that several windows need are decoded once.
    """
    path = None
    try:
        path, table, cache = _table(uri, cache)
        size = _frame_size(table, max_pixels, min_pixels)
        options = {"fps": fps, "min_frames": min_frames, "max_frames": max_frames, "rounding": rounding}
        try:
            results = _checked(
                cache, table, lambda t: _serve_crops(cache, t, windows, size, max_workers, options)
            )
        except VideoDecodeError:  # every window failed to decode even after a rescan
            results = _serve_crops(cache, table, windows, size, max_workers, options, together=False)
    except VideoError as exc:
        results = [CropError(str(exc), start=s, end=e, cause=exc) for s, e in windows]
    return [_public(r, uri, path) for r in results]


def _public(result: Frames | CropError, uri: str | os.PathLike, path: str | None) -> Frames | CropError:
    """The same crop error with host paths reduced to file names; the full message goes to the log."""
    if not isinstance(result, CropError):
        return result
    full = str(result)
    # shown(): a raw time of over 4300 digits would make the log record itself fail to format
    log.info("crop %s-%s of %s failed: %s", shown(result.start), shown(result.end), os.fspath(uri), full)
    text = for_model(full, os.fspath(uri), path)
    return CropError(text, start=result.start, end=result.end, cause=result.cause)


def _serve_crops(
    cache: DecoderCache,
    table: FrameTable,
    windows: Sequence[tuple[object, object]],
    size: tuple[int, int],
    max_workers: int | None,
    options: dict,
    together: bool = True,
) -> list[Frames | CropError]:
    """Plan every window, decode the frames they need together (each frame once), then cut per window.
    If decoding them together fails (a damaged stretch) and ``together`` is False, windows are decoded
    one by one so the readable ones still succeed; with ``together`` the failure propagates."""
    plans: list[_CropPlan | CropError] = []
    for start, end in windows:
        try:
            plans.append(_plan_crop(table, start, end, **options))
        except VideoError as exc:
            plans.append(CropError(str(exc), start=start, end=end, cause=exc))
    valid = [p for p in plans if isinstance(p, _CropPlan)]
    decoded: dict[int, np.ndarray] | None = None
    if valid and together:
        wanted = sorted({i for p in valid for i in p.indices})
        decoded = cache.decode(table, plan_runs(wanted, table.keyframes), size, max_workers=max_workers)
    out: list[Frames | CropError] = []
    for (start, end), plan in zip(windows, plans, strict=True):
        if isinstance(plan, CropError):
            out.append(plan)
            continue
        try:
            part = decoded
            if part is None:
                runs = plan_runs(sorted(set(plan.indices)), table.keyframes)
                part = cache.decode(table, runs, size, max_workers=max_workers)
            out.append(_assemble(table, plan.indices, part, plan.window, plan.requested))
        except VideoError as exc:
            out.append(CropError(str(exc), start=start, end=end, cause=exc))
    return out
