"""Crop windows out of the video's range under the release's frame path (``agent.frame_path=qwen-vl-utils``):
clamped to the video as qwen-vl-utils 0.0.14 clamps them, served from the clamped window, the tool response
showing the times asked for; our own path still refuses them.

The video is index-coded (frame i shows code i at i / 10 s, ``paravt_core.synth.codes``), 100 frames at 10 fps
(10.0 s), so the frames a crop returns are read back from the pixels. Expected indices are worked out by hand
from the rules (``calculate_video_frame_range``, ``smart_nframes``; torchvision 0.25.0 ``read_video`` for the
retry), each step written next to its assertion.
"""

from __future__ import annotations

import asyncio
import math
from fractions import Fraction

import pytest

from paravt_core.agent.config import AgentConfig
from paravt_core.agent.episode import arun_episode
from paravt_core.agent.parsing import format_tool_call
from paravt_core.engines.scripted import ScriptedEngine
from paravt_core.eval.protocols import preset_agent
from paravt_core.synth import read_code, write_coded_video
from paravt_core.video import api as video_api
from paravt_core.video import release_frames as R
from paravt_core.video.errors import InvalidTimeError, InvalidWindowError


@pytest.fixture(scope="module")
def coded_video(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("clamp") / "coded.mp4"
    # timescale 600: frame i at pts 60 i (what fallback_indices compares)
    write_coded_video(path, [(100, 10.0)], x264_params="bframes=0")
    return str(path)


def codes(frames: video_api.Frames) -> list[int]:
    return [read_code(frame.numpy()) for frame in frames.frames]


def test_an_end_past_the_video_is_clamped_to_its_duration(coded_video):
    # end min(30, 10.0) = 10.0: first ceil(8.5 x 10) = 85, last min(floor(100), 99) = 99; 15 frames = 1.5 s ->
    # max(1.5, 2) = 2 frames: round(linspace(85, 99, 2)) = [85, 99]
    crop = R.crop(coded_video, 8.5, 30.0)
    assert crop.indices == [85, 99] and codes(crop) == [85, 99]
    assert (crop.window, crop.requested) == ((8.5, 10.0), (8.5, 30.0))
    # an end no float reaches, or infinity: clamped the same way (ours refused "too large")
    assert R.crop(coded_video, 8.5, 1e30).indices == [85, 99]
    assert R.crop(coded_video, 8.5, math.inf).indices == [85, 99]


def test_a_negative_or_unreadable_start_is_clamped_to_zero(coded_video):
    # start max(0, -2) = 0: first 0, last floor(15) = 15, 16 frames = 1.6 s -> 2 frames [0, 15]
    crop = R.crop(coded_video, -2.0, 1.5)
    assert crop.indices == [0, 15] and codes(crop) == [0, 15]
    assert (crop.window, crop.requested) == ((0.0, 1.5), (-2.0, 1.5))
    # NaN (a model's "nan" read by float()): min(nan, 10) keeps the NaN, max(0.0, nan) gives 0.0
    assert R.crop(coded_video, math.nan, 1.5).indices == [0, 15]
    # a whole window before the video: both ends clamp to 0 -> first 0 >= last 0: no frames
    with pytest.raises(InvalidWindowError, match=r"holds no frame range \(0 to 0\)"):
        R.crop(coded_video, -5.0, -1.0)


def test_an_empty_clamped_range_is_an_error_unless_torchvisions_retry_finds_two_frames(coded_video):
    # after the end: first ceil(12 x 10) -> ceil(100) = 100 > last 99
    with pytest.raises(InvalidWindowError, match=r"^the window 12-20 s holds no frame range \(100 to 99\)$"):
        R.crop(coded_video, 12.0, 20.0)
    # start after end: first 30 > last 20; torchvision refuses end_pts < start_pts
    with pytest.raises(InvalidWindowError, match=r"\(30 to 20\)"):
        R.crop(coded_video, 3.0, 2.0)
    # 9.85-20 s: first ceil(98.5) = 99 = last 99, so the torchcodec reader raises and fetch_video retries with
    # torchvision: pts in [floor(9.85 x 600), ceil(20 x 600)] = [5910, 12000] -> frame 99 (pts 5940); 5910 is on no
    # frame, so the frame before it (98, pts 5880) leads: 2 frames -> 2
    crop = R.crop(coded_video, 9.85, 20.0)
    assert crop.indices == [98, 99] and codes(crop) == [98, 99]
    # 9.9-20 s: pts from 5940, frame 99 exactly at the start: no frame leads, 1 frame < 2 -> the first error kept
    with pytest.raises(InvalidWindowError, match=r"\(99 to 99\)"):
        R.crop(coded_video, 9.9, 20.0)


def test_fallback_indices_by_hand():
    pts = [60 * i for i in range(100)]
    tick = Fraction(1, 600)
    # one frame in range (62 at 3720) and the one before the start (61): [61, 62]
    assert R.fallback_indices(pts, tick, 10.0, 6.15, 6.22) == [61, 62]
    # start on a frame: no frame leads
    with pytest.raises(InvalidWindowError, match="1 frame"):
        R.fallback_indices(pts, tick, 10.0, 6.2, 6.22)
    # a start at tick 0 never gets a leading frame; end < start and non-finite starts are errors
    with pytest.raises(InvalidWindowError, match="ends before it starts"):
        R.fallback_indices(pts, tick, 10.0, 3.0, 2.0)
    with pytest.raises(InvalidWindowError, match="not a finite range"):
        R.fallback_indices(pts, tick, 10.0, -math.inf, 2.0)
    # an infinite end bounds nothing: frames 99 (in range) and 98 (before 5910)
    assert R.fallback_indices(pts, tick, 10.0, 9.85, math.inf) == [98, 99]


def test_our_own_path_still_refuses_times_out_of_range(coded_video):
    with pytest.raises(InvalidTimeError, match="must not be negative"):
        video_api.crop(coded_video, -2.0, 1.5)
    with pytest.raises(InvalidWindowError):
        video_api.crop(coded_video, 12.0, 20.0)


def test_the_release_episode_serves_the_clamped_windows_and_names_the_asked_for_times(
    tiny_model, coded_video
):
    cfg = preset_agent("release", AgentConfig(prompt_set="release-v1", temperature=0.0, forced_answer="mcq"))
    calls = "".join(
        format_tool_call("crop_video", {"video_path": "coded.mp4", "start_time": s, "end_time": e})
        for s, e in ((-2, 1.5), (8.5, 30), (12, 20))
    )
    engine = ScriptedEngine(tiny_model.processor, [calls, "<answer>B</answer>"])
    result = asyncio.run(arun_episode({"video": coded_video, "question": "Which code?"}, engine, cfg))
    assert result.finish_reason == "answer"
    first, second = (r for r in engine.requests if r.tag == "main")
    crops = second.images[len(first.images) :]
    assert [read_code(frame.numpy()) for frame in crops] == [0, 15, 85, 99]
    prompt = tiny_model.processor.tokenizer.decode(second.input_ids)
    # the notes print the asked-for times (driver.py eval_one), the crop after the end is the driver's error
    assert "2 frames from -2.0s to 1.5s." in prompt and "2 frames from 8.5s to 30.0s." in prompt
    assert "<tool_response>\n[Error cropping 12.0s-20.0s]\n</tool_response>" in prompt
    served = [(c.ok, c.window) for c in result.calls]
    assert served == [(True, (0.0, 1.5)), (True, (8.5, 10.0)), (False, None)]
