"""Property: for random real encodes and random windows, the frames we return are the frames a full decode
shows at the requested times.

Encodes are drawn over what this machine's ffmpeg writes: H.264 and HEVC in MP4, Matroska and MPEG-TS,
VP9 in WebM, MPEG-4 Part 2 in AVI; with and without B-frames (VP9: alternate reference frames), constant or
variable frame rate (AVI only stores a constant rate), various GOPs. Frames are 64x48 and a few seconds
long, so one encode takes ~0.1 s.

The oracle is independent of the decoder under test: a plain PyAV decode of the whole file from the start
(every frame in display order with its time), and the sampling rule written out here (frame shown at time
t = the last frame whose time is <= t; a crop of [s, e] at ``fps`` takes an even number of frames,
round((e - s) * fps / 2) * 2 clamped to [2, 16], uniform from s to min(e, last frame)). In CI
(``CI`` set) the examples are derandomized, so every run checks the same cases.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import av
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paravt_core.synth import read_code, write_coded_video
from paravt_core.video import CropError, DecoderCache, overview, run_crops
from paravt_core.video.decoder import to_rgb

# (codec, container)
COMBOS = [
    ("libx264", "mp4"),
    ("libx264", "mkv"),
    ("libx264", "ts"),
    ("libx265", "mp4"),
    ("libx265", "mkv"),
    ("libx265", "ts"),
    ("libvpx-vp9", "webm"),
    ("mpeg4", "avi"),
]
RATES = [10, 12, 24, 25, 30]  # all divide the 1/600 s timescale of the coded videos
SIZE = (64, 64)  # 64x48 on the 32-px grid: round(48 / 32) * 32 = 64, 64 -> 64


def encoder_options(codec: str, reorder: bool) -> dict[str, object]:
    if codec == "libx264":
        return {"x264-params": f"scenecut=0:bframes={3 if reorder else 0}", "preset": "veryfast"}
    if codec == "libx265":
        return {
            "x265-params": f"log-level=error:scenecut=0:bframes={3 if reorder else 0}",
            "preset": "ultrafast",
        }
    if codec == "libvpx-vp9":
        lag = 16 if reorder else 0
        return {
            "deadline": "good",
            "cpu-used": 8,
            "crf": 30,
            "b:v": 0,
            "auto-alt-ref": int(reorder),
            "lag-in-frames": lag,
        }
    return {"bf": 2 if reorder else 0, "q:v": 3}  # mpeg4


@st.composite
def encodes(draw) -> tuple:
    codec, container = draw(st.sampled_from(COMBOS))
    reorder = draw(st.booleans())
    if container != "avi" and draw(st.booleans()):  # variable frame rate: 2-3 constant-rate parts
        segments = tuple(
            (draw(st.integers(3, 15)), draw(st.sampled_from(RATES))) for _ in range(draw(st.integers(2, 3)))
        )
    else:
        segments = ((draw(st.integers(8, 50)), draw(st.sampled_from(RATES))),)
    gop = draw(st.integers(4, 40))
    return codec, container, reorder, segments, gop


@pytest.fixture(scope="module")
def encoded(tmp_path_factory):
    """Encodes by parameters, made once each, with the full decode of each (the oracle)."""
    root = tmp_path_factory.mktemp("property")
    known: dict[tuple, tuple[str, list[float], list[np.ndarray]]] = {}

    def get(params: tuple) -> tuple[str, list[float], list[np.ndarray]]:
        if params not in known:
            codec, container, reorder, segments, gop = params
            path = root / f"v{len(known)}.{container}"
            write_coded_video(
                path,
                list(segments),
                gop=gop,
                width=64,
                height=48,
                codec=codec,
                options=encoder_options(codec, reorder),
            )
            known[params] = (str(path), *full_decode(path))
        return known[params]

    return get


def full_decode(path: Path) -> tuple[list[float], list[np.ndarray]]:
    """Every frame from the start, in display order: its time in seconds and its pixels at SIZE. Times
    count from where a player's seek bar starts: these files hold video only, so from the first frame
    (an MPEG-TS muxer starts its clock at 1.4 s)."""
    pts, frames, time_base = [], [], None
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            pts.append(frame.pts)
            time_base = frame.time_base
            frames.append(to_rgb(frame, SIZE))
    return [float((p - pts[0]) * time_base) for p in pts], frames


def shown_at(times: list[float], t: float) -> int:
    return max(i for i, ti in enumerate(times) if ti <= t + 1e-6)


def expected_crop(times: list[float], s: float, e: float, fps: float) -> list[int]:
    count = min(16, max(2, 2 * math.floor((e - s) * fps / 2 + 0.5)))
    last = max(s, min(e, times[-1]))
    return [shown_at(times, s + j * (last - s) / (count - 1)) for j in range(count)]


CI_PROFILE = {"derandomize": bool(os.environ.get("CI"))}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], **CI_PROFILE)
@given(
    params=encodes(),
    windows=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=4),
    fps=st.sampled_from([0.5, 1.0, 2.0, 4.0]),
    k=st.integers(1, 12),
)
def test_returned_frames_are_the_full_decodes_frames_at_the_requested_times(encoded, params, windows, fps, k):
    path, times, reference = encoded(params)
    count = sum(n for n, _ in params[3])
    assert len(times) == count and [read_code(f) for f in reference] == list(range(count))  # sound encode
    cache = DecoderCache()
    first, last = times[0], times[-1]

    ov = overview(path, k, cache=cache, reuse=False)
    targets = [first] if k == 1 else [first + j * (last - first) / (k - 1) for j in range(k)]
    assert ov.indices == sorted({shown_at(times, t) for t in targets})
    assert ov.timestamps == pytest.approx([times[i] for i in ov.indices], abs=1e-9)
    for j, i in enumerate(ov.indices):
        assert np.array_equal(ov.frames[j].permute(1, 2, 0).numpy(), reference[i]), (params, "overview", i)

    # Windows inside the timeline (first frame .. last frame), at least 10 ms long.
    spans = [
        (first + a * (last - first), first + b * (last - first)) for a, b in (sorted(w) for w in windows)
    ]
    spans = [(s, max(e, s + 0.01)) for s, e in spans]
    results = run_crops(path, spans, cache=cache, fps=fps, max_workers=2)
    for (s, e), result in zip(spans, results, strict=True):
        assert not isinstance(result, CropError), (params, s, e, str(result))
        assert result.window == (s, e)  # inside the timeline: nothing clamped
        assert result.indices == expected_crop(times, s, e, fps), (params, s, e)
        assert result.timestamps == pytest.approx([times[i] for i in result.indices], abs=1e-9)
        for j, i in enumerate(result.indices):
            assert np.array_equal(result.frames[j].permute(1, 2, 0).numpy(), reference[i]), (params, s, e, i)
