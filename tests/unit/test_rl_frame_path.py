"""RL asks the frame path too: a group's overview, the server's processor budget and the followers' restore come
from ``agent.frame_path``'s strategy, as the eval episode's do (a path registered from outside the library, the
stills of ``test_frame_paths``, whose frames no decoder could make from the video named)."""

from __future__ import annotations

import asyncio
import json

import pytest

from paravt_core.agent.frame_paths import FRAME_PATHS
from paravt_core.config import load_config
from paravt_core.engines.base import image_processor_kwargs
from paravt_core.engines.scripted import ScriptedEngine
from paravt_core.rl.config import RlConfig
from paravt_core.rl.data import RlPrompt
from paravt_core.rl.launch import plan
from paravt_core.rl.rollout import arollout_step
from paravt_core.rl.stage import restore_images_kwargs
from tests.support.frame_path_support import StillPath
from tests.support.paths import ROOT

PRESET = ROOT / "configs" / "rl" / "paragrpo_8b.yaml"
STILLS = image_processor_kwargs(max_pixels=64 * 64, min_pixels=32 * 32)  # StillPath.processor_pixels


@pytest.fixture
def on_stills(monkeypatch: pytest.MonkeyPatch) -> RlConfig:
    monkeypatch.setitem(FRAME_PATHS, StillPath.name, StillPath())
    cfg = load_config(RlConfig, PRESET, ["engine.kind=sglang", "engine.base_url=", "engine.gpus=[7]"])
    return cfg.model_copy(update={"agent": cfg.agent.model_copy(update={"frame_path": StillPath.name})})


def test_a_groups_overview_is_the_paths(tiny_model, on_stills):
    prompt = RlPrompt(
        "r", "nowhere://no-such-video.mp4", "Which shape? A. square B. circle", "B", "multiple_choice"
    )
    engine = ScriptedEngine(tiny_model.processor, ["<answer>B</answer>"])
    got = asyncio.run(
        arollout_step([prompt], engine, on_stills.agent, on_stills.paravt, group_size=1, version=0)
    )
    assert got.counts["video_error_groups"] == 0, got.counts  # made once for the group, by the path
    (sample,) = got.samples
    episode = sample.episode
    assert episode.finish_reason == "answer", episode.finish_reason  # not a video_error: the stills were made
    assert episode.overview_size == (32, 64)
    assert episode.overview_timestamps == [float(i) for i in range(sample.nframes)]


def test_the_server_and_the_followers_get_the_paths_pixel_budget(on_stills):
    command = plan(on_stills, "/c.yaml", gpus=8, model_dir="/m", python="python").server_command
    assert json.loads(command[command.index("--mm-process-config") + 1])["image"] == STILLS
    assert restore_images_kwargs(on_stills) == STILLS


def test_a_path_with_the_checkpoints_own_settings_gives_the_followers_none(monkeypatch, on_stills):
    cfg = on_stills.model_copy(
        update={"agent": on_stills.agent.model_copy(update={"frame_path": "qwen-vl-utils"})}
    )
    assert restore_images_kwargs(cfg) == {}  # as the episode encoder: the processor's own settings
    command = plan(cfg, "/c.yaml", gpus=8, model_dir="/m", python="python").server_command
    assert "--mm-process-config" not in command
