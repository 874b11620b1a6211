"""The release's frame path (``agent.frame_path=qwen-vl-utils``, preset=release): frames as the release's eval
driver sends them, our own code written from the behaviour of the two places that make them:

- ``paravt/eval/utils.py`` (EvolvingLMMs-Lab/ParaVT at cf55249): ``get_frames`` (lines 51-61: qwen-vl-utils
  ``fetch_video`` with ``nframes=64``), ``crop_frames`` (64-86: ``fps=1``, 1-16 frames, 784-50,176 px,
  ``video_start``/``video_end``), ``pil_to_b64`` (45-48: JPEG, quality 85);
- qwen-vl-utils 0.0.14 ``vision_process.py``: ``calculate_video_frame_range`` (first frame
  ``ceil(start * fps)``, last ``min(floor(end * fps), n - 1)``, an empty range an error), ``smart_nframes``
  (``nframes`` rounded to even; the fps branch: ``floor_even(min(max(n / fps_video * fps, 2), 16, n))``),
  the frame indices ``round(linspace(first, last, nframes))`` (decord/torchcodec readers), ``smart_resize``
  on the 28-px grid (overview: 100,352-602,112 px, its ``VIDEO_MIN/MAX_TOKEN_NUM`` x 28²; crops: the given
  784-50,176 px) and one torchvision ``resize`` of the decoded frames, bicubic with antialias.

The frames come back as the server decodes them: resized, then through JPEG at quality 85 and back (what the
release's data URL holds; our engines then carry these pixels losslessly). The server applies the
checkpoint's own processor settings on top (no ``mm_processor_kwargs``), so the episode's encoder uses the
processor's defaults on this path.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image

from .api import Frames, _assemble, _checked, _table
from .decoder import DecoderCache
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


def crop_indices(total: int, video_fps: float, start: float, end: float, max_frames: int = 16) -> list[int]:
    """Indices of a crop of [start, end] at 1 fps (see the module docstring)."""
    duration = total / video_fps
    first = math.ceil(max(0.0, min(start, duration)) * video_fps)
    last = min(math.floor(max(0.0, min(end, duration)) * video_fps), total - 1)
    if first >= last:
        raise InvalidWindowError(f"the window {start:g}-{end:g} s holds no frame range ({first} to {last})")
    frames = last - first + 1
    hi = math.floor(max_frames / FRAME_FACTOR) * FRAME_FACTOR
    count = min(min(max(frames / video_fps, FRAME_FACTOR), hi), frames)
    count = math.floor(count / FRAME_FACTOR) * FRAME_FACTOR
    if not FRAME_FACTOR <= count <= frames:
        raise InvalidWindowError(f"the window {start:g}-{end:g} s holds {frames} frame(s), fewer than 2")
    return linspace_indices(first, last, count)


def resize(frames: torch.Tensor, min_pixels: int, max_pixels: int) -> torch.Tensor:
    """uint8 T x C x H x W frames resized as qwen-vl-utils does (28-px grid, bicubic, antialias)."""
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.functional import resize as tv_resize

    h, w = fit_to_grid(frames.shape[2], frames.shape[3], max_pixels=max_pixels, min_pixels=min_pixels,
                       factor=FACTOR)  # fmt: skip
    return tv_resize(frames, [h, w], interpolation=InterpolationMode.BICUBIC, antialias=True)


def jpeg_round_trip(frames: torch.Tensor, quality: int = JPEG_QUALITY) -> torch.Tensor:
    """The frames after JPEG at ``quality`` and back (PIL, as the release encodes and the server decodes)."""
    out = []
    for frame in frames:
        buf = io.BytesIO()
        Image.fromarray(frame.permute(1, 2, 0).numpy()).save(buf, format="JPEG", quality=quality)
        buf.seek(0)
        out.append(torch.from_numpy(np.asarray(Image.open(buf).convert("RGB")).copy()).permute(2, 0, 1))
    return torch.stack(out).contiguous()


def _frames(
    uri: str | os.PathLike,
    pick,
    min_pixels: int,
    max_pixels: int,
    cache: DecoderCache | None,
    jpeg: bool,
    window: tuple[float, float] | None = None,
) -> Frames:
    path, table, cache = _table(uri, cache)

    def work(table) -> Frames:
        indices = pick(table)
        wanted = sorted(set(indices))
        size = (table.shown_height, table.shown_width)  # decoded whole, then resized once
        decoded = cache.decode(table, plan_runs(wanted, table.keyframes), size)
        full = _assemble(table, indices, decoded, window, window)
        pixels = resize(full.frames, min_pixels, max_pixels)
        pixels = jpeg_round_trip(pixels) if jpeg else pixels.contiguous()
        return Frames(pixels, full.timestamps, full.indices, window, window)

    return _checked(cache, table, work)


def _fps(table) -> float:
    span = table.end_time - table.start_time
    return len(table.times) / span if span > 0 else 1.0


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
    """The release's crop of [start, end] (``crop_frames``), as the server receives it (``jpeg``)."""
    s, e = parse_time(start, "start_time"), parse_time(end, "end_time")
    return _frames(uri, lambda t: crop_indices(len(t.times), _fps(t), s, e, max_frames), min_pixels,
                   max_pixels, cache, jpeg, (s, e))  # fmt: skip


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
