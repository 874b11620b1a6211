"""Issue 41 item 3: ``video/release_frames.py`` (issue 38), pinned down where its first (sampled) mutation run
found behaviours no test checked (docs/mutation.md, "Code added by issues 38 and 40"). Indices and sizes by
hand from qwen-vl-utils 0.0.14's rules as the module docstring states them."""

from __future__ import annotations

import pytest
import torch

# ---------------------------------------------------------------------------------------------------------
# video/release_frames.py: what the server receives is the frames through JPEG 85 (utils.py pil_to_b64,
# lines 45-48), by default, for the overview and for a crop; a crop carries its window.


def test_release_frames_go_through_jpeg_85_by_default_and_a_crop_keeps_its_window(tmp_path):
    from paravt_core.synth import Event, write_video
    from paravt_core.video import release_frames as R

    video = tmp_path / "v.mp4"
    write_video(
        video, [Event("circle", "red", 0.5, 2.5, (10, 10, 60, 50))], 3.0, 30.0, (160, 120)
    )  # 90 frames
    raw, sent = R.overview(video, 64, jpeg=False), R.overview(video, 64)
    # 120 x 160 is under the overview's 100,352 px: beta = sqrt(19,200 / 100,352) = 0.4374; ceil(274.3 / 28) x 28
    # = 280, ceil(365.8 / 28) x 28 = 392
    assert tuple(raw.frames.shape) == (64, 3, 280, 392) and raw.indices[:3] == [0, 1, 3]  # round(k x 89 / 63)
    assert torch.equal(sent.frames, R.jpeg_round_trip(raw.frames)) and not torch.equal(
        sent.frames, raw.frames
    )
    assert (sent.window, sent.requested) == (None, None)
    # get_frames' default is 64 frames too (fail-soft only where qwen-vl-utils fails)
    assert torch.equal(R.overview_fail_soft(video).frames, sent.frames)
    # crop 0.5-2.5 s at 30 fps: frames ceil(15) = 15 to floor(75) = 75, 61 frames = 2.03 s -> 2 frames; 120 x 160
    # fits 784-50,176 px: round to the 28-px grid, 112 x 168
    crop_raw, crop = R.crop(video, 0.5, 2.5, jpeg=False), R.crop(video, 0.5, 2.5)
    assert (crop.indices, tuple(crop.frames.shape)) == ([15, 75], (2, 3, 112, 168))
    assert torch.equal(crop.frames, R.jpeg_round_trip(crop_raw.frames))
    assert (crop.window, crop.requested) == ((0.5, 2.5), (0.5, 2.5))


def test_release_frames_decode_with_the_callers_cache_and_name_a_bad_time(tmp_path):
    from paravt_core.synth import Event, write_video
    from paravt_core.video import release_frames as R
    from paravt_core.video.decoder import DecoderCache
    from paravt_core.video.errors import CropError, InvalidTimeError, InvalidWindowError

    video = tmp_path / "v.mp4"
    write_video(video, [Event("circle", "red", 0.5, 2.5, (10, 10, 60, 50))], 3.0, 30.0, (160, 120))
    for make in (lambda c: R.overview_fail_soft(video, cache=c), lambda c: R.crop(video, 0.5, 2.5, cache=c)):
        cache = DecoderCache()
        make(cache)
        # the caller's cache decoded them (its handles and tables are reused)
        assert cache.stats.frames_out > 0
    # run_crops: a window with no frame range is returned as a CropError naming it; its sibling is served
    good, bad = R.run_crops(video, [(0.5, 2.5), (2.0, 2.0)])
    assert good.indices == [15, 75]
    assert isinstance(bad, CropError) and (bad.start, bad.end) == (2.0, 2.0)
    assert str(bad) == "the window 2-2 s holds no frame range (60 to 60)"  # ceil(60) = floor(60)
    assert isinstance(bad.cause, InvalidWindowError) and str(bad.cause) == str(bad)
    # fail-soft: 90 frames cannot give 100 (qwen-vl-utils raises; get_frames sends none): empty uint8 frames
    empty = R.overview_fail_soft(video, 100)
    assert (tuple(empty.frames.shape), empty.frames.dtype, empty.timestamps, empty.indices) == (
        (0, 3, 28, 28), torch.uint8, [], [])  # fmt: skip
    with pytest.raises(
        InvalidTimeError,
        match=r"^start_time must be seconds \(e\.g\. 12\.5\) or MM:SS or HH:MM:SS, got 'soon'$",
    ):
        R.crop(video, "soon", 2.0)
    with pytest.raises(
        InvalidTimeError,
        match=r"^end_time must be seconds \(e\.g\. 12\.5\) or MM:SS or HH:MM:SS, got 'later'$",
    ):
        R.crop(video, 0.5, "later")


def test_release_indices_of_a_crop_ending_within_the_first_second_and_of_a_too_short_video():
    from paravt_core.video import release_frames as R
    from paravt_core.video.errors import VideoError

    # 0-0.5 s at 30 fps: frames ceil(0) = 0 to floor(15) = 15, 16 frames = 0.53 s -> 2 frames (the minimum)
    assert R.crop_indices(90, 30.0, 0.0, 0.5) == [0, 15]
    # 64 frames of a 10-frame video: smart_nframes raises (get_frames then sends no frames)
    with pytest.raises(VideoError, match=r"^64 frames asked of a video of 10 frames$"):
        R.overview_indices(10, 64)
