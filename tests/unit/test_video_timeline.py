"""Where a video's timeline starts.

Rule: the times we show the model (probe, overview labels, crop windows) are seconds from where a player's
seek bar starts, i.e. from the container's start time: the earliest first timestamp of its video and audio
streams (ffprobe's ``format=start_time``; mpv rebases its clock to the same point). For a video-only file
that is its first presented frame, so a transport stream whose 33-bit clock wraps (ffmpeg reports it from
-2.3 s), a transport stream that starts late (the muxer's 1.4 s, or an explicit offset) and an MP4 whose
edit list delays the video all show frame i at i/10 s. Where audio starts before the video, the video's
first frame comes that much after 0, as in a player. Every time is >= 0, so every shown frame can be
cropped.

Videos are made here with the ffmpeg command-line tool from an index-coded video (frame i shows code i
and is presented i/10 s after the first frame); the expected times are worked out by hand.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from paravt_core.synth import read_code, write_coded_video
from paravt_core.video import DecoderCache, InvalidWindowError, crop, crop_video_tool, overview, probe

WRAP_SECONDS = 2**33 / 90000  # an MPEG-TS clock (33 bits at 90 kHz) wraps after 95443.7 s


def ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", *args], check=True)


def ffprobe_video_times(path: Path) -> list[float]:
    """Presentation times of every video frame as ffmpeg's own decode reports them."""
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "frame=pts_time"]
        + ["-of", "csv=p=0", str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [float(line.strip(",")) for line in out.split() if line.strip(",")]


def codes(frames) -> list[int]:
    return [read_code(frames.frames[j].permute(1, 2, 0).numpy()) for j in range(len(frames))]


@pytest.fixture(scope="module")
def coded(tmp_path_factory) -> dict[str, Path]:
    """6 s at 10 fps (frame i = code i at i/10 s), keyframe every 10 frames, with and without B-frames."""
    root = tmp_path_factory.mktemp("timeline")
    out = {}
    for name, params in (("bframes", "scenecut=0"), ("nob", "scenecut=0:bframes=0")):
        out[name] = root / f"{name}.mp4"
        write_coded_video(out[name], [(60, 10)], gop=10, x264_params=params)
    return out


def make(kind: str, source: Path, out: Path) -> Path:
    if kind == "wrapped_ts":
        # Starts 95440 s + the muxer's 1.4 s (+ B-frame delay) into the 90 kHz clock: 2.3 s before the wrap.
        ffmpeg("-i", str(source), "-c", "copy", "-output_ts_offset", "95440", str(out))
    elif kind == "late_ts":
        ffmpeg("-i", str(source), "-c", "copy", str(out))  # the muxer's own start, 1.4 s (+ B-frame delay)
    elif kind == "late_ts_offset":
        ffmpeg("-i", str(source), "-c", "copy", "-output_ts_offset", "10", str(out))
    elif kind == "delayed_mp4":
        ffmpeg("-itsoffset", "2", "-i", str(source), "-c", "copy", str(out))  # an empty edit of 2 s first
    else:
        raise ValueError(kind)
    return out


CASES = [
    # (kind, suffix, where ffmpeg's decode puts frame 0: the premise of each case)
    ("wrapped_ts", ".ts", lambda t0: -2.4 < t0 < -2.2),
    ("late_ts", ".ts", lambda t0: 1.4 <= t0 < 1.7),
    ("late_ts_offset", ".ts", lambda t0: 11.4 <= t0 < 11.7),
    ("delayed_mp4", ".mp4", lambda t0: t0 == 2.0),
]


@pytest.mark.parametrize("source", ["bframes", "nob"])
@pytest.mark.parametrize(("kind", "suffix", "premise"), CASES, ids=[c[0] for c in CASES])
def test_frame_i_is_shown_at_i_tenths_of_a_second(coded, source, kind, suffix, premise, tmp_path):
    path = make(kind, coded[source], tmp_path / f"{kind}{suffix}")
    raw = ffprobe_video_times(path)
    assert premise(raw[0]), raw[0]  # the file's own clock does not start at 0
    assert raw == pytest.approx([raw[0] + i / 10 for i in range(60)], abs=1e-5)

    cache = DecoderCache()
    info = probe(path, cache=cache)
    # By hand: 60 frames from 0.0 s, each shown 0.1 s -> the timeline is [0, 6.0].
    assert (info.num_frames, info.start_time) == (60, 0.0)
    assert info.duration == pytest.approx(6.0)
    assert info.keyframe_times == pytest.approx([float(s) for s in range(6)])  # every 10 frames = 1 s
    assert cache.table(str(path)).times == pytest.approx([i / 10 for i in range(60)], abs=1e-9)

    # Overview of 4: targets j * 5.9 / 3 = 0, 1.967, 3.933, 5.9 s -> the frames shown then: 0, 19, 39, 59.
    ov = overview(path, 4, cache=cache, reuse=False)
    assert ov.indices == [0, 19, 39, 59] and codes(ov) == [0, 19, 39, 59]
    assert ov.labels() == ["<0.0 seconds>", "<1.9 seconds>", "<3.9 seconds>", "<5.9 seconds>"]

    # Every frame the overview showed can be cropped from its label's time: [t, t + 1] at 1 fps -> 2
    # frames at t and t + 1 (clamped to the end of the video, 6.0 s, for the last one).
    for t, i in zip(ov.timestamps, ov.indices, strict=True):
        result = crop_video_tool(path, {"start_time": round(t, 1), "end_time": round(t, 1) + 1}, cache=cache)
        assert result.ok, result.text
        assert codes(result.frames)[0] == i

    # The very start, and (for the wrapped clock) a window across the wrap point: frame 23 is the last
    # frame before the wrap (2.3 s after frame 0 < 2.32 s), frame 24 the first after it.
    first = crop(path, 0, 1, cache=cache)
    assert first.indices == [0, 10] and codes(first) == [0, 10]
    assert first.timestamps == pytest.approx([0.0, 1.0])
    across = crop(path, 2.2, 2.5, cache=cache)  # 0.3 s at 1 fps -> 2 frames at 2.2 and 2.5 s
    assert across.indices == [22, 25] and codes(across) == [22, 25]


def test_the_wrap_point_is_inside_the_wrapped_file(coded, tmp_path):
    """The wrapped case really wraps: its raw 90 kHz timestamps go from near 2^33 back to near 0."""
    path = make("wrapped_ts", coded["nob"], tmp_path / "wrap.ts")
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "packet=pts"]
        + ["-of", "csv=p=0", "-correct_ts_overflow", "0", str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    ticks = [int(line.strip(",")) for line in out.split() if line.strip(",")]
    # Without ffmpeg's overflow correction: 24 frames below 2^33 (0.0 .. 2.3 s), then 36 past the wrap.
    assert all(t > 2**33 - 3 * 90000 for t in ticks[:24]) and all(t < 4 * 90000 for t in ticks[24:])
    assert 95440 + 1.4 < WRAP_SECONDS < 95440 + 1.4 + 2.4


@pytest.fixture(scope="module")
def audio_first(coded, tmp_path_factory) -> Path:
    """Audio from 0 s and the video delayed by an edit list of 1.5 s: a player's seek bar starts with the
    audio, so video frame i is shown at 1.5 + i/10 s."""
    path = tmp_path_factory.mktemp("audio_first") / "av.mp4"
    ffmpeg(
        "-f", "lavfi", "-t", "8", "-i", "anullsrc=r=48000:cl=mono",
        "-itsoffset", "1.5", "-i", str(coded["nob"]),
        "-map", "0:a", "-map", "1:v", "-c:v", "copy", "-c:a", "aac", str(path),
    )  # fmt: skip
    return path


def test_audio_that_starts_first_keeps_the_video_delay(audio_first):
    assert ffprobe_video_times(audio_first)[:2] == pytest.approx([1.5, 1.6])
    cache = DecoderCache()
    info = probe(audio_first, cache=cache)
    assert (info.num_frames, info.start_time) == (60, 1.5)
    assert info.duration == pytest.approx(7.5)
    assert cache.table(str(audio_first)).times == pytest.approx([1.5 + i / 10 for i in range(60)])
    c = crop(audio_first, 1.5, 2.5, cache=cache)
    assert c.indices == [0, 10] and codes(c) == [0, 10]
    with pytest.raises(InvalidWindowError, match=r"ends before the video's first frame at 1\.5 s"):
        crop(audio_first, 0, 1, cache=cache)


def test_the_wrapped_clock_with_audio_starts_at_the_audio(coded, tmp_path):
    """Wrapped TS with an audio stream that the muxer starts a little before the video (``lead`` ticks, as
    ffprobe reports the streams' first timestamps): the seek bar starts with the audio, so video frame i is
    at lead/90000 + i/10 s, all >= 0."""
    path = tmp_path / "wrap_av.ts"
    ffmpeg(
        "-f", "lavfi", "-t", "8", "-i", "anullsrc=r=48000:cl=mono", "-i", str(coded["nob"]),
        "-map", "0:a", "-map", "1:v", "-c:v", "copy", "-c:a", "mp2", "-output_ts_offset", "95440", str(path),
    )  # fmt: skip
    starts = subprocess.run(
        [
            "ffprobe",
            "-v",
            "error",
            "-show_entries",
            "stream=codec_type,start_pts",
            "-of",
            "csv=p=0",
            str(path),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    pts = {kind: int(value) for kind, value in (line.split(",") for line in starts)}
    lead = pts["video"] - pts["audio"]
    assert pts["audio"] < 0 and 0 < lead < 9000  # both on the wrapped clock; the audio first, by < 0.1 s
    cache = DecoderCache()
    table = cache.table(str(path))
    assert table.times == pytest.approx([lead / 90000 + i / 10 for i in range(60)], abs=1e-9)
    # [0, 1] is clamped to start at the first frame: 2 frames at lead/90000 (~0.01 s) and 1.0 s; at 1.0 s
    # frame 9 (shown from lead/90000 + 0.9 s) is still on screen, frame 10 comes at lead/90000 + 1.0 s.
    c = crop(path, 0, 1, cache=cache)
    assert c.indices == [0, 9] and codes(c) == [0, 9]
    assert c.window == pytest.approx((lead / 90000, 1.0))
