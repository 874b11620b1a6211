"""Frame paths as strategies: the registry the config chooses from, each path's frames, processor pixels and
report notes, and a path registered from outside the library that the episode and the report use as they are.

Videos, crops, the processor and the chat template are real; main-agent replies are scripted.
"""

from __future__ import annotations

import ast
import asyncio
from typing import get_args

import pytest
from pydantic import ValidationError

from paravt_core.agent import frame_paths
from paravt_core.agent.config import AgentConfig
from paravt_core.agent.episode import arun_episode, make_encoder
from paravt_core.agent.frame_paths import FRAME_PATHS, UnknownFramePathError
from paravt_core.agent.parsing import format_tool_call
from paravt_core.engines.base import image_processor_kwargs
from paravt_core.engines.scripted import ScriptedEngine
from paravt_core.video.errors import CropError
from tests.support.agent_support import tiny_agent_config
from tests.support.frame_path_support import StillPath
from tests.support.paths import ROOT

PACKAGE = ROOT / "paravt_core"
DECODER_NOTE = ("frames: ours (swscale to the 32-px grid, PNG, mm_processor_kwargs), not the release's "
                "(qwen-vl-utils 0.0.14 28-px grid, bicubic antialias, JPEG 85, server defaults)")  # fmt: skip


# ---------------------------------------------------------------------------------------------------------
# The registry


def test_the_config_accepts_exactly_the_registered_paths_and_its_help_lists_them():
    field = AgentConfig.model_fields["frame_path"]
    assert get_args(field.annotation) == ("decoder", "qwen-vl-utils") == tuple(FRAME_PATHS)
    assert field.default == "decoder" and AgentConfig().frames is FRAME_PATHS["decoder"]
    assert field.description == (
        "decoder: ours (32-px grid); qwen-vl-utils: the release's frames (28-px grid, bicubic, JPEG 85)"
    )
    assert AgentConfig(frame_path="qwen-vl-utils").frames is FRAME_PATHS["qwen-vl-utils"]
    assert frame_paths.RELEASE_FRAME_PATH == "qwen-vl-utils"
    assert all(name == path.name for name, path in FRAME_PATHS.items())


def test_an_unknown_path_is_refused_naming_the_known_ones():
    with pytest.raises(
        UnknownFramePathError, match=r"^unknown frame path 'ffmpeg'; known: decoder, qwen-vl-utils$"
    ):
        frame_paths.get("ffmpeg")
    with pytest.raises(ValidationError, match=r"'decoder' or 'qwen-vl-utils'"):
        AgentConfig(frame_path="ffmpeg")


def test_no_hub_module_names_a_path():
    # the episode, the eval stage, the report and the protocols reach a path through the registry only
    hubs = ["agent/episode.py", "eval/stage.py", "eval/report.py", "eval/protocols.py"]
    named = {
        hub: [
            node.value
            for node in ast.walk(ast.parse((PACKAGE / hub).read_text()))
            if isinstance(node, ast.Constant) and node.value in FRAME_PATHS
        ]
        for hub in hubs
    }
    assert named == {hub: [] for hub in hubs}


# ---------------------------------------------------------------------------------------------------------
# Each path's frames and processor pixels (the 12 s, 4 fps, 128 x 96 clip: 48 frames)


def test_the_decoder_path_sizes_overview_and_crops_to_their_own_budgets_and_rounds_as_configured(video):
    agent = AgentConfig(max_pixels=64 * 96, min_pixels=32 * 32, overview_max_pixels=128 * 96,
                        crop={"max_frames": 16})  # fmt: skip
    path = agent.frames
    overview = path.overview(str(video), 8, agent)
    assert tuple(overview.frames.shape) == (8, 3, 96, 128)  # 128 x 96 is on the 32-px grid and in budget
    assert len(path.overview(str(video), 64, agent)) == 48  # a shorter video gives all its frames
    crop, bad = path.crops(str(video), [(0, 7), (5, 2)], agent)
    h, w = crop.frames.shape[2:]
    assert len(crop) == 8 and h * w <= 64 * 96 and h % 32 == 0 == w % 32  # 7 s at 1 fps: nearest even is 8
    assert isinstance(bad, CropError)
    assert len(path.crops(str(video), [(0, 7)], _crop(agent, rounding="floor"))[0]) == 6
    # wide enough for both budgets: the processor keeps every frame as the decoder sized it
    assert path.processor_pixels(agent) == (32 * 32, 128 * 96)


def _crop(agent: AgentConfig, **crop) -> AgentConfig:
    return agent.model_copy(update={"crop": agent.crop.model_copy(update=crop)})


@pytest.mark.parametrize(
    ("window", "crop", "count"),
    [
        ((0, 3), {"fps": 2.0}, 6),  # 3 s at 2 fps (at 1 fps: 4)
        ((0, 2), {"min_frames": 6}, 6),  # 2 s at 1 fps, raised to the fewest frames
        ((0, 7), {"max_frames": 4}, 4),  # 8 frames, cut to the most
    ],
)
def test_the_decoder_path_samples_crops_at_the_configured_rate_and_counts(video, window, crop, count):
    agent = _crop(AgentConfig(max_pixels=64 * 96, min_pixels=32 * 32), **crop)
    assert len(agent.frames.crops(str(video), [window], agent)[0]) == count


def test_both_paths_raise_a_small_frame_to_the_smallest_size(video):
    # 128 x 96 = 12,288 px, under the 20,000 px floor: both paths scale it up to at least that
    for name in FRAME_PATHS:
        agent = AgentConfig(frame_path=name, min_pixels=20_000, max_pixels=40_000)
        h, w = agent.frames.crops(str(video), [(0, 2)], agent)[0].frames.shape[2:]
        assert 20_000 <= h * w <= 40_000
    decoder = AgentConfig(overview_min_pixels=20_000, overview_max_pixels=40_000)
    h, w = decoder.frames.overview(str(video), 8, decoder).frames.shape[2:]
    assert 20_000 <= h * w <= 40_000


def test_the_release_path_makes_the_releases_frames_and_leaves_the_processor_alone(tiny_model, video):
    agent = AgentConfig(frame_path="qwen-vl-utils", crop={"max_frames": 16})
    path = agent.frames
    overview = path.overview(str(video), 8, agent)
    h, w = overview.frames.shape[2:]
    assert len(overview) == 8 and h % 28 == 0 == w % 28
    assert len(path.overview(str(video), 64, agent)) == 0  # fewer than 64 frames: qwen-vl-utils sends none
    crop, clamped = path.crops(str(video), [(0, 7), (10, 30)], agent)
    assert len(crop) == 6  # 7 s at 1 fps, rounded down to even as qwen-vl-utils does, whatever crop.rounding
    assert clamped.window == (10.0, 12.0)  # the window clamped to the video
    assert len(path.crops(str(video), [(0, 7)], _crop(agent, max_frames=4))[0]) == 4
    small = agent.model_copy(update={"crop_max_pixels": 9 * 28 * 28})  # 84 x 140 at the default budget
    h, w = path.crops(str(video), [(0, 7)], small)[0].frames.shape[2:]
    assert h * w <= 9 * 28 * 28 and h % 28 == 0 == w % 28
    assert path.processor_pixels(agent) is None
    assert make_encoder(None, agent, tiny_model.processor).images_kwargs == {}


# ---------------------------------------------------------------------------------------------------------
# The report


def _results(agent: dict, preset: str = "release") -> dict:
    from paravt_core.eval import report
    from paravt_core.eval.metrics import benchmark_metrics

    record = {"status": "ok", "final_text": "<answer>B</answer>", "gold": "B", "qtype": "mcq", "score": 1.0,
              "meta": {}, "tool_calls": 0}  # fmt: skip
    config = {"engine": {"kind": "openai"}, "benchmarks": [{"name": "videomme", "limit": None}], "demo_data": "",
              "preset": preset, "agent": {"question_suffix": True, **agent}}  # fmt: skip
    return {"preset": "release", "error_rule": "release", "reader": "release", "prompt_protocol": "release-v1",
            "prompt_checksum": report.release_checksum(), "published_model": "ParaVT-8B", "config": config,
            "protocols": {"agentic": {"videomme": benchmark_metrics("videomme", [record], "release", "release")}}}  # fmt: skip


def test_each_paths_note_reaches_the_report():
    from paravt_core.eval.report import comparability

    assert FRAME_PATHS["decoder"].comparability_note == DECODER_NOTE
    assert FRAME_PATHS["qwen-vl-utils"].comparability_note == ""
    for name, path in FRAME_PATHS.items():
        why = comparability(_results({"frame_path": name}, preset="paravt"), "videomme")
        assert why == (f"not comparable: {path.comparability_note}" if path.comparability_note else "")
        # preset=release brings the release's path whatever the base agent names
        assert comparability(_results({"frame_path": name}), "videomme") == ""
    # a run that recorded no path ran the default; a path this version does not know is named
    assert comparability(_results({}, preset="paravt"), "videomme") == f"not comparable: {DECODER_NOTE}"
    assert frame_paths.comparability_note(None) == DECODER_NOTE
    assert frame_paths.comparability_note("ffmpeg") == (
        "frames: agent.frame_path=ffmpeg, not the release's (qwen-vl-utils)"
    )


# ---------------------------------------------------------------------------------------------------------
# A path added from outside the library: one class and one registration line


@pytest.fixture
def stills(monkeypatch: pytest.MonkeyPatch) -> AgentConfig:
    """An agent config on the stills path. The registration line is ``FRAME_PATHS["stills"] = StillPath()``;
    the config's choices are read from the registry when the config module is imported, so a path registered
    later (here) is set on a validated config as the config would have accepted it."""
    monkeypatch.setitem(FRAME_PATHS, StillPath.name, StillPath())
    return tiny_agent_config().model_copy(update={"frame_path": StillPath.name})


def test_a_registered_path_makes_the_episodes_frames_and_the_encoders_pixels(tiny_model, stills):
    main = [format_tool_call("crop_video", {"start_time": 1, "end_time": 3})
            + format_tool_call("crop_video", {"start_time": 5, "end_time": 2}), "<answer>B</answer>"]  # fmt: skip
    engine = ScriptedEngine(tiny_model.processor, main)
    row = {"video": "nowhere://no-such-video.mp4", "question": "Which shape? A. square B. circle", "id": "r"}
    result = asyncio.run(arun_episode(row, engine, stills))
    assert result.finish_reason == "answer" and result.answer == "B"
    assert result.nframes == 8 and result.overview_timestamps == [float(i) for i in range(8)]
    assert result.overview_size == (32, 64)
    assert [(c.window, c.frames) for c in result.calls] == [((1.0, 3.0), 2), (None, 0)]
    assert result.calls[1].error == "no stills in 5-2"
    assert make_encoder(None, stills, tiny_model.processor).images_kwargs == image_processor_kwargs(
        max_pixels=64 * 64, min_pixels=32 * 32
    )


def test_a_registered_paths_note_reaches_the_report(stills):
    from paravt_core.eval.report import comparability

    why = comparability(_results({"frame_path": "stills"}, preset="paravt"), "videomme")
    assert why == "not comparable: frames: grey stills, not the release's"
