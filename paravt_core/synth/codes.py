"""Index-coded synthetic videos: every frame shows its own index as a 4x4 grid of black/white blocks.

Used by tests and benchmarks to check that a decoder returns exactly the frame it claims: the blocks are
large (a quarter of the frame per row/column), so they survive H.264 and any resize to at least 8x8 px.
Videos are encoded by the synthetic data's one writer (``writer.encode_frames``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from pathlib import Path

import numpy as np

from paravt_core.synth.writer import encode_frames

BITS = 16  # 4 x 4 blocks: indices up to 65535
TIMESCALE = 600  # ticks per second of the test videos: divisible by 10, 12, 24, 25, 30, 50, 60


def code_image(index: int, width: int = 128, height: int = 96) -> np.ndarray:
    """Grey HxW image of ``index``: block b (row-major, 4 per row) is white iff bit b is set."""
    if not 0 <= index < 2**BITS:
        raise ValueError(f"index {index} does not fit in {BITS} bits")
    image = np.zeros((height, width), dtype=np.uint8)
    for bit in range(BITS):
        if index >> bit & 1:
            row, col = divmod(bit, 4)
            image[row * height // 4 : (row + 1) * height // 4, col * width // 4 : (col + 1) * width // 4] = (
                255
            )
    return image


def read_code(frame: np.ndarray) -> int:
    """Index shown by a decoded frame (HxWx3, 3xHxW or HxW uint8): the mean of the inner part of each block."""
    image = np.asarray(frame, dtype=np.float32)
    if image.ndim == 3:
        channel_axis = 0 if image.shape[0] == 3 and image.shape[-1] != 3 else -1
        image = image.mean(axis=channel_axis)
    height, width = image.shape
    value = 0
    for bit in range(BITS):
        row, col = divmod(bit, 4)
        top, bottom = row * height // 4, (row + 1) * height // 4
        left, right = col * width // 4, (col + 1) * width // 4
        # Skip a quarter of the block on each side: edges blur under compression and resizing.
        dy, dx = max((bottom - top) // 4, 0), max((right - left) // 4, 0)
        if image[top + dy : bottom - dy, left + dx : right - dx].mean() > 127.5:
            value |= 1 << bit
    return value


def segment_ticks(segments: Sequence[tuple[int, float]], timescale: int = TIMESCALE) -> list[int]:
    """Timestamps (in 1/timescale s) of frames played as consecutive (count, fps) segments."""
    ticks: list[int] = []
    start = Fraction(0)
    for count, fps in segments:
        step = Fraction(timescale) / Fraction(fps).limit_denominator(1001)
        if step.denominator != 1:
            raise ValueError(f"fps {fps} does not divide the timescale {timescale}")
        ticks += [int(start + i * step) for i in range(count)]
        start += count * step
    return ticks


def _setpts_expression(segments: Sequence[tuple[int, float]], timescale: int) -> str:
    """ffmpeg ``setpts`` expression (time base 1/timescale) for piecewise constant-rate segments."""
    parts: list[tuple[int, int, int, int]] = []  # (first frame, frame count, first tick, ticks per frame)
    frame = tick = 0
    for count, fps in segments:
        step = int(Fraction(timescale) / Fraction(fps).limit_denominator(1001))
        parts.append((frame, count, tick, step))
        frame += count
        tick += count * step
    first, _, start, step = parts[-1]
    expr = f"{start}+(N-{first})*{step}"
    for first, count, start, step in reversed(parts[:-1]):
        # ffmpeg-python escapes the commas for the filter-graph parser.
        expr = f"if(lt(N,{first + count}),{start}+(N-{first})*{step},{expr})"
    return expr


def write_coded_video(
    path: str | Path,
    segments: Sequence[tuple[int, float]],
    *,
    gop: int = 250,
    width: int = 128,
    height: int = 96,
    first_index: int = 0,
    x264_params: str | None = None,
    codec: str = "libx264",
    options: Mapping[str, object] | None = None,
    timescale: int = TIMESCALE,
) -> list[int]:
    """Encode frames ``first_index, first_index+1, ...`` played as (count, fps) segments.

    Returns the presentation timestamps in 1/timescale s (what a decoder must report for containers that
    keep them; Matroska/WebM round to the millisecond). One segment gives a constant frame rate; several
    give a variable frame rate video. ``x264_params`` is passed to ``-x264-params`` (e.g.
    ``"scenecut=0:bframes=0"``); ``codec`` and ``options`` pick another encoder and its settings.
    """
    total = sum(count for count, _ in segments)
    ticks = segment_ticks(segments, timescale)
    raw = np.stack([code_image(first_index + i, width, height) for i in range(total)])
    extra = dict(options or {})
    if x264_params:
        extra["x264-params"] = x264_params
    if Path(path).suffix.lower() == ".avi":
        # AVI has no timestamps, only a frame rate: constant rate only, written at its own rate.
        if len(segments) != 1:
            raise ValueError("AVI stores a constant frame rate: give one (count, fps) segment")
        encode_frames(path, raw, fps=segments[0][1], codec=codec, gop=gop, options=extra)
        return ticks
    encode_frames(
        path,
        raw,
        fps=segments[0][1],
        codec=codec,
        gop=gop,
        setpts=_setpts_expression(segments, timescale),
        timescale=timescale,
        options=extra,
    )
    return ticks
