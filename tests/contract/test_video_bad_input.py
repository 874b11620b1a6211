"""Bad files and bad requests: each gives a clear VideoError, and the crop tool turns it into text."""

from __future__ import annotations

import logging
import math
import subprocess
from pathlib import Path

import pytest

from paravt_core import storage
from paravt_core.synth import read_code, write_coded_video
from paravt_core.video import (
    CropError,
    DecoderCache,
    InvalidTimeError,
    InvalidWindowError,
    VideoDecodeError,
    VideoNotFoundError,
    crop,
    crop_video_tool,
    overview,
    probe,
    run_crops,
)


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """10 s, 10 fps, keyframe every 10 frames: frame i at i/10 s shows code i."""
    path = tmp_path_factory.mktemp("good") / "good.mp4"
    write_coded_video(path, [(100, 10)], gop=10, x264_params="scenecut=0")
    return str(path)


@pytest.fixture()
def cache():
    return DecoderCache()


def tool_error(video, arguments, cache) -> str:
    result = crop_video_tool(video, arguments, cache=cache)
    assert result.ok is False and result.frames is None
    assert result.text.startswith("Error: ")
    return result.text


def test_missing_file(tmp_path, cache):
    path = str(tmp_path / "nope.mp4")
    with pytest.raises(VideoNotFoundError, match="nope.mp4"):
        probe(path, cache=cache)
    assert "not found" in tool_error(path, {"start_time": 0, "end_time": 5}, cache)


def test_directory_is_not_a_video(tmp_path, cache):
    with pytest.raises(VideoNotFoundError, match="not a regular file"):
        probe(str(tmp_path), cache=cache)


def test_zero_byte_file(tmp_path, cache):
    path = tmp_path / "empty.mp4"
    path.write_bytes(b"")
    with pytest.raises(VideoDecodeError, match="empty.mp4"):
        probe(str(path), cache=cache)
    assert "empty.mp4" in tool_error(str(path), {"start_time": 0, "end_time": 5}, cache)


def test_text_file_named_mp4(tmp_path, cache):
    path = tmp_path / "notes.mp4"
    path.write_text("this is not a video\n" * 50)
    with pytest.raises(VideoDecodeError, match="notes.mp4"):
        overview(str(path), 4, cache=cache)


def test_truncated_mp4_without_index(good, tmp_path, cache):
    # ffmpeg writes the MP4 index (moov) at the end: cutting the file in half loses it.
    data = Path(good).read_bytes()
    path = tmp_path / "cut.mp4"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(VideoDecodeError, match="cut.mp4"):
        probe(str(path), cache=cache)
    assert "cut.mp4" in tool_error(str(path), {"start_time": 1, "end_time": 3}, cache)


def test_truncated_faststart_mp4_serves_what_is_there_or_fails_cleanly(tmp_path, cache):
    # With the index at the front, the index promises frames whose bytes are missing.
    full = tmp_path / "fast.mp4"
    write_coded_video(full, [(100, 10)], gop=10, x264_params="scenecut=0")
    moved = tmp_path / "faststart.mp4"
    subprocess.run(
        [
            "ffmpeg",
            "-loglevel",
            "error",
            "-y",
            "-i",
            str(full),
            "-c",
            "copy",
            "-movflags",
            "+faststart",
            str(moved),
        ],
        check=True,
    )
    data = moved.read_bytes()
    path = tmp_path / "fast_cut.mp4"
    path.write_bytes(data[: int(len(data) * 0.6)])
    # The beginning decodes exactly; windows in the lost part are errors, never crashes or wrong frames.
    head = crop(str(path), 0, 2, cache=cache)
    assert [read_code(f.numpy()) for f in head.frames] == head.indices
    results = run_crops(str(path), [(0, 1), (9, 10)], cache=cache)
    assert not isinstance(results[0], CropError)
    assert [read_code(f.numpy()) for f in results[0].frames] == results[0].indices
    assert isinstance(results[1], CropError)
    # The index promised 10 s; once frames failed to come out, the table was rebuilt from the packets that
    # can be read, so the video is now known to be shorter and the window is reported outside it.
    assert probe(str(path), cache=cache).duration < 9
    assert "end of the video" in str(results[1])
    assert "end of the video" in tool_error(str(path), {"start_time": 9, "end_time": 10}, cache)


def test_audio_only_file(tmp_path, cache):
    path = tmp_path / "tone.mp4"
    subprocess.run(
        [
            "ffmpeg",
            "-loglevel",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
            "sine=frequency=440:duration=2",
            str(path),
        ],
        check=True,
    )
    with pytest.raises(VideoDecodeError, match="no video stream.*audio"):
        probe(str(path), cache=cache)
    assert "no video stream" in tool_error(str(path), {"start_time": 0, "end_time": 1}, cache)


def test_one_frame_video(tmp_path, cache):
    path = tmp_path / "one.mp4"
    write_coded_video(path, [(1, 10)], gop=1, first_index=77)
    info = probe(str(path), cache=cache)
    assert info.num_frames == 1
    assert info.duration == pytest.approx(0.1)  # one frame at 10 fps
    ov = overview(str(path), 8, cache=cache, reuse=False)
    assert ov.indices == [0] and read_code(ov.frames[0].numpy()) == 77
    result = crop_video_tool(str(path), {"start_time": 0, "end_time": 10}, cache=cache)
    assert result.ok
    # At least 2 frames (Qwen3-VL pairs frames): the only frame, twice.
    assert result.frames.indices == [0, 0] and result.frames.timestamps == [0.0, 0.0]
    assert "clamped" in result.text


@pytest.mark.parametrize(
    ("start", "end", "error", "needle"),
    [
        (5, 5, InvalidWindowError, "smaller than end_time"),
        (6, 2, InvalidWindowError, "smaller than end_time"),
        (10, 12, InvalidWindowError, "at or after the end of the video"),  # duration is exactly 10 s
        (500, 900, InvalidWindowError, "duration 10.0 seconds"),
        (-1, 5, InvalidTimeError, "negative"),
        (math.nan, 5, InvalidTimeError, "finite"),
        (0, math.inf, InvalidTimeError, "finite"),
        ("soon", 5, InvalidTimeError, "MM:SS"),
        (0, [5], InvalidTimeError, "number"),
        (None, 5, InvalidTimeError, "missing"),
        (0, 1e300, InvalidTimeError, "too large"),
    ],
)
def test_invalid_windows(good, cache, start, end, error, needle):
    with pytest.raises(error, match=needle):
        crop(good, start, end, cache=cache)


@pytest.mark.parametrize(
    ("arguments", "needle"),
    [
        ({"start_time": 3}, "missing end_time"),
        ({}, "missing start_time and end_time"),
        ({"start_time": "1:2:3:4", "end_time": 5}, "MM:SS"),
        ({"start_time": "-0:05", "end_time": 5}, "MM:SS"),
        ({"start_time": 8, "end_time": 2}, "smaller than end_time"),
        ({"start_time": 60, "end_time": 70}, "end of the video"),
        ({"start_time": True, "end_time": 5}, "number"),
        ("start_time=1, end_time=2", "JSON object"),
        (None, "JSON object"),
    ],
)
def test_tool_returns_errors_as_text(good, cache, arguments, needle):
    assert needle in tool_error(good, arguments, cache)


def test_tool_accepts_aliases_and_clock_times(good, cache):
    result = crop_video_tool(good, {"start": "0:02", "end": "00:00:06"}, cache=cache)
    assert result.ok
    # 4 s at 1 fps -> 4 frames at 2, 3.333, 4.667, 6 s -> frames 20, 33, 46, 60.
    assert result.frames.indices == [20, 33, 46, 60]
    assert [read_code(f.numpy()) for f in result.frames.frames] == [20, 33, 46, 60]
    assert result.text == "Cropped 2.0s to 6.0s: 4 frames."


def test_tool_never_opens_the_models_video_path(good, tmp_path, cache):
    other = tmp_path / "other.mp4"
    write_coded_video(other, [(100, 10)], gop=10, first_index=1000)
    result = crop_video_tool(good, {"video_path": str(other), "start_time": 1, "end_time": 3}, cache=cache)
    assert result.ok
    assert [read_code(f.numpy()) for f in result.frames.frames] == [10, 30]  # codes of good.mp4, not 1010+
    assert cache.open_paths() == [good]
    # Not even a path that does not exist changes anything.
    assert crop_video_tool(
        good, {"video_path": "/etc/shadow", "start_time": 1, "end_time": 3}, cache=cache
    ).ok


def test_run_crops_keeps_good_windows_next_to_bad_ones(good, cache):
    results = run_crops(good, [(1, 3), (7, 3), (2, "x"), (9, 40)], cache=cache)
    assert [type(r).__name__ for r in results] == ["Frames", "CropError", "CropError", "Frames"]
    assert results[0].indices == [10, 30]
    assert "smaller than end_time" in str(results[1]) and results[1].start == 7
    assert isinstance(results[2].cause, InvalidTimeError)
    # 9..40 is clamped to 9..10: 1 s -> 2 frames at 9.0 and the last frame 9.9.
    assert results[3].indices == [90, 99] and results[3].window == (9.0, 10.0)


def test_missing_s3_object_is_not_found(s3_bucket, tmp_path, monkeypatch, cache):
    monkeypatch.setenv("PARAVT_CACHE_DIR", str(tmp_path / "cache"))
    uri = f"{s3_bucket}/videos/missing.mp4"
    with pytest.raises(VideoNotFoundError, match="missing.mp4"):
        probe(uri, cache=cache)
    assert "missing.mp4" in tool_error(uri, {"start_time": 0, "end_time": 1}, cache)


def test_s3_video_is_downloaded_once_and_served(good, s3_bucket, tmp_path, monkeypatch, cache):
    monkeypatch.setenv("PARAVT_CACHE_DIR", str(tmp_path / "cache"))
    uri = storage.join(s3_bucket, "videos", "good.mp4")
    storage.upload_file(good, uri)
    info = probe(uri, cache=cache)
    assert info.num_frames == 100 and info.path.startswith(str(tmp_path / "cache"))
    c = crop(uri, 2, 4, cache=cache)
    assert c.indices == [20, 40] and [read_code(f.numpy()) for f in c.frames] == [20, 40]
    assert crop_video_tool(uri, {"start_time": 2, "end_time": 4}, cache=cache).ok
    assert cache.open_paths() == [info.path]  # one local copy, one entry


@pytest.mark.parametrize(
    "arguments",
    [
        {"start_time": 10**309, "end_time": 5},
        {"start_time": 0, "end_time": 10**4400},
        {"start_time": "1" * 310, "end_time": 5},
        {"start_time": 0, "end_time": "9" * 5000},
        {"start_time": "1" * 5000 + ":00", "end_time": 5},
    ],
    ids=["int-309-digits", "int-4400-digits", "str-310", "str-5000", "clock-5000"],
)
def test_overflowing_times_become_tool_errors(good, cache, arguments, caplog):
    """Each of these escaped as OverflowError / ValueError before; now the tool and the episode's batch
    path (``run_crops`` with the raw arguments) answer with an error text, and a good window beside it
    is still served. With INFO logging on, the failed crop's log record must format too (a raw
    4400-digit time used to raise ValueError inside logging)."""
    caplog.set_level(logging.INFO, logger="paravt_core.video")
    assert "start_time" in tool_error(good, arguments, cache) or "end_time" in tool_error(
        good, arguments, cache
    )
    bad, ok = run_crops(good, [(arguments["start_time"], arguments["end_time"]), (1, 3)], cache=cache)
    assert isinstance(bad, CropError) and ("too large" in str(bad) or "too long" in str(bad))
    assert [read_code(f.numpy()) for f in ok.frames] == [10, 30]  # 1 s and 3 s at 10 fps


def test_unprintable_arguments_object_is_a_tool_error(good, cache):
    text = tool_error(good, [10**5000], cache)  # not an object, and repr() of it would raise ValueError
    assert "arguments must be a JSON object" in text and len(text) < 200
