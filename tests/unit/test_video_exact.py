"""Exactness on real ffmpeg-encoded videos whose frames show their own index.

For each video the truth is known by construction: frame i shows code i and is presented at tick[i]/600 s
(``segment_ticks`` is a plain sum; the expected values for the simple cases are also written out by hand).
Returned frames must show exactly the requested index, with exactly its timestamp, and be bit-identical to
the same frame obtained by a plain sequential decode (so seeking and skipping never change pixels).
"""

from __future__ import annotations

import os
import random
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import av
import numpy as np
import pytest

from paravt_core.synth import read_code, write_coded_video
from paravt_core.video import DecoderCache, crop, overview, probe, run_crops
from paravt_core.video import decoder as decoder_module
from paravt_core.video.decoder import build_table, to_rgb
from paravt_core.video.sampling import plan_runs

# name -> (file suffix, segments (count, fps), gop, x264 params)
VIDEOS = {
    # 30 fps, keyframe exactly every 30 frames, B-frames (x264 default 3, b-pyramid).
    "cfr30_gop30": (".mp4", [(600, 30)], 30, "scenecut=0"),
    # 25 fps, x264 defaults (GOP 250, scene cuts allowed: every frame's code changes, so many keyframes).
    "cfr25_default": (".mp4", [(1500, 25)], 250, None),
    # 24 fps without B-frames, short GOP.
    "cfr24_nob": (".mp4", [(240, 24)], 12, "scenecut=0:bframes=0"),
    # Variable frame rate: 30 fps, then 10 fps, then 24 fps, then 60 fps.
    "vfr": (".mp4", [(90, 30), (40, 10), (72, 24), (120, 60)], 50, "scenecut=0"),
    # Matroska: millisecond time base, so timestamps are i/30 rounded to the ms (the true pts, not i/fps).
    "mkv30": (".mkv", [(300, 30)], 60, "scenecut=0"),
    # MPEG-TS with B-frames: 90 kHz clock, the muxer starts its clock late (~1.4 s; our timeline still starts
    # at the first frame, as a player's seek bar does), and its demuxer seeks by decode time, so seeks into
    # the first GOP land past the first frames.
    "ts30": (".ts", [(300, 30)], 30, "scenecut=0"),
}


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    root = tmp_path_factory.mktemp("coded")
    out = {}
    for name, (suffix, segments, gop, params) in VIDEOS.items():
        path = root / f"{name}{suffix}"
        ticks = write_coded_video(path, segments, gop=gop, x264_params=params)
        if suffix == ".mkv":
            truth = [round(t / 600 * 1000) / 1000 for t in ticks]
        else:
            truth = [t / 600 for t in ticks]
        out[name] = (str(path), truth)
    return out


@pytest.fixture()
def cache():
    return DecoderCache()


def sequential_frames(path: str, size: tuple[int, int]) -> list[np.ndarray]:
    """Every frame in display order by a plain decode from the start (no seek, no skipping)."""
    with av.open(path) as container:
        return [to_rgb(frame, size) for frame in container.decode(video=0)]


def assert_exact(frames, truth, path, reference=None):
    codes = [read_code(f.numpy()) for f in frames.frames]
    assert codes == frames.indices, f"{path}: frames show {codes}, claimed {frames.indices}"
    assert frames.timestamps == [truth[i] for i in frames.indices]
    assert frames.frames.dtype.is_floating_point is False and frames.frames.shape[1] == 3
    if reference is not None:
        for tensor, i in zip(frames.frames, frames.indices, strict=True):
            assert np.array_equal(tensor.permute(1, 2, 0).numpy(), reference[i]), (
                f"{path}: pixels of frame {i}"
            )


def test_probe_cfr_by_hand(videos, cache):
    path, _ = videos["cfr30_gop30"]
    info = probe(path, cache=cache)
    assert info.num_frames == 600
    assert info.duration == pytest.approx(20.0)
    assert info.fps == pytest.approx(30.0)
    assert info.start_time == 0.0
    assert (info.width, info.height) == (128, 96)
    assert info.keyframe_times == pytest.approx([float(s) for s in range(20)])  # every 30 frames = 1 s


def test_probe_vfr_by_hand(videos, cache):
    path, truth = videos["vfr"]
    info = probe(path, cache=cache)
    # 90/30 + 40/10 + 72/24 + 120/60 = 3 + 4 + 3 + 2 = 12 s, 322 frames
    assert info.num_frames == 322
    assert info.duration == pytest.approx(12.0)
    assert info.fps == pytest.approx(322 / 12)
    assert truth[88:91] == pytest.approx([88 / 30, 89 / 30, 3.0])
    assert truth[130] == pytest.approx(7.0)  # 3 s + 4 s: first frame of the 24 fps part


def test_overview_by_hand(videos, cache):
    path, truth = videos["cfr30_gop30"]
    ov = overview(path, 8, cache=cache, reuse=False)
    # Targets j * (599/30) / 7; the frame on screen is floor(j * 599 / 7).
    assert ov.indices == [0, 85, 171, 256, 342, 427, 513, 599]
    assert ov.timestamps == [i / 30 for i in ov.indices]
    assert ov.labels()[:3] == ["<0.0 seconds>", "<2.8 seconds>", "<5.7 seconds>"]
    assert tuple(ov.frames.shape) == (8, 3, 96, 128)
    assert_exact(ov, truth, path)


def test_crop_by_hand(videos, cache):
    path, truth = videos["cfr30_gop30"]
    c = crop(path, 3.3, 10, cache=cache)
    # 6.7 s at 1 fps -> 6 frames at 3.3, 4.64, 5.98, 7.32, 8.66, 10.0 s -> floor(30 t).
    assert c.indices == [99, 139, 179, 219, 259, 300]
    assert c.timestamps == [3.3, 139 / 30, 179 / 30, 219 / 30, 259 / 30, 10.0]
    assert c.window == (3.3, 10.0)
    assert_exact(c, truth, path)
    # 20 s window -> capped at 16 frames between 0 and the last frame (599/30 s): floor(j * 599 / 15).
    c = crop(path, 0, 20, cache=cache)
    assert c.indices == [0, 39, 79, 119, 159, 199, 239, 279, 319, 359, 399, 439, 479, 519, 559, 599]
    assert_exact(c, truth, path)


@pytest.mark.parametrize("name", list(VIDEOS))
def test_overview_and_crops_are_exact_and_bit_identical(videos, name):
    path, truth = videos[name]
    cache = DecoderCache()
    info = probe(path, cache=cache)
    assert info.num_frames == len(truth)
    assert [info.keyframe_times[0]] == [truth[0]]
    size = (96, 128)
    reference = sequential_frames(path, size)
    assert [read_code(f) for f in reference] == list(range(len(truth)))  # the video itself is sound
    for k in (1, 7, 32):
        assert_exact(overview(path, k, cache=cache, reuse=False), truth, path, reference)
    rng = random.Random(name)
    duration = info.duration
    windows = []
    for _ in range(12):
        a, b = sorted(rng.uniform(info.start_time, duration) for _ in range(2))
        windows.append((round(a, 2), round(b, 2) + 0.01))
    for frames in run_crops(path, windows, max_workers=2, cache=cache, max_frames=8):
        assert_exact(frames, truth, path, reference)
    # A resized variant: budget 3072 px -> scale 2, 96/2 = 48 -> 32, 128/2 = 64 -> 64. Codes survive, and
    # pixels match the same resize of a plain decode.
    small = crop(path, 0, duration, cache=cache, max_pixels=3072, max_frames=6)
    assert tuple(small.frames.shape) == (6, 3, 32, 64)
    small_ref = sequential_frames(path, (32, 64))
    assert_exact(small, truth, path, small_ref)


def test_vfr_timestamps_are_the_real_ones(videos, cache):
    path, truth = videos["vfr"]
    # The 10 fps part spans 3..7 s: frames at 3.0, 3.1, ... -> indices 90 + n.
    c = crop(path, 3.0, 7.0, cache=cache)
    # 4 s -> 4 frames at 3.0, 4.333, 5.667, 7.0 -> frames 90, 90+13, 90+26, 130 (7.0 s starts the 24 fps part).
    assert c.indices == [90, 103, 116, 130]
    assert c.timestamps == pytest.approx([3.0, 4.3, 5.6, 7.0])
    assert_exact(c, truth, path)
    ov = overview(path, 12, cache=cache, reuse=False)
    # Uniform in time over [0, last frame at 12 - 1/60 s]: not uniform in frame index.
    expected = [max(i for i, t in enumerate(truth) if t <= j * truth[-1] / 11 + 1e-6) for j in range(12)]
    assert ov.indices == expected
    assert_exact(ov, truth, path)


def test_mkv_reports_container_timestamps(videos, cache):
    path, truth = videos["mkv30"]
    c = crop(path, 0, 0.2, cache=cache, min_frames=4)
    # Targets 0, 0.0667, 0.1333, 0.2 s. The file stores frame i at round(1000 i / 30) ms: 0, 33, 67, 100,
    # 133, 167, 200. At 0.0667 s frame 2 (0.067 s) is not yet shown, so it is frame 1 at 0.033 s.
    assert c.indices == [0, 1, 4, 6]
    assert c.timestamps == [0.0, 0.033, 0.133, 0.2]
    assert_exact(c, truth, path)


def test_keyframe_snapped_overview(videos, cache):
    path, truth = videos["cfr30_gop30"]
    ov = overview(path, 8, snap_to_keyframes=True, cache=cache, reuse=False)
    # Targets j * 19.9667 / 7 s snap to the nearest whole second (keyframes every 1 s):
    # 0, 2.85, 5.70, 8.56, 11.41, 14.26, 17.11, 19.97 -> 0 3 6 9 11 14 17 20->19 (last keyframe is 19 s).
    assert ov.indices == [0, 90, 180, 270, 330, 420, 510, 570]
    assert_exact(ov, truth, path)


def test_skip_frame_drops_unrequested_non_reference_frames(videos):
    path, truth = videos["cfr30_gop30"]
    cache = DecoderCache()
    c = crop(path, 0.9, 0.95, cache=cache, min_frames=2, max_frames=2)  # frames 27 and 28 of GOP 0..29
    assert_exact(c, truth, path)
    stats = cache.stats.snapshot()
    # 0..28 plus whatever the B-frame delay pulls in were sent; fewer frames came out of the decoder
    # because unrequested non-reference B-frames were dropped undecoded.
    assert stats["packets_sent"] >= 29
    assert stats["frames_out"] < stats["packets_sent"]


def test_overview_is_reused(videos, cache):
    path, _ = videos["cfr30_gop30"]
    first = overview(path, 5, cache=cache)
    second = overview(path, 5, cache=cache)
    assert second is first  # decoded once, shared by every rollout of the group
    assert overview(path, 6, cache=cache) is not first


def test_overview_cache_tells_pixel_budgets_apart(videos, cache):
    """Two budgets on one video (e.g. two runs in one process with other max_pixels): each gets frames of
    its own size, and the cache still serves each budget's frames again."""
    path, truth = videos["cfr30_gop30"]  # 128 x 96
    small = overview(path, 7, max_pixels=3072, cache=cache)
    # 128*96 = 12288 > 3072: scale sqrt(12288 / 3072) = 2, so 96/2 = 48 -> 32 and 128/2 = 64 -> 64
    assert tuple(small.frames.shape) == (7, 3, 32, 64)
    full = overview(path, 7, max_pixels=12288, cache=cache)
    assert tuple(full.frames.shape) == (7, 3, 96, 128)  # 96 x 128 are multiples of 32 within the budget
    assert full.indices == small.indices == [0, 99, 199, 299, 399, 499, 599]  # floor(j * 599 / 6)
    assert_exact(full, truth, path)
    assert overview(path, 7, max_pixels=3072, cache=cache) is small
    assert overview(path, 7, max_pixels=12288, cache=cache) is full


def test_many_threads_share_the_cache(videos):
    path, truth = videos["cfr25_default"]
    cache = DecoderCache(max_idle_per_video=2)
    rng = random.Random(7)
    windows = [(s, s + rng.uniform(1, 20)) for s in (rng.uniform(0, 55) for _ in range(24))]

    def one(window):
        return crop(path, *window, cache=cache, max_workers=2)

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one, windows))
    for frames in results:
        assert_exact(frames, truth, path)
    assert len(cache._entries[path].idle) <= 2


def test_run_crops_matches_single_crops(videos, cache):
    path, truth = videos["vfr"]
    windows = [(0, 3), (2.5, 6), (5, 12), (11.9, 30)]
    together = run_crops(path, windows, max_workers=2, cache=cache)
    alone = [crop(path, s, e, cache=DecoderCache(), max_workers=1) for s, e in windows]
    for a, b in zip(together, alone, strict=True):
        assert a.indices == b.indices and a.timestamps == b.timestamps
        assert bool((a.frames == b.frames).all())
        assert_exact(a, truth, path)


def test_cache_is_lru_and_notices_rewritten_files(tmp_path):
    cache = DecoderCache(max_videos=2)
    paths = []
    for n in range(3):
        p = tmp_path / f"v{n}.mp4"
        write_coded_video(p, [(10 + n, 10)], gop=5)
        paths.append(str(p))
    for p in paths:
        probe(p, cache=cache)
    assert cache.open_paths() == paths[1:]  # v0 was least recently used
    probe(paths[1], cache=cache)
    assert cache.open_paths() == [paths[2], paths[1]]
    # Rewrite v2 with another length and other codes: the old table must not be used.
    write_coded_video(paths[2], [(25, 10)], gop=5, first_index=500)
    info = probe(paths[2], cache=cache)
    assert info.num_frames == 25
    c = crop(paths[2], 0, 2.4, cache=cache, min_frames=4, max_frames=4)
    assert [read_code(f.numpy()) for f in c.frames] == [500 + i for i in c.indices]


@pytest.mark.parametrize("name", ["cfr30_gop30", "cfr25_default", "cfr24_nob"])
def test_index_fast_path_equals_full_scan(videos, name):
    path, truth = videos[name]
    fast = build_table(path)
    slow = build_table(path, full_scan=True)
    assert fast.from_index and not slow.from_index
    assert fast.pts.tolist() == slow.pts.tolist()
    assert fast.keyframes == slow.keyframes
    assert fast.end_pts == slow.end_pts
    assert fast.times == truth


def test_variable_rate_and_matroska_use_the_full_scan(videos):
    assert build_table(videos["vfr"][0]).from_index is False
    assert build_table(videos["mkv30"][0]).from_index is False


def test_wrong_index_table_is_detected_and_rebuilt(videos, monkeypatch):
    """Fault injection: the fast path returns timestamps shifted by half a frame. No decoded frame carries
    those timestamps, so decoding reports them missing, the table is rebuilt by a full scan and the
    answer is still exact."""
    path, truth = videos["cfr30_gop30"]
    real = decoder_module.table_from_index

    def shifted(*args):
        table = real(*args)
        step = int(table.pts[1] - table.pts[0]) // 2
        return decoder_module._make_table(
            table.path,
            args[2],
            table.pts + step,
            np.asarray(table.keyframes),
            table.end_pts + step,
            from_index=True,
        )

    monkeypatch.setattr(decoder_module, "table_from_index", shifted)
    cache = DecoderCache()
    wrong = cache.table(path)
    assert wrong.pts[0] == (wrong.pts[1] - wrong.pts[0]) // 2  # the wrong table (half a frame late) is in use
    c = crop(path, 3.3, 10, cache=cache)
    assert c.indices == [99, 139, 179, 219, 259, 300]
    assert_exact(c, truth, path)
    assert cache.table(path).from_index is False


def wait_child(pid: int, timeout_s: float) -> int:
    """Exit code of a forked child; a child that hangs (e.g. on a lock copied from the parent) is killed
    and reported instead of hanging the suite."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"forked child {pid} did not finish within {timeout_s} s")


def test_forked_child_gets_a_fresh_cache(videos):
    path, _ = videos["cfr24_nob"]
    cache = DecoderCache()
    probe(path, cache=cache)
    pid = os.fork()
    if pid == 0:  # child: the parent's handles are gone, decoding works on fresh ones (no torch used here)
        ok = cache.open_paths() == []
        table = cache.table(path)
        decoded = cache.decode(table, plan_runs([24, 48], table.keyframes), (96, 128), max_workers=1)
        ok = ok and [read_code(decoded[i]) for i in (24, 48)] == [24, 48]
        os._exit(0 if ok else 1)
    assert wait_child(pid, timeout_s=120) == 0
    assert cache.open_paths() == [path]  # the parent keeps its own
