"""``paravt_core.video.api`` on the agent tests' clip, every value worked out by hand from how the clip is made
(``tests/support/agent_support.py``: 12 s at 4 fps, 128 x 96, a keyframe each second: GOP = fps): probe, overview times
and labels, crop plans, clamping notes and refusals, the overview cache's byte bound, and ``resolve``'s rules
(``file://``, relative paths, ``s3://`` fetched once, with ``storage.local_copy`` stood in for). In-process."""

from __future__ import annotations

import os

import pytest
import torch

from paravt_core import storage
from paravt_core.synth import write_video
from paravt_core.video import DecoderCache, api
from paravt_core.video.errors import (
    CropError,
    InvalidTimeError,
    InvalidWindowError,
    VideoDecodeError,
    VideoNotFoundError,
)


def test_probe_of_the_clip_by_hand(video):
    info = api.probe(video)
    assert (info.path, info.duration, info.fps, info.num_frames) == (str(video), 12.0, 4.0, 48)
    assert info.keyframe_times == tuple(float(s) for s in range(12))  # one keyframe each second
    assert (info.width, info.height, info.start_time, info.codec, info.rotated) == (
        128,
        96,
        0.0,
        "h264",
        False,
    )


def test_overview_times_labels_and_its_cache(video):
    # 5 targets uniform over [0, 11.75] (the last frame's time): 0, 2.9375, 5.875, 8.8125, 11.75 -> the frames
    # shown then (frame i from i/4 s): 0, 11, 23, 35, 47
    frames = api.overview(video, 5, reuse=False)
    assert (frames.indices, frames.timestamps) == ([0, 11, 23, 35, 47], [0.0, 2.75, 5.75, 8.75, 11.75])
    assert frames.labels() == [
        "<0.0 seconds>",
        "<2.8 seconds>",
        "<5.8 seconds>",
        "<8.8 seconds>",
        "<11.8 seconds>",
    ]
    assert len(frames) == 5 and tuple(frames.frames.shape) == (5, 3, 96, 128) and frames.window is None
    # the nearest keyframes (each second) to the same targets: 0, 3, 6, 9 and 11 s
    snapped = api.overview(video, 5, snap_to_keyframes=True)
    assert (snapped.indices, snapped.timestamps) == ([0, 12, 24, 36, 44], [0.0, 3.0, 6.0, 9.0, 11.0])
    assert api.overview(video, 5, snap_to_keyframes=True) is snapped  # reused: the same object
    assert api.overview(video, 5).indices == frames.indices  # the snapped one is not served for exact frames
    assert api.overview(video, 5, reuse=False) is not api.overview(video, 5, reuse=False)
    for k in (0, True, 2.0, "5"):
        with pytest.raises(ValueError) as err:
            api.overview(video, k)
        assert str(err.value) == f"k must be a positive integer, got {k!r}"


def test_crop_plans_clamps_and_refusals(video):
    # 1 fps over 2.2 s: 2 frames (the even minimum), at 1.0 s (frame 4) and 3.2 s (frame 12, shown 3.0-3.25)
    frames = api.crop(video, 1, 3.2)
    assert (frames.indices, frames.timestamps, frames.window, frames.requested) == (
        [4, 12], [1.0, 3.0], (1.0, 3.2), (1.0, 3.2))  # fmt: skip
    assert api.clamp_note(frames) == ""
    # an end past the video: served to 12.0, sampled up to the last frame's own time (11.75: frame 47)
    frames = api.crop(video, "00:10", 20)
    assert (frames.indices, frames.timestamps, frames.window, frames.requested) == (
        [40, 47], [10.0, 11.75], (10.0, 12.0), (10.0, 20.0))  # fmt: skip
    assert api.clamp_note(frames) == "end_time 20 is past the end of the video, clamped to 12.0s."
    with pytest.raises(InvalidWindowError) as err:
        api.crop(video, 5, 2)
    assert str(err.value) == "start_time (5) must be smaller than end_time (2)"
    with pytest.raises(InvalidWindowError) as err:
        api.crop(video, 12, 14)
    assert str(err.value) == "start_time (12) is at or after the end of the video (duration 12.0 seconds)"
    # a window of the first 0.1 s: frame 0 twice (the even minimum of frames)
    assert api.crop(video, 0, 0.1).indices == [0, 0]


def test_the_clamp_note_names_each_clamped_edge():
    def frames(window, requested):
        return api.Frames(torch.zeros(0), [], [], window=window, requested=requested)

    both = frames((1.5, 10.0), (0.25, 30.0))
    assert api.clamp_note(both) == (
        "start_time 0.25 is before the video's first frame, clamped to 1.5s. "
        "end_time 30 is past the end of the video, clamped to 10.0s."
    )
    assert api.clamp_note(frames((1.5, 3.0), (0.0, 3.0))) == (
        "start_time 0 is before the video's first frame, clamped to 1.5s."
    )
    assert api.clamp_note(frames((1.0, 3.0), (1.0, 3.0))) == ""
    assert api.clamp_note(frames(None, (1.0, 3.0))) == "" and api.clamp_note(frames((1.0, 3.0), None)) == ""


def test_crops_of_a_missing_video_are_errors_naming_only_its_file(tmp_path):
    out = api.run_crops(tmp_path / "gone" / "missing.mp4", [(0, 1), ("00:02", 3)])
    assert all(isinstance(c, CropError) for c in out)
    assert [(str(c), c.start, c.end) for c in out] == [
        ("video not found: missing.mp4", 0, 1),
        ("video not found: missing.mp4", "00:02", 3),
    ]


def test_resolve_reads_file_uris_relative_paths_and_refuses_an_empty_one(tmp_path, monkeypatch):
    assert api.resolve("file:///data/v.mp4") == "/data/v.mp4"
    monkeypatch.chdir(tmp_path)
    assert api.resolve("clips/v.mp4") == str(tmp_path / "clips" / "v.mp4")
    assert api.resolve(tmp_path / "a" / ".." / "v.mp4") == str(tmp_path / "v.mp4")
    with pytest.raises(VideoNotFoundError) as err:
        api.resolve("")
    assert str(err.value) == "invalid video location ''"


def test_an_s3_video_is_fetched_once_and_the_remembered_copies_are_bounded(tmp_path, monkeypatch):
    fetched: list[str] = []

    def local_copy(uri: str) -> str:
        fetched.append(uri)
        path = tmp_path / f"copy{len(fetched)}.mp4"
        path.write_bytes(b"v")
        return str(path)

    monkeypatch.setattr(storage, "local_copy", local_copy)
    monkeypatch.setattr(api, "_S3_PATHS", type(api._S3_PATHS)())
    first = api.resolve("s3://bucket/videos/a.mp4")
    assert api.resolve("s3://bucket/videos/a.mp4") == first == str(tmp_path / "copy1.mp4")
    assert fetched == ["s3://bucket/videos/a.mp4"]
    os.remove(first)  # a remembered copy that is gone is fetched again
    assert api.resolve("s3://bucket/videos/a.mp4") == str(tmp_path / "copy2.mp4") and len(fetched) == 2
    for i in range(4096):  # 4096 more URIs: the oldest, a.mp4, is forgotten, the 4096 newest are kept
        api._S3_PATHS[f"s3://bucket/{i}"] = first
    api.resolve("s3://bucket/videos/b.mp4")
    assert len(api._S3_PATHS) == 4096 and "s3://bucket/videos/a.mp4" not in api._S3_PATHS
    assert "s3://bucket/0" not in api._S3_PATHS and "s3://bucket/1" in api._S3_PATHS

    def unreachable(uri: str) -> str:
        raise ConnectionError("no route to host")

    monkeypatch.setattr(storage, "local_copy", unreachable)
    with pytest.raises(VideoNotFoundError) as err:
        api.resolve("s3://bucket/videos/c.mp4")
    assert str(err.value) == "cannot fetch video s3://bucket/videos/c.mp4: no route to host"
    assert isinstance(err.value.__cause__, ConnectionError)


def test_the_overview_cache_keeps_the_newest_overviews_within_its_bytes():
    def of(n: int) -> api.Frames:
        return api.Frames(torch.zeros(n, dtype=torch.uint8), [], [])

    made: list[str] = []

    def make(key: str, n: int):
        def build() -> api.Frames:
            made.append(key)
            return of(n)

        return build

    cache = api._OverviewCache(max_bytes=10)
    a = cache.get_or_make(("a",), make("a", 4))
    assert cache.get_or_make(("a",), make("a", 4)) is a and made == ["a"]
    cache.get_or_make(("b",), make("b", 4))
    cache.get_or_make(("a",), make("a", 4))  # a used last: b is now the oldest
    cache.get_or_make(("c",), make("c", 4))  # 12 bytes > 10: the oldest (b) goes
    assert list(cache._items) == [("a",), ("c",)] and cache._bytes == 8
    big = cache.get_or_make(("big",), make("big", 11))  # larger than the bound: served, never kept
    assert big.frames.numel() == 11 and ("big",) not in cache._items and cache._bytes == 8
    cache.get_or_make(("d",), make("d", 2))  # exactly 10 bytes: all kept
    assert list(cache._items) == [("a",), ("c",), ("d",)] and cache._bytes == 10
    assert made == ["a", "b", "c", "big", "d"] and cache._key_locks == {}
    cache.clear()
    assert (dict(cache._items), cache._bytes) == ({}, 0)
    assert api._OverviewCache().max_bytes == 512 * 2**20


def test_floor_rounding_counts_the_windows_source_frames(video, tmp_path):
    # the clip (4 fps): 0-3 s holds floor(3 x 4) - ceil(0) + 1 = 13 frames, 3.25 s at 1 fps -> 2 (down to even);
    # ours rounds 3 s x 1 fps to the nearest even count: 4
    assert len(api.crop(video, 0, 3, rounding="floor")) == 2 and len(api.crop(video, 0, 3)) == 4
    # a video under one second (6 frames at 8 fps): its rate is still known, 8 fps -> 7 frames = 0.875 s,
    # x 16 fps = 14; without the rate it would be 0.75 s x 16 = 12
    short = tmp_path / "short.mp4"
    write_video(short, [], 0.75, 8, (64, 48))
    assert len(api.crop(short, 0, 0.75, fps=16, rounding="floor")) == 14
    assert len(api.crop(short, 0, 0.75, fps=16)) == 12


def test_a_bad_end_time_is_named_as_the_end(video):
    with pytest.raises(InvalidTimeError) as err:
        api.crop(video, 1, "soon")
    assert str(err.value) == "end_time must be seconds (e.g. 12.5) or MM:SS or HH:MM:SS, got 'soon'"


class _Recording(DecoderCache):
    """The real decoder cache, recording the worker count it is asked for; with ``damaged``, frame 0 does
    not decode (a damaged stretch at the start of the file)."""

    def __init__(self, damaged: bool = False):
        super().__init__()
        self.damaged, self.workers, self.calls = damaged, [], []

    def decode(self, table, runs, size, *, max_workers=None, keyframes_only=False):
        self.workers.append(max_workers)
        self.calls.append(sorted(i for r in runs for i in r.targets))
        if self.damaged and 0 in self.calls[-1]:
            raise VideoDecodeError(f"{table.path}: frame 0 does not decode")
        return super().decode(table, runs, size, max_workers=max_workers, keyframes_only=keyframes_only)


def test_the_worker_count_reaches_the_decoder(video):
    cache = _Recording()
    api.overview(video, 3, cache=cache, max_workers=2, reuse=False)
    api.overview(video, 3, cache=cache, max_workers=3, reuse=False, snap_to_keyframes=True)
    api.run_crops(video, [(1, 2)], 5, cache=cache)
    assert cache.workers == [2, 3, 5]


def test_a_damaged_stretch_fails_only_the_windows_that_need_it(video):
    cache = _Recording(damaged=True)
    out = api.run_crops(video, [(0, 1), (5, 6)], cache=cache)
    # together first (frames 0, 4 and 20, 24), then, after the failure, each window alone
    assert cache.calls[0] == [0, 4, 20, 24] and cache.calls[-2:] == [[0, 4], [20, 24]]
    bad, good = out
    assert isinstance(bad, CropError) and (str(bad), bad.start, bad.end) == (
        "clip.mp4: frame 0 does not decode",
        0,
        1,
    )
    assert good.indices == [20, 24] and good.window == (5.0, 6.0)
