"""preset=release reproduces the released eval driver (EvolvingLMMs-Lab/ParaVT, commit cf55249,
``paravt/eval/driver.py`` and ``paravt/eval/utils.py``): its crop frame counts, prompt texts and layouts, error
rule and comparability (issue 34). Expected values are worked out by hand from those files and from
qwen-vl-utils 0.0.14's ``vision_process.py`` (quoted in each test)."""

from __future__ import annotations

import pytest

from paravt_core.agent.config import AgentConfig
from paravt_core.eval.protocols import preset_agent
from paravt_core.synth import Event, write_video
from paravt_core.video import api as video_api
from paravt_core.video.sampling import crop_frame_count

# ---------------------------------------------------------------------------------------------------------
# Item 4: crop frame counts. qwen-vl-utils 0.0.14 smart_nframes (fps branch):
#   min_frames = ceil_by_factor(1, 2) = 2; max_frames = floor_by_factor(16, 2) = 16
#   nframes = total_frames / video_fps * fps, total_frames = floor(end*vfps) - ceil(start*vfps) + 1
#   nframes = floor_by_factor(min(max(nframes, 2), 16), 2)
# At 30 fps: 3 s -> 91 frames -> 3.03 -> 2; 7 s -> 211 -> 7.03 -> 6; 16 s -> 481 -> 16.03 -> 16.
# Ours (nearest even, halves up): 3 s -> 4, 7 s -> 8, 16 s -> 16.


@pytest.mark.parametrize(("seconds", "release", "ours"), [(3.0, 2, 4), (7.0, 6, 8), (16.0, 16, 16)])
def test_crop_frame_count_as_qwen_vl_utils_0_0_14(seconds, release, ours):
    kw = {"fps": 1.0, "min_frames": 1, "max_frames": 16}
    assert crop_frame_count(10.0, 10.0 + seconds, rounding="floor", video_fps=30.0, **kw) == release
    assert crop_frame_count(10.0, 10.0 + seconds, rounding="floor", **kw) == release  # no rate known
    assert crop_frame_count(10.0, 10.0 + seconds, **kw) == ours


def test_crop_frame_count_floor_counts_source_frames_like_qwen():
    # 7.98 s at 25 fps from 0: floor(199.5) - 0 + 1 = 200 frames = 8.0 s -> 8 (seconds alone: 7.98 -> 6)
    kw = {"fps": 1.0, "min_frames": 1, "max_frames": 16, "rounding": "floor"}
    assert crop_frame_count(0.0, 7.98, video_fps=25.0, **kw) == 8
    assert crop_frame_count(0.0, 7.98, **kw) == 6


def test_release_preset_crops_round_down_on_a_real_video(tmp_path):
    path = tmp_path / "v.mp4"
    write_video(path, [Event("circle", "red", 1.0, 20.0, (10, 10, 60, 60))], 20.0, 10.0, (128, 96))
    cfg = preset_agent("release", AgentConfig())
    assert cfg.crop.rounding == "floor" and AgentConfig().crop.rounding == "nearest"
    opts = {"fps": cfg.crop.fps, "min_frames": cfg.crop.min_frames, "max_frames": cfg.crop.max_frames,
            "max_pixels": 64 * 96, "min_pixels": 32 * 32}  # fmt: skip
    counts = [len(c) for c in video_api.run_crops(str(path), [(2, 5), (2, 9), (2, 18)], **opts,
                                                   rounding=cfg.crop.rounding)]  # fmt: skip
    assert counts == [2, 6, 16]
    ours = [len(c) for c in video_api.run_crops(str(path), [(2, 5), (2, 9), (2, 18)], **opts)]
    assert ours == [4, 8, 16]
