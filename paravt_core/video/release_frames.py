"""The release's frame path (``agent.frame_path=qwen-vl-utils``, preset=release): frames as the release's eval
driver sends them, our own code written from the behaviour of the two places that make them:

- ``paravt/eval/utils.py`` (EvolvingLMMs-Lab/ParaVT at cf55249): ``get_frames`` (lines 51-61: qwen-vl-utils
  ``fetch_video`` with ``nframes=64``), ``crop_frames`` (64-86: ``fps=1``, 1-16 frames, 784-50,176 px,
  ``video_start``/``video_end``), ``pil_to_b64`` (45-48: JPEG, quality 85);
- qwen-vl-utils 0.0.14 ``vision_process.py``: ``calculate_video_frame_range`` (start and end each clamped to
  ``max(0, min(t, n / fps))``, first frame ``ceil(start * fps)``, last ``min(floor(end * fps), n - 1)``, an
  empty range (first >= last) an error), ``smart_nframes``
  (``nframes`` rounded to even; the fps branch: ``floor_even(min(max(n / fps_video * fps, 2), 16, n))``),
  the frame indices ``round(linspace(first, last, nframes))`` (decord/torchcodec readers), ``smart_resize``
  on the 28-px grid (overview: 100,352-602,112 px, its ``VIDEO_MIN/MAX_TOKEN_NUM`` x 28²; crops: the given
  784-50,176 px) and one torchvision ``resize`` of the decoded frames, bicubic with antialias;
- the reader qwen-vl-utils picks: torchcodec when installed (``get_video_reader_backend``), 0.10.0 in the
  release's ``requirements/eval.lock`` (which also pins torchvision 0.25.0 and av 15.1.0); on any error of that
  reader ``fetch_video`` retries with torchvision's ``read_video`` (see ``fallback_indices``).

Frames are read as those readers return them: the coded picture, at the stream's coded width and height, no
sample aspect ratio and no display rotation applied (torchcodec's batch decode sizes its output from the
codec context, ``SingleStreamDecoder.cpp``; it applies rotation only from 0.11, meta-pytorch/torchcodec#1173;
torchvision's ``read_video`` and decord return the decoded picture as it is). Our own path shows frames as a
player does (``decoder.py``).

The frames come back as the server decodes them: resized, then through JPEG at quality 85 and back (what the
release's data URL holds; our engines then carry these pixels losslessly). The server applies the
checkpoint's own processor settings on top (no ``mm_processor_kwargs``), so the episode's encoder uses the
processor's defaults on this path.
"""

from __future__ import annotations

import dataclasses
import io
import math
import os
from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np
import torch
from PIL import Image

from .api import Frames, _assemble, _checked, _table
from .decoder import DecoderCache, FrameTable
from .display import Display
from .errors import CropError, InvalidWindowError, VideoError, VideoNotFoundError
from .sampling import plan_runs
from .sizing import fit_to_grid
from .timeparse import parse_time

FACTOR = 28  # qwen-vl-utils 0.0.14: image_patch_size 14 x SPATIAL_MERGE_SIZE 2
FRAME_FACTOR = 2
OVERVIEW_MIN_PIXELS = 128 * FACTOR * FACTOR  # VIDEO_MIN_TOKEN_NUM
OVERVIEW_MAX_PIXELS = 768 * FACTOR * FACTOR  # VIDEO_MAX_TOKEN_NUM (below its total-pixel cap for 64 frames)
CROP_MIN_PIXELS, CROP_MAX_PIXELS = 784, 50_176  # utils.py crop_frames
JPEG_QUALITY = 85  # utils.py pil_to_b64


def linspace_indices(first: int, last: int, count: int) -> list[int]:
    """``round(linspace(first, last, count))`` computed as qwen-vl-utils does (torch, ties to even)."""
    return torch.linspace(first, last, count).round().long().tolist()


def overview_indices(total: int, nframes: int = 64) -> list[int]:
    """Indices of the overview: ``nframes`` rounded to even over every frame (an error when the video has
    fewer frames: qwen-vl-utils raises and the release sends no frames)."""
    count = round(nframes / FRAME_FACTOR) * FRAME_FACTOR
    if not FRAME_FACTOR <= count <= total:
        raise VideoError(f"{count} frames asked of a video of {total} frames")
    return linspace_indices(0, total - 1, count)


def clamp_time(value: float, duration: float) -> float:
    """A crop time clamped to the video as ``calculate_video_frame_range`` clamps ``video_start``/``video_end``
    (qwen-vl-utils 0.0.14 vision_process.py): ``max(0.0, min(value, duration))``, written in that order so a
    NaN comes out as 0.0 there too (``min`` keeps the NaN, ``max`` then drops it)."""
    return max(0.0, min(value, duration))


def even_count(frames: int, video_fps: float, max_frames: int) -> int:
    """``smart_nframes``' fps branch at 1 fps: ``floor_even(min(max(n / fps, 2), floor_even(max), n))``."""
    hi = math.floor(max_frames / FRAME_FACTOR) * FRAME_FACTOR
    count = min(min(max(frames / video_fps, FRAME_FACTOR), hi), frames)
    return math.floor(count / FRAME_FACTOR) * FRAME_FACTOR


def crop_indices(total: int, video_fps: float, start: float, end: float, max_frames: int = 16) -> list[int]:
    """Indices of a crop of [start, end] at 1 fps as qwen-vl-utils' torchcodec reader picks them: both times
    clamped to [0, total / fps], first ``ceil(start * fps)``, last ``min(floor(end * fps), total - 1)``; an
    empty range (first >= last) raises, as ``calculate_video_frame_range`` does."""
    duration = total / video_fps
    first = math.ceil(clamp_time(start, duration) * video_fps)
    last = min(math.floor(clamp_time(end, duration) * video_fps), total - 1)
    if first >= last:
        raise InvalidWindowError(f"the window {start:g}-{end:g} s holds no frame range ({first} to {last})")
    frames = last - first + 1
    count = even_count(frames, video_fps, max_frames)
    if not FRAME_FACTOR <= count <= frames:
        raise InvalidWindowError(f"the window {start:g}-{end:g} s holds {frames} frame(s), fewer than 2")
    return linspace_indices(first, last, count)


def fallback_indices(
    pts: Sequence[int], time_base: Fraction, video_fps: float, start: float, end: float, max_frames: int = 16
) -> list[int]:
    """Indices of the frames torchvision 0.25.0's ``read_video(start_pts=start, end_pts=end, pts_unit="sec")``
    returns (torchvision/io/video.py ``read_video``, ``_read_from_stream``), then sampled by ``smart_nframes``
    and ``round(linspace)`` (qwen-vl-utils 0.0.14 ``_read_video_torchvision``): the retry ``fetch_video`` makes
    when the torchcodec reader raises. The times are the asked-for ones, not clamped: an end before the start
    raises; otherwise the frames whose pts lies in [floor(start / tb), ceil(end / tb)] (an infinite end is no
    bound), led by the last frame before that start when the start is > 0 tick and on no frame. A start (or a
    finite end) whose tick count is not finite raises. ``pts`` in stream ticks, ``time_base`` the tick in s."""
    if end < start:
        raise InvalidWindowError(f"the window {start:g}-{end:g} s ends before it starts")
    ticks = float(1 / time_base)  # seconds x Fraction is a float product there too
    lo_ticks, hi_ticks = start * ticks, end * ticks
    if not math.isfinite(lo_ticks) or (end != math.inf and not math.isfinite(hi_ticks)):
        # math.floor / math.ceil raise there (OverflowError, ValueError): the retry fails too
        raise InvalidWindowError(f"the window {start:g}-{end:g} s is not a finite range")
    lo = math.floor(lo_ticks)
    hi = math.inf if end == math.inf else math.ceil(hi_ticks)
    picked = [i for i, p in enumerate(pts) if lo <= p <= hi]
    before = [i for i, p in enumerate(pts) if p < lo]
    if lo > 0 and lo not in pts and before:
        picked.insert(0, before[-1])  # torchvision keeps the frame shown at the start time
    count = even_count(len(picked), video_fps, max_frames)
    if not FRAME_FACTOR <= count <= len(picked):
        raise InvalidWindowError(f"the window {start:g}-{end:g} s holds {len(picked)} frame(s), fewer than 2")
    return [picked[k] for k in linspace_indices(0, len(picked) - 1, count)]


def release_crop_indices(table: FrameTable, start: float, end: float, max_frames: int = 16) -> list[int]:
    """What ``fetch_video`` returns for a crop: the torchcodec reader's frames, or where that reader raises (an
    empty clamped range), torchvision's (``fallback_indices``). Where both fail, the torchcodec reader's error."""
    fps = _fps(table)
    try:
        return crop_indices(len(table.times), fps, start, end, max_frames)
    except InvalidWindowError as first_error:
        try:
            return fallback_indices(table.pts.tolist(), table.time_base, fps, start, end, max_frames)
        except InvalidWindowError:
            raise first_error from None


def resize(frames: torch.Tensor, min_pixels: int, max_pixels: int) -> torch.Tensor:
    """uint8 T x C x H x W frames resized as qwen-vl-utils does (28-px grid, bicubic, antialias)."""
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.functional import resize as tv_resize

    h, w = fit_to_grid(frames.shape[2], frames.shape[3], max_pixels=max_pixels, min_pixels=min_pixels,
                       factor=FACTOR)  # fmt: skip
    return tv_resize(frames, [h, w], interpolation=InterpolationMode.BICUBIC, antialias=True)


def jpeg_round_trip(frames: torch.Tensor, quality: int = JPEG_QUALITY) -> torch.Tensor:
    """The frames after JPEG at ``quality`` and back (PIL, as the release encodes and the server decodes). The
    result keeps the JPEG bytes each frame was decoded from (``encoded_jpeg``), so an engine can send them."""
    out, encoded = [], []
    for frame in frames:
        buf = io.BytesIO()
        Image.fromarray(frame.permute(1, 2, 0).numpy()).save(buf, format="JPEG", quality=quality)
        encoded.append(buf.getvalue())
        buf.seek(0)
        out.append(torch.from_numpy(np.asarray(Image.open(buf).convert("RGB")).copy()).permute(2, 0, 1))
    stacked = torch.stack(out).contiguous()
    setattr(stacked, JPEG_BYTES_ATTR, tuple(encoded))
    return stacked


# The attribute of a ``jpeg_round_trip`` result that holds its frames' JPEG bytes. On the tensor itself, so the
# bytes live exactly as long as the pixels: a frame taken from it (``frames[i]``, iterating it) is a view whose
# ``_base`` is that tensor, and keeps it alive.
JPEG_BYTES_ATTR = "paravt_jpeg_bytes"


def encoded_jpeg(frame: torch.Tensor) -> bytes | None:
    """The JPEG bytes whose decoding (PIL) is ``frame``, when ``frame`` is one whole C x H x W frame of a
    ``jpeg_round_trip`` result (``frames[i]``, a frame of an iteration or of a slice of it); None otherwise (our own
    frame path's frames, a copy, a crop or permutation of a frame)."""
    stack = getattr(frame, "_base", None)
    encoded = getattr(stack, JPEG_BYTES_ATTR, None)
    if encoded is None or frame.dtype != torch.uint8 or frame.shape != stack.shape[1:]:
        return None
    if frame.stride() != stack.stride()[1:]:  # a transposed view of the same shape: not one frame's pixels
        return None
    index, rest = divmod(frame.storage_offset() - stack.storage_offset(), stack.stride(0))
    return encoded[index] if rest == 0 and 0 <= index < len(encoded) else None


def coded(table: FrameTable) -> FrameTable:
    """``table`` decoding to the coded picture as stored (no sample aspect ratio, rotation or mirroring): what
    qwen-vl-utils' readers return under the release's lock (see the module docstring)."""
    return dataclasses.replace(table, display=Display())


def _frames(
    uri: str | os.PathLike,
    pick: Callable[[FrameTable], list[int]],
    min_pixels: int,
    max_pixels: int,
    cache: DecoderCache | None,
    jpeg: bool,
    window: Callable[[FrameTable], tuple[float, float]] | None = None,
    requested: tuple[float, float] | None = None,
) -> Frames:
    path, table, cache = _table(uri, cache)

    def work(table: FrameTable) -> Frames:
        indices = pick(table)
        wanted = sorted(set(indices))
        stored = coded(table)
        size = (stored.height, stored.width)  # decoded whole at the coded size, then resized once
        decoded = cache.decode(stored, plan_runs(wanted, stored.keyframes), size)
        served = window(table) if window else None
        full = _assemble(stored, indices, decoded, served, requested)
        pixels = resize(full.frames, min_pixels, max_pixels)
        pixels = jpeg_round_trip(pixels) if jpeg else pixels.contiguous()
        return Frames(pixels, full.timestamps, full.indices, served, requested)

    return _checked(cache, table, work)


def _fps(table: FrameTable) -> float:
    span = table.end_time - table.start_time
    return len(table.times) / span if span > 0 else 1.0


def _clamped_window(start: float, end: float) -> Callable[[FrameTable], tuple[float, float]]:
    """The window a crop serves: both times clamped to the video as the torchcodec reader clamps them."""

    def window(table: FrameTable) -> tuple[float, float]:
        duration = len(table.times) / _fps(table)
        return clamp_time(start, duration), clamp_time(end, duration)

    return window


def release_time(value: object, name: str) -> float:
    """A crop time as qwen-vl-utils takes it: a number as it is (negative, huge, inf or NaN: the clamp decides),
    other values through our ``parse_time`` (the driver itself only passes floats, ``parse_time_val``)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:  # an int beyond float range: parse_time names it
            pass
    return parse_time(value, name)


def overview(
    uri: str | os.PathLike, nframes: int = 64, *, cache: DecoderCache | None = None, jpeg: bool = True
) -> Frames:
    """The release's overview of ``uri`` (``get_frames``), as the server receives it (``jpeg``)."""
    return _frames(uri, lambda t: overview_indices(len(t.times), nframes), OVERVIEW_MIN_PIXELS,
                   OVERVIEW_MAX_PIXELS, cache, jpeg)  # fmt: skip


def overview_fail_soft(
    uri: str | os.PathLike, nframes: int = 64, *, cache: DecoderCache | None = None
) -> Frames:
    """``overview``, or no frames at all where qwen-vl-utils fails (a video shorter than ``nframes`` frames, an
    undecodable file): ``get_frames`` catches every error and the release asks its question without frames. A
    missing file is still an error (``eval_one`` checks that first)."""
    try:
        return overview(uri, nframes, cache=cache)
    except VideoNotFoundError:
        raise
    except VideoError:
        return Frames(torch.empty((0, 3, FACTOR, FACTOR), dtype=torch.uint8), [], [])


def crop(
    uri: str | os.PathLike,
    start: object,
    end: object,
    *,
    max_frames: int = 16,
    min_pixels: int = CROP_MIN_PIXELS,
    max_pixels: int = CROP_MAX_PIXELS,
    cache: DecoderCache | None = None,
    jpeg: bool = True,
) -> Frames:
    """The release's crop of [start, end] (``crop_frames``), as the server receives it (``jpeg``). A window out
    of the video is clamped to it (``release_crop_indices``); ``window`` is the clamped one, ``requested`` the
    times asked for."""
    s, e = release_time(start, "start_time"), release_time(end, "end_time")
    return _frames(uri, lambda t: release_crop_indices(t, s, e, max_frames), min_pixels, max_pixels, cache,
                   jpeg, _clamped_window(s, e), (s, e))  # fmt: skip


def run_crops(
    uri: str | os.PathLike, windows: Sequence[tuple[object, object]], **options
) -> list[Frames | CropError]:
    """Every window's crop, or a ``CropError`` for it (the release then answers "[Error cropping ...]")."""
    out: list[Frames | CropError] = []
    for start, end in windows:
        try:
            out.append(crop(uri, start, end, **options))
        except VideoError as exc:
            out.append(CropError(str(exc), start=start, end=end, cause=exc))
    return out
