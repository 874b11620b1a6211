"""Files from the wild: MP4 cut with an edit list, MPEG-TS, phone video with a rotation matrix, non-square
pixels, a timeline that starts late, and model-visible errors without host paths.

Every file is made here by the ffmpeg command-line tool from an index-coded video (frame i shows code i at
i/10 s). The truth is worked out by hand (which code a player shows at which time) and checked against
ffmpeg's own decode of the file (``ffprobe`` frame times, ``ffmpeg`` PNGs with ffmpeg's autorotation).
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from paravt_core.synth import code_image, read_code, write_coded_video
from paravt_core.video import (
    CropError,
    DecoderCache,
    InvalidWindowError,
    crop,
    crop_video_tool,
    overview,
    probe,
    run_crops,
)
from paravt_core.video import decoder as decoder_module
from paravt_core.video.decoder import build_table, to_rgb
from paravt_core.video.sampling import plan_runs


def ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", *args], check=True)


def ffprobe_times(path: Path) -> list[float]:
    """Presentation times of every frame as ffmpeg decodes the file."""
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "frame=pts_time"]
        + ["-of", "csv=p=0", str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [float(line.strip(",")) for line in out.split() if line.strip(",")]


def ffprobe_start(path: Path) -> float:
    """The container's start time (where a player's seek bar starts) as ffprobe reports it."""
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-show_entries", "format=start_time", "-of", "csv=p=0", str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(out.strip())


def ffmpeg_frames(path: Path, tmp: Path) -> list[np.ndarray]:
    """Every frame as ffmpeg shows it (autorotation on, as in a player), grey HxW."""
    tmp.mkdir(parents=True, exist_ok=True)
    ffmpeg("-i", str(path), "-fps_mode", "passthrough", str(tmp / "%04d.png"))
    return [np.asarray(Image.open(p).convert("L")) for p in sorted(tmp.glob("*.png"))]


def blocks(image: np.ndarray) -> np.ndarray:
    """4x4 grid of booleans: is the middle of each block bright (works on any orientation)."""
    grey = image.mean(axis=-1) if image.ndim == 3 else image.astype(float)
    h, w = grey.shape
    return np.array(
        [
            [
                grey[
                    r * h // 4 + h // 16 : (r + 1) * h // 4 - h // 16,
                    c * w // 4 + w // 16 : (c + 1) * w // 4 - w // 16,
                ].mean()
                > 127.5
                for c in range(4)
            ]  # fmt: skip
            for r in range(4)
        ]
    )


def hwc(frames, i: int) -> np.ndarray:
    return frames.frames[i].permute(1, 2, 0).numpy()


def plain_decode(path: Path, size: tuple[int, int], table) -> list[np.ndarray]:
    """Every frame by a plain decode from the start (no seek), through the same conversion."""
    with av.open(str(path)) as container:
        return [to_rgb(f, size, table.display) for f in container.decode(video=0)]


@pytest.fixture(scope="module")
def coded(tmp_path_factory) -> dict[str, Path]:
    """6 s at 10 fps (frame i = code i at i/10 s), keyframe every 10 frames, with and without B-frames."""
    root = tmp_path_factory.mktemp("wild")
    out = {}
    for name, params in (("bframes", "scenecut=0"), ("nob", "scenecut=0:bframes=0")):
        out[name] = root / f"{name}.mp4"
        write_coded_video(out[name], [(60, 10)], gop=10, x264_params=params)
    return out


# ---------------------------------------------------------------- 1. edit lists


@pytest.mark.parametrize("source", ["bframes", "nob"])
def test_edit_list_cut_follows_the_presented_timeline(coded, source, tmp_path):
    cut = tmp_path / "cut.mp4"
    # A stream copy from 1.3 s: the file keeps the GOP from the keyframe at 1.0 s and an edit list that
    # hides 1.0-1.3 s. A player shows code 13 at 0.0 s, code 13+k at k/10 s, up to code 59: 47 frames.
    ffmpeg("-ss", "1.3", "-i", str(coded[source]), "-c", "copy", str(cut))
    truth_times = [k / 10 for k in range(47)]
    assert ffprobe_times(cut) == pytest.approx(truth_times)  # ffmpeg's own decode agrees with the hand truth
    assert [read_code(f) for f in ffmpeg_frames(cut, tmp_path / "png")] == list(range(13, 60))

    cache = DecoderCache()
    info = probe(cut, cache=cache)
    assert (info.num_frames, info.start_time, info.duration) == (47, 0.0, pytest.approx(4.7))
    table = build_table(str(cut))
    reference = plain_decode(cut, (96, 128), table)
    # Overview of 5: targets j * 4.6 / 4 = 0, 1.15, 2.3, 3.45, 4.6 s -> frames 0, 11, 23, 34, 46.
    ov = overview(cut, 5, cache=cache, reuse=False)
    assert ov.indices == [0, 11, 23, 34, 46]
    assert ov.timestamps == pytest.approx([0.0, 1.1, 2.3, 3.4, 4.6])
    assert [read_code(hwc(ov, j)) for j in range(5)] == [13, 24, 36, 47, 59]
    for j, i in enumerate(ov.indices):
        assert np.array_equal(hwc(ov, j), reference[i])
    # Crops anywhere, including the very start: 0-1 s -> 2 frames at 0.0 and 1.0 s -> codes 13, 23.
    crops = run_crops(cut, [(0, 1), (2, 3), (4.0, 4.7)], cache=cache)
    assert [c.indices for c in crops] == [[0, 10], [20, 30], [40, 46]]
    assert [[read_code(hwc(c, j)) for j in range(len(c))] for c in crops] == [[13, 23], [33, 43], [53, 59]]


@pytest.fixture(scope="module")
def sources(coded, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sources")
    hevc, vfr = root / "hevc.mp4", root / "vfr.mp4"
    write_coded_video(hevc, [(60, 10)], gop=10, codec="libx265", options={"x265-params": "log-level=error"})
    write_coded_video(vfr, [(20, 10), (30, 30), (20, 20)], gop=10, x264_params="scenecut=0")
    return {"h264": coded["bframes"], "hevc": hevc, "vfr": vfr}


@pytest.mark.parametrize(
    ("source", "args", "suffix"),
    [
        ("hevc", ["-ss", "1.3"], ".mp4"),  # HEVC (open GOPs) cut
        ("vfr", ["-ss", "2.5"], ".mp4"),  # variable rate cut
        ("h264", ["-ss", "1.35"], ".mp4"),  # the edit starts between two frames
        ("h264", ["-ss", "1.3", "-to", "3.3"], ".mp4"),  # edit list with an end
        ("h264", ["-ss", "1.3"], ".mov"),
        ("h264", ["-itsoffset", "2"], ".mp4"),  # an empty edit: ffmpeg's frames start at 2 s
    ],
)
def test_edit_list_variants_match_ffmpeg(sources, source, args, suffix, tmp_path):
    """Every frame of the timeline, by our seek-based decoding, against ffmpeg's own decode of the file
    (ffprobe frame times from the container's start time, ffmpeg frames' codes)."""
    path = tmp_path / f"variant{suffix}"
    ffmpeg(*args[:2], "-i", str(sources[source]), *args[2:], "-c", "copy", str(path))
    start = ffprobe_start(path)
    assert start == (2.0 if args[0] == "-itsoffset" else 0.0)
    times = [t - start for t in ffprobe_times(path)]
    codes = [read_code(f) for f in ffmpeg_frames(path, tmp_path / "png")]
    cache = DecoderCache()
    table = cache.table(str(path))
    assert table.times == pytest.approx(times, abs=1e-6)
    decoded = cache.decode(table, plan_runs(list(range(table.num_frames)), table.keyframes), (96, 128))
    assert [read_code(decoded[i]) for i in range(table.num_frames)] == codes
    # Crops anywhere on the timeline come out exact too (codes are the source's frame numbers).
    windows = [
        (times[0] + a * (times[-1] - times[0]), times[0] + b * (times[-1] - times[0]))
        for a, b in ((0, 0.3), (0.2, 0.9), (0.7, 1))
    ]
    for c in run_crops(path, windows, cache=cache):
        assert [read_code(hwc(c, j)) for j in range(len(c))] == [codes[i] for i in c.indices]


# ---------------------------------------------------------------- 2. MPEG-TS


def test_mpegts_overview_and_crops(coded, tmp_path):
    ts = tmp_path / "clip.ts"
    ffmpeg("-i", str(coded["bframes"]), "-c", "copy", str(ts))
    times = ffprobe_times(ts)
    start = times[0]  # the muxer's offset (1.4 s plus B-frame delay) on the file's own clock
    assert start > 0 and times == pytest.approx([start + i / 10 for i in range(60)])
    cache = DecoderCache()
    info = probe(ts, cache=cache)
    # The timeline starts where a player's seek bar does, at the first frame (test_video_timeline.py).
    assert info.num_frames == 60 and info.start_time == 0.0
    assert info.duration == pytest.approx(6.0)
    # The first frames need the restart from the file start (the TS demuxer seeks by decode time).
    ov = overview(ts, 4, cache=cache, reuse=False)
    # Targets j * 5.9 / 3 -> frames 0, 19, 39, 59.
    assert ov.indices == [0, 19, 39, 59]
    assert [read_code(hwc(ov, j)) for j in range(4)] == [0, 19, 39, 59]
    c = crop(ts, 0, 1, cache=cache)
    assert c.indices == [0, 10] and [read_code(hwc(c, j)) for j in range(2)] == [0, 10]


# ---------------------------------------------------------------- 3. display matrix and SAR


@pytest.mark.parametrize("rotate", [90, 180, 270])
def test_rotation_matrix_frames_come_out_as_a_player_shows_them(coded, rotate, tmp_path):
    rotated = tmp_path / f"rot{rotate}.mp4"
    ffmpeg("-i", str(coded["nob"]), "-c", "copy", "-metadata:s:v", f"rotate={rotate}", str(rotated))
    shown = ffmpeg_frames(rotated, tmp_path / "png")  # ffmpeg applies the matrix (autorotate)
    turned = rotate in (90, 270)
    assert shown[0].shape == ((128, 96) if turned else (96, 128))
    cache = DecoderCache()
    info = probe(rotated, cache=cache)
    assert (info.width, info.height) == ((96, 128) if turned else (128, 96)) and info.rotated
    c = crop(rotated, 0.7, 5.0, cache=cache, max_frames=6)
    # 4.3 s at 1 fps -> 4 frames at 0.7, 2.133, 3.567, 5.0 s -> frames 7, 21, 35, 50.
    assert c.indices == [7, 21, 35, 50]
    assert tuple(c.frames.shape) == ((4, 3, 128, 96) if turned else (4, 3, 96, 128))
    reference = plain_decode(rotated, tuple(c.frames.shape[2:]), build_table(str(rotated)))
    for j, i in enumerate(c.indices):
        assert np.array_equal(hwc(c, j), reference[i])  # seeking changes no pixel
        # The same picture as ffmpeg's autorotated frame, block by block...
        assert np.array_equal(blocks(hwc(c, j)), blocks(shown[i])), (rotate, i)
        # ...and, worked out by hand, the code image turned as a player turns it: ``rotate=90`` shows the
        # picture turned a quarter counter-clockwise (np.rot90 k=1), 270 clockwise, 180 upside down.
        expected = np.rot90(code_image(i, 128, 96), {90: 1, 180: 2, 270: 3}[rotate])
        assert np.array_equal(blocks(hwc(c, j)), blocks(expected)), (rotate, i)


def test_non_square_pixels_are_applied_before_the_pixel_budget(coded, tmp_path):
    wide = tmp_path / "sar2.mp4"
    ffmpeg(
        "-i",
        str(coded["nob"]),
        "-vf",
        "setsar=2/1",
        "-c:v",
        "libx264",
        "-x264-params",
        "bframes=0",
        str(wide),
    )
    shown = ffmpeg_frames(wide, tmp_path / "png")
    ffmpeg("-i", str(wide), "-vf", "scale=iw*sar:ih", "-frames:v", "1", str(tmp_path / "player.png"))
    assert Image.open(tmp_path / "player.png").size == (256, 96)  # what a player shows: 128 px at 2:1
    cache = DecoderCache()
    info = probe(wide, cache=cache)
    assert (info.width, info.height) == (256, 96) and not info.rotated
    # Default budget: 256x96 is already on the 32-px grid and under 50176 px -> unchanged.
    c = crop(wide, 1.0, 3.0, cache=cache)
    assert tuple(c.frames.shape) == (2, 3, 96, 256)
    assert [read_code(hwc(c, j)) for j in range(2)] == [10, 30]
    # Pixel values, by hand: each coded column shown twice (2:1), i.e. the code image with every column
    # repeated; x264 blurs only the block edges (a mean grey error under a level out of 255).
    for j, i in enumerate((10, 30)):
        stretched = np.repeat(code_image(i, 128, 96), 2, axis=1).astype(float)
        assert np.abs(hwc(c, j).mean(axis=2) - stretched).mean() < 3, i  # measured 0.55 and 0.72
    # Budget 6144 px on the shown 256x96: scale sqrt(24576 / 6144) = 2 -> 96/2 = 48 -> 32, 256/2 = 128 ->
    # 128, i.e. 32x128 (4096 px). Budgeting the coded 128x96 first would give 64x64 and then, stretched
    # 2:1, 64x128 = 8192 px: over the budget and another size.
    small = crop(wide, 1.0, 3.0, cache=cache, max_pixels=6144)
    assert tuple(small.frames.shape) == (2, 3, 32, 128)
    reference = plain_decode(wide, (32, 128), build_table(str(wide)))
    assert all(np.array_equal(hwc(small, j), reference[i]) for j, i in enumerate(small.indices))
    assert [read_code(hwc(small, j)) for j in range(2)] == [10, 30]
    assert [read_code(shown[i]) for i in (10, 30)] == [10, 30]


# ---------------------------------------------------------------- 6. window before the first frame


@pytest.fixture(scope="module")
def late(coded, tmp_path_factory) -> Path:
    """Audio from 0 s and the coded video from 10 s (Matroska keeps the offset): the timeline starts with
    the audio, so the video's first frame is 10 s into it (a video-only file's timeline starts at its first
    frame, see test_video_timeline.py)."""
    path = tmp_path_factory.mktemp("late") / "late.mkv"
    ffmpeg(
        "-f", "lavfi", "-t", "16", "-i", "anullsrc=r=48000:cl=mono", "-itsoffset", "10", "-i", str(coded["nob"]),
        "-map", "0:a", "-map", "1:v", "-c:v", "copy", "-c:a", "pcm_s16le", "-copyts", str(path),
    )  # fmt: skip
    assert ffprobe_times(path)[:2] == pytest.approx([10.0, 10.1]) and ffprobe_start(path) == 0.0
    return path


def test_window_before_the_first_frame_is_an_error_not_copies(late):
    cache = DecoderCache()
    with pytest.raises(InvalidWindowError, match=r"ends before the video's first frame at 10\.0 s"):
        crop(late, 0, 4, cache=cache)
    result = crop_video_tool(late, {"start_time": 0, "end_time": 4}, cache=cache)
    assert not result.ok and "first frame at 10.0 s" in result.text and "10.0 to 16.0 seconds" in result.text


def test_window_starting_before_the_first_frame_is_clamped_and_said(late):
    cache = DecoderCache()
    result = crop_video_tool(late, {"start_time": 5, "end_time": 12}, cache=cache)
    assert result.ok
    # Clamped to [10, 12]: 2 s at 1 fps -> 2 frames at 10.0 and 12.0 s -> frames 0 and 20.
    assert result.frames.window == (10.0, 12.0) and result.frames.indices == [0, 20]
    assert [read_code(hwc(result.frames, j)) for j in range(2)] == [0, 20]
    assert result.text == (
        "Cropped 10.0s to 12.0s: 2 frames. start_time 5 is before the video's first frame, clamped to 10.0s."
    )


# ---------------------------------------------------------------- 5. no host paths for the model


def test_tool_errors_name_the_video_by_file_name_only(coded, tmp_path, caplog):
    bad = tmp_path / "deep" / "dir"
    bad.mkdir(parents=True)
    empty = bad / "empty.mp4"
    empty.write_bytes(b"")
    text_file = bad / "notes.mp4"
    text_file.write_text("not a video\n" * 20)
    truncated = bad / "cut.mp4"
    truncated.write_bytes(coded["nob"].read_bytes()[:3000])
    cases = [bad / "missing.mp4", empty, text_file, truncated]
    cache = DecoderCache()
    with caplog.at_level(logging.INFO, logger="paravt_core.video"):
        for path in cases:
            result = crop_video_tool(path, {"start_time": 1, "end_time": 3}, cache=cache)
            (err,) = run_crops(path, [(1, 3)], cache=cache)  # what the episode shows the model
            for text in (result.text, str(err)):
                assert path.name in text and "/" not in text, text
            assert not result.ok and isinstance(err, CropError)
    # The full path stays available to whoever reads the logs.
    for path in cases:
        assert str(path) in caplog.text


# ---------------------------------------------------------------- seeks that land on a non-keyframe


def test_a_seek_landing_on_a_non_keyframe_never_returns_damaged_frames(tmp_path, monkeypatch):
    """Fault injection: every seek lands half a second past the keyframe asked for, on a P-frame (what a
    broken index does). MPEG-4 Part 2 then decodes P-frames against a missing reference and outputs
    damaged pictures with valid timestamps; decoding must start at a keyframe (here: the restart from the
    file start) so the frames are still exact."""
    path = tmp_path / "mpeg4.mkv"
    write_coded_video(path, [(60, 10)], gop=30, codec="mpeg4", options={"bf": 0, "q:v": 3})

    def seek_any_frame(self, pts):
        if pts is None:
            return real_seek(self, pts)
        # Matroska time base is 1 ms: 500 ticks = 5 frames at 10 fps, inside the 30-frame GOP.
        self.container.seek(int(pts) + 500, stream=self.stream, backward=True, any_frame=True)
        self.stream.codec_context.flush_buffers()

    real_seek = decoder_module.Handle._seek
    monkeypatch.setattr(decoder_module.Handle, "_seek", seek_any_frame)
    cache = DecoderCache()
    # 1.5-2.5 s at 4 fps -> 4 frames at 1.5, 1.833, 2.167, 2.5 s -> frames 15, 18, 21, 25 (mid-GOP 0..29).
    c = crop(path, 1.5, 2.5, cache=cache, fps=4)
    assert c.indices == [15, 18, 21, 25]
    assert [read_code(hwc(c, j)) for j in range(4)] == [15, 18, 21, 25]
