"""Under preset=release the frames are the release's (``agent.frame_path=qwen-vl-utils``):
``round(linspace)`` indices, qwen-vl-utils 0.0.14's 28-px sizing and bicubic antialiased resize, JPEG quality 85.
The comparison runs qwen-vl-utils 0.0.14 itself (its torchcodec reader, the release's, and decord 0.6.0) from the side site ``.venv-bench/site``
(``scripts/setup.sh`` makes it; ``PARAVT_QWEN_VL_UTILS_SITE`` overrides the path) in a subprocess. Where it is
missing the test fails under ``CI=true`` and skips elsewhere. Sizes and indices are also worked out by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from paravt_core.synth import Event, write_video
from paravt_core.video import release_frames as R
from paravt_core.video.sizing import fit_to_grid
from tests.support.paths import ROOT
from tests.support.qwen_site_support import qwen_site


def test_release_sizes_and_indices_by_hand():
    # smart_resize(480, 854, 28, 100352, 602112): round(480/28)=17 -> 476, round(854/28)=round(30.5)=30 -> 840
    assert fit_to_grid(480, 854, min_pixels=R.OVERVIEW_MIN_PIXELS, max_pixels=R.OVERVIEW_MAX_PIXELS,
                       factor=28) == (476, 840)  # fmt: skip
    # a 1280x720 crop at most 50,176 px: beta = sqrt(921600 / 50176) = 4.2857; 720/beta = 168 -> 6 x 28 = 168,
    # 1280/beta = 298.7 -> floor(10.67) x 28 = 280 (ours, 32-px grid: 288 x 160)
    assert fit_to_grid(720, 1280, min_pixels=784, max_pixels=50_176, factor=28) == (168, 280)
    assert fit_to_grid(720, 1280, min_pixels=784, max_pixels=50_176) == (160, 288)
    # 64 of 360 frames: round(k * 359 / 63); k=1: 5.698 -> 6 (floor would give 5)
    assert R.overview_indices(360, 64)[:4] == [0, 6, 11, 17] and R.overview_indices(360, 64)[-1] == 359
    # crop 2.3-9.1 s at 30 fps: first ceil(69) = 69, last floor(273) = 273, 205 frames = 6.83 s -> 6 frames
    assert R.crop_indices(360, 30.0, 2.3, 9.1) == [69, 110, 151, 191, 232, 273]


def test_jpeg_round_trip_is_quality_85():
    import io

    from PIL import Image

    frame = torch.randint(
        0, 256, (1, 3, 56, 84), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )
    buf = io.BytesIO()
    Image.fromarray(frame[0].permute(1, 2, 0).numpy()).save(buf, format="JPEG", quality=85)
    expected = np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))
    assert np.array_equal(R.jpeg_round_trip(frame)[0].permute(1, 2, 0).numpy(), expected)
    assert not np.array_equal(expected, frame[0].permute(1, 2, 0).numpy())  # lossy: the round trip matters


def test_release_frames_equal_qwen_vl_utils_own_output(tmp_path):
    site = qwen_site()
    video = tmp_path / "v.mp4"
    events = [
        Event("circle", "red", 1.0, 8.0, (10, 10, 120, 100)),
        Event("square", "blue", 3.0, 9.0, (200, 60, 300, 170)),
    ]
    write_video(video, events, 12.0, 30.0, (426, 240))
    env = {**os.environ, "PYTHONPATH": str(site)}
    ours = {"overview": R.overview(video, 64, jpeg=False), "crop": R.crop(video, 2.3, 9.1, jpeg=False)}
    for backend in ("torchcodec", "decord"):  # torchcodec: the release's reader
        prefix = tmp_path / backend
        subprocess.run([sys.executable, str(ROOT / "tests" / "support" / "qwen_vl_utils_side.py"), str(video), str(prefix),
                        "2.3", "9.1", backend], env=env, check=True, capture_output=True, timeout=300)  # fmt: skip
        indices = json.loads(prefix.with_suffix(".json").read_text())
        for name, frames in ours.items():
            theirs = np.load(f"{prefix}_{name}.npy")
            assert frames.indices == indices[name]
            assert tuple(frames.frames.shape) == theirs.shape
            # the same decoded frames, resized by the same torchvision call: equal up to the decoders' YUV->RGB
            diff = np.abs(frames.frames.numpy().astype(int) - theirs.astype(int))
            assert diff.max() <= 2 and diff.mean() < 0.05, (backend, name, diff.max(), diff.mean())
            # what the server receives: both through JPEG 85; within JPEG round-off of each other
            sent = np.abs(R.jpeg_round_trip(frames.frames).numpy().astype(int)
                          - R.jpeg_round_trip(torch.from_numpy(theirs)).numpy().astype(int))  # fmt: skip
            assert sent.mean() < 0.5
    # smart_resize(240, 426, 28, 100352, 602112): 9 x 28 = 252, round(15.2) x 28 = 420; then grown to the
    # minimum? 252 x 420 = 105,840 >= 100,352: no
    assert tuple(ours["overview"].frames.shape[2:]) == (252, 420)
    assert len(ours["crop"]) == 6


def test_the_release_preset_episode_sends_the_release_frames_with_the_processors_own_settings(
    tiny_model, tmp_path
):
    import asyncio

    from paravt_core.agent.config import AgentConfig
    from paravt_core.agent.episode import arun_episode
    from paravt_core.engines.scripted import ScriptedEngine
    from paravt_core.eval.protocols import preset_agent

    video = tmp_path / "v.mp4"
    write_video(video, [Event("circle", "red", 1.0, 8.0, (10, 10, 120, 100))], 12.0, 30.0, (426, 240))
    cfg = preset_agent("release", AgentConfig(prompt_set="release-v1", temperature=0.0, forced_answer="mcq"))
    call = '<tool_call>{"name": "crop_video", "arguments": {"video_path": "v.mp4", "start_time": 2.3, "end_time": 9.1}}</tool_call>'
    engine = ScriptedEngine(tiny_model.processor, [call, "<answer>B</answer>"])
    result = asyncio.run(arun_episode({"video": str(video), "question": "Which shape?"}, engine, cfg))
    assert result.finish_reason == "answer" and result.answer == "B"
    first, second = (r for r in engine.requests if r.tag == "main")
    overview = R.overview(video, 64)  # round(linspace) of 360 frames, 252 x 420, through JPEG 85
    assert len(first.images) == 64 and all(
        torch.equal(a, b) for a, b in zip(first.images, overview.frames, strict=True)
    )
    crop = R.crop(video, 2.3, 9.1)
    assert (
        all(torch.equal(a, b) for a, b in zip(second.images[64:], crop.frames, strict=True))
        and len(second.images) == 70
    )
    # no image settings of ours: the processor's own (tiny processor: longest_edge 16,384 px, 32-px grid):
    # 252 x 420 -> beta = sqrt(105,840 / 16,384) = 2.54; floor(99.2 / 32) x 32 = 96, floor(165.2 / 32) x 32 = 160
    assert first.images_kwargs == {}
    assert first.image_grid_thw[0].tolist() == [1, 6, 10]


# What the server receives is the frames through JPEG 85 (utils.py pil_to_b64, lines 45-48), by default, for
# the overview and for a crop; a crop carries its window.


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
