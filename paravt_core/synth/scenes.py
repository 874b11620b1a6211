"""Pixels for the synthetic data: coloured shapes on a plain background, encoded to H.264 with ffmpeg.

A video is a schedule of non-overlapping events; during ``[start, end)`` one large shape of one saturated
colour is drawn, otherwise the frame is the plain background. Frame ``i`` is shown at ``i / fps``
seconds and contains an event's shape iff ``start <= i / fps < end``, so the pixels answer questions
such as "which shape appears at 5 s" exactly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from paravt_core.synth.writer import encode_frames

# Saturated, mutually distant colours: they stay recognisable after yuv420p chroma subsampling and x264.
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (230, 30, 30),
    "green": (30, 200, 40),
    "blue": (30, 60, 235),
    "yellow": (240, 220, 20),
    "magenta": (220, 30, 220),
    "cyan": (20, 210, 220),
}
SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
BACKGROUND: tuple[int, int, int] = (60, 60, 60)


@dataclass(frozen=True)
class Event:
    """One shape visible during ``[start, end)`` seconds inside ``bbox`` = (x0, y0, x1, y1), pixels."""

    shape: str
    colour: str
    start: float
    end: float
    bbox: tuple[int, int, int, int]

    @property
    def label(self) -> str:
        return f"{self.colour} {self.shape}"

    @property
    def rgb(self) -> tuple[int, int, int]:
        return COLOURS[self.colour]

    def visible_at(self, t: float) -> bool:
        return self.start <= t < self.end

    def to_json(self) -> dict:
        d = asdict(self)
        d["bbox"] = list(self.bbox)
        d["rgb"] = list(self.rgb)
        return d


def shape_mask(shape: str, bbox: tuple[int, int, int, int], width: int, height: int) -> np.ndarray:
    """Boolean (height, width) mask of ``shape`` inscribed in ``bbox``."""
    x0, y0, x1, y1 = bbox
    yy, xx = np.mgrid[0:height, 0:width]
    inside = (xx >= x0) & (xx < x1) & (yy >= y0) & (yy < y1)
    if shape == "square":
        return inside
    cx, cy = (x0 + x1 - 1) / 2.0, (y0 + y1 - 1) / 2.0
    if shape == "circle":
        r = min(x1 - x0, y1 - y0) / 2.0
        return (xx - cx) ** 2 + (yy - cy) ** 2 <= r * r
    if shape == "triangle":
        # Apex at top centre, base along the bottom edge: at row y the half-width grows linearly.
        frac = (yy - y0 + 0.5) / (y1 - y0)
        return inside & (np.abs(xx - cx) <= frac * (x1 - x0) / 2.0)
    raise ValueError(f"unknown shape {shape!r}; expected one of {SHAPES}")


def render_frames(events: list[Event], seconds: float, fps: float, size: tuple[int, int]) -> np.ndarray:
    """All frames as a uint8 array (n, height, width, 3)."""
    width, height = size
    n = frame_count(seconds, fps)
    frames = np.empty((n, height, width, 3), dtype=np.uint8)
    frames[:] = BACKGROUND
    for ev in events:
        mask = shape_mask(ev.shape, ev.bbox, width, height)
        for i in range(n):
            if ev.visible_at(i / fps):
                frames[i][mask] = ev.rgb
    return frames


def frame_count(seconds: float, fps: float) -> int:
    return int(round(seconds * fps))


def render_image(
    path: Path, shape: str, colour: str, bbox: tuple[int, int, int, int], size: tuple[int, int]
) -> None:
    """A still PNG with one shape (the videor1 interleaved rows reference such images)."""
    from PIL import Image

    width, height = size
    img = np.empty((height, width, 3), dtype=np.uint8)
    img[:] = BACKGROUND
    img[shape_mask(shape, bbox, width, height)] = COLOURS[colour]
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(img).save(path, format="PNG")


def write_video(path: Path, events: list[Event], seconds: float, fps: float, size: tuple[int, int]) -> int:
    """Render and encode one video to H.264 (yuv420p) mp4; returns its frame count.

    Bit-exact flags and one encoder thread make the bytes depend only on the frames, so the same seed
    gives the same file. A keyframe every second keeps seeks cheap for the decoders downstream.
    """
    frames = render_frames(events, seconds, fps, size)
    options = {"preset": "veryfast", "crf": 16, "threads": 1, "fflags": "+bitexact", "flags:v": "+bitexact"}
    options |= {"map_metadata": -1, "movflags": "+faststart"}
    encode_frames(path, frames, fps=fps, gop=max(1, int(round(fps))), options=options)
    return len(frames)
