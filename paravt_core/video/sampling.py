"""Which frames to decode and in what order (pure functions over a frame table).

A *frame table* is the list of presentation timestamps of a stream in display order plus the display
indices of its keyframes. Everything here is plain arithmetic on those lists so it can be tested by hand.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

# Targets computed in floating point may land a hair before the frame they mean (2.9999999 for 3.0).
TIME_EPS = 1e-6


def uniform_times(start: float, end: float, count: int) -> list[float]:
    """``count`` evenly spaced times from ``start`` to ``end`` inclusive (one point: ``start``)."""
    if count <= 0:
        raise ValueError(f"count must be positive, got {count}")
    if count == 1:
        return [start]
    step = (end - start) / (count - 1)
    return [start + i * step for i in range(count)]


def frame_at(times: Sequence[float], t: float) -> int:
    """Display index of the frame shown at time ``t``: the last frame whose timestamp is <= t
    (the first frame for times before the video starts)."""
    return max(0, bisect.bisect_right(times, t + TIME_EPS) - 1)


def frames_at(times: Sequence[float], targets: Sequence[float]) -> list[int]:
    return [frame_at(times, t) for t in targets]


def nearest_keyframe(times: Sequence[float], keyframes: Sequence[int], t: float) -> int:
    """Display index of the keyframe whose timestamp is closest to ``t`` (earlier one on ties)."""
    key_times = [times[k] for k in keyframes]
    pos = bisect.bisect_left(key_times, t)
    if pos == 0:
        return keyframes[0]
    if pos == len(keyframes):
        return keyframes[-1]
    before, after = keyframes[pos - 1], keyframes[pos]
    return after if times[after] - t < t - times[before] else before


def crop_frame_count(
    start: float,
    end: float,
    *,
    fps: float,
    min_frames: int,
    max_frames: int,
    rounding: str = "nearest",
    video_fps: float | None = None,
) -> int:
    """Frames for a crop of [start, end] at ``fps``, clamped to [min_frames, max_frames] and even (Qwen3-VL
    groups frames in pairs).

    ``rounding="nearest"`` (ours): the nearest even count, halves up. ``rounding="floor"``: qwen-vl-utils
    0.0.14's ``smart_nframes`` with ``fps`` (the released eval driver's crops): the window's frame count
    (``floor(end * video_fps) - ceil(start * video_fps) + 1`` source frames when ``video_fps`` is known, as its
    ``calculate_video_frame_range`` counts them; else ``end - start`` seconds) x ``fps`` / ``video_fps``,
    clamped to [min_frames rounded up to even, max_frames rounded down to even], then rounded DOWN to even."""
    if min_frames < 1 or max_frames < min_frames:
        raise ValueError(f"need 1 <= min_frames <= max_frames, got {min_frames}, {max_frames}")
    if fps <= 0 or not math.isfinite(fps):
        raise ValueError(f"fps must be positive, got {fps}")
    lo = min_frames + (min_frames % 2)  # smallest even >= min_frames
    hi = max_frames - (max_frames % 2)  # largest even <= max_frames
    if hi < lo:  # e.g. min=max=3: no even count in range, honour the range
        return max_frames
    if rounding == "floor":
        seconds = end - start
        if video_fps and video_fps > 0:
            seconds = (math.floor(end * video_fps) - math.ceil(start * video_fps) + 1) / video_fps
        wanted = min(max(seconds * fps, lo), hi)
        return max(lo, 2 * math.floor(wanted / 2))
    if rounding != "nearest":
        raise ValueError(f"rounding must be 'nearest' or 'floor', got {rounding!r}")
    wanted = 2 * math.floor((end - start) * fps / 2 + 0.5)  # nearest even, halves up
    return min(hi, max(lo, wanted))


def preceding_keyframe(keyframes: Sequence[int], index: int) -> int:
    """Display index of the last keyframe at or before ``index``; 0 (the start of the stream, where decoding
    can always begin) if no keyframe is."""
    pos = bisect.bisect_right(keyframes, index) - 1
    return keyframes[pos] if pos >= 0 else 0


@dataclass(frozen=True)
class Run:
    """One seek: jump to ``keyframe`` and decode forward through all of ``targets`` (display indices)."""

    keyframe: int
    targets: tuple[int, ...]

    @property
    def span(self) -> int:
        """Frames between the keyframe and the last target, both included (an upper bound of the work)."""
        return self.targets[-1] - self.keyframe + 1


def plan_runs(targets: Sequence[int], keyframes: Sequence[int]) -> list[Run]:
    """Group sorted unique targets into runs. A new seek pays off exactly when a keyframe lies after the
    previous target and at or before the next one; otherwise decoding simply continues."""
    runs: list[Run] = []
    current: list[int] = []
    key = -1
    for t in sorted(set(targets)):
        k = preceding_keyframe(keyframes, t)
        if current and k <= current[-1]:
            current.append(t)
            continue
        if current:
            runs.append(Run(key, tuple(current)))
        key, current = k, [t]
    if current:
        runs.append(Run(key, tuple(current)))
    return runs


def seek_floor_frames(targets: Sequence[int], keyframes: Sequence[int]) -> int:
    """The benchmark's floor: for each requested frame, every frame from its preceding keyframe up to it."""
    return sum(t - preceding_keyframe(keyframes, t) + 1 for t in targets)
