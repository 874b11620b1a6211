"""Issue 38 item 3: under preset=release the frames are the release's (``agent.frame_path=qwen-vl-utils``):
``round(linspace)`` indices, qwen-vl-utils 0.0.14's 28-px sizing and bicubic antialiased resize, JPEG quality 85.
The comparison runs qwen-vl-utils 0.0.14 itself (its torchcodec reader, the release's, and decord 0.6.0) from the side site ``.venv-bench/site``
(``scripts/setup.sh`` makes it; ``PARAVT_QWEN_VL_UTILS_SITE`` overrides the path) in a subprocess. Where it is
missing the test fails under ``CI=true`` and skips elsewhere. Sizes and indices are also worked out by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from paravt_core.synth import Event, write_video
from paravt_core.video import release_frames as R
from paravt_core.video.sizing import fit_to_grid

ROOT = Path(__file__).resolve().parent.parent


def qwen_site() -> Path:
    site = Path(os.environ.get("PARAVT_QWEN_VL_UTILS_SITE", ROOT / ".venv-bench" / "site"))
    if not (site / "qwen_vl_utils-0.0.14.dist-info").is_dir() or not (site / "decord").is_dir():
        message = f"qwen-vl-utils 0.0.14 and decord are not set up in {site} (scripts/setup.sh makes them)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return site


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
        subprocess.run([sys.executable, str(ROOT / "tests" / "qwen_vl_utils_side.py"), str(video), str(prefix),
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
