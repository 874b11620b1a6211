"""Videos with non-square pixels under the release's frame path (``agent.frame_path=qwen-vl-utils``): read at the
coded size, as qwen-vl-utils 0.0.14's readers return them (torchcodec, the release's, sizes its frames from the
codec context; decord likewise), where our own path shows the display size.

The clip is made by ffmpeg: 640 x 360 coded with display aspect 64:27, i.e. sample aspect ratio 4:3 (853 x 360
shown), index-coded (frame i shows code i). Sizes and token counts are worked out by hand from qwen-vl-utils'
``smart_resize`` (28-px grid) and the Qwen3-VL processor's (patch 16, merge 2: a 32-px grid, one token per
2 x 2 patches); the frames are also compared with qwen-vl-utils' own output where its side site is set up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from transformers import Qwen2VLImageProcessor

from paravt_core.synth import read_code, write_coded_video
from paravt_core.video import DecoderCache, probe
from paravt_core.video import api as video_api
from paravt_core.video import release_frames as R
from tests.support.paths import ROOT
from tests.support.qwen_site_support import qwen_site
from tests.support.video_support import write_with_orientation


@pytest.fixture(scope="module")
def sar_video(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("sar") / "sar.mp4"
    # 70 frames at 10 fps (64 overview frames need at least 64); -aspect sets the display aspect ratio
    write_coded_video(
        path, [(70, 10.0)], width=640, height=360, x264_params="bframes=0", options={"aspect": "64:27"}
    )
    return str(path)


def ffprobe_stream(path: str) -> dict[str, str]:
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
         "stream=width,height,sample_aspect_ratio", "-of", "json", path],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return json.loads(out)["streams"][0]


def qwen3_vl_tokens(frame: torch.Tensor) -> int:
    """Image tokens of one frame for a Qwen3-VL processor whose pixel limits do not bind (the checkpoint's
    own image settings are the server's on this path): (h / 16) x (w / 16) patches / 2²."""
    processor = Qwen2VLImageProcessor(
        patch_size=16,
        merge_size=2,
        temporal_patch_size=2,
        size={"shortest_edge": 65_536, "longest_edge": 16_777_216},
    )
    grid = processor(images=[frame], return_tensors="pt")["image_grid_thw"][0]
    return int(grid.prod()) // 4


def test_the_clip_has_non_square_pixels(sar_video):
    assert ffprobe_stream(sar_video) == {"width": 640, "height": 360, "sample_aspect_ratio": "4:3"}
    info = probe(sar_video, cache=DecoderCache())
    assert (info.width, info.height) == (853, 360)  # our own path: round(640 x 4 / 3) = 853 shown


def test_the_release_overview_is_read_at_the_coded_size(sar_video):
    frames = R.overview(sar_video, 64, jpeg=False)
    # smart_resize(360, 640, 28, 100,352, 602,112): round(12.86) x 28 = 364, round(22.86) x 28 = 644;
    # 364 x 644 = 234,416 px, inside the bounds
    assert tuple(frames.frames.shape) == (64, 3, 364, 644)
    assert [read_code(f.numpy()) for f in frames.frames[:3]] == frames.indices[:3] == [0, 1, 2]
    # Qwen3-VL: 364 x 644 -> round(11.4) x 32 = 352, round(20.1) x 32 = 640 -> 22 x 40 patches -> 220 tokens
    assert qwen3_vl_tokens(frames.frames[0]) == 220
    # the display size (853 x 360) would be 364 x 840 -> 352 x 832 -> 22 x 52 patches -> 286 tokens
    assert qwen3_vl_tokens(torch.zeros((3, 364, 840), dtype=torch.uint8)) == 286


def test_the_release_crop_is_read_at_the_coded_size(sar_video):
    crop = R.crop(sar_video, 1.0, 3.0, jpeg=False)
    # 640 x 360 at most 50,176 px: beta = sqrt(230,400 / 50,176) = 2.1429; floor(168 / 28) x 28 = 168,
    # floor(298.7 / 28) x 28 = 280 (the display size would give floor(145.5 / 28) x 28 = 140 by 336)
    assert (crop.indices, tuple(crop.frames.shape)) == ([10, 30], (2, 3, 168, 280))
    assert [read_code(f.numpy()) for f in crop.frames] == [10, 30]
    # our own path is unchanged: the shown 853 x 360 on its 32-px grid
    ours = video_api.crop(sar_video, 1.0, 3.0, cache=DecoderCache())
    assert tuple(ours.frames.shape[2:]) == (128, 320)


def test_a_rotated_clip_is_read_as_stored(tmp_path):
    # torchcodec 0.10 (the release's lock) applies no display rotation (from 0.11 on), decord neither
    path = tmp_path / "r90.mp4"
    write_with_orientation(path, 90, False, frames=70)
    # smart_resize(96, 128, 28, 100,352, 602,112): 84 x 140 is under the minimum, beta = sqrt(12,288 / 100,352)
    # = 0.3499; ceil(274.3 / 28) x 28 = 280, ceil(365.8 / 28) x 28 = 392 (not turned to 392 x 280)
    assert tuple(R.overview(path, 64, jpeg=False).frames.shape[2:]) == (280, 392)
    crop = R.crop(path, 1.0, 3.0, jpeg=False)
    assert [read_code(f.numpy()) for f in crop.frames] == [10, 30]  # unrotated: the code reads as written
    ours = video_api.crop(path, 1.0, 3.0, cache=DecoderCache())
    assert tuple(ours.frames.shape[2:]) == (128, 96)  # ours turns it: 96 wide, 128 high


@pytest.mark.parametrize("backend", ["torchcodec", "decord"])
def test_the_coded_frames_equal_qwen_vl_utils_own(sar_video, tmp_path, backend):
    site = qwen_site()
    prefix = tmp_path / backend
    subprocess.run([sys.executable, str(ROOT / "tests" / "support" / "qwen_vl_utils_side.py"), sar_video, str(prefix), "1.0",
                    "3.0", backend], env={**os.environ, "PYTHONPATH": str(site)}, check=True, capture_output=True,
                   timeout=300)  # fmt: skip
    indices = json.loads(prefix.with_suffix(".json").read_text())
    ours = {
        "overview": R.overview(sar_video, 64, jpeg=False),
        "crop": R.crop(sar_video, 1.0, 3.0, jpeg=False),
    }
    for name, frames in ours.items():
        theirs = np.load(f"{prefix}_{name}.npy")
        assert frames.indices == indices[name] and tuple(frames.frames.shape) == theirs.shape, (backend, name)
        diff = np.abs(frames.frames.numpy().astype(int) - theirs.astype(int))
        assert diff.mean() < 0.5, (backend, name, diff.max(), diff.mean())
