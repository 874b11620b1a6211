"""One episode's failure never takes its group down.

Main-agent replies are scripted (real tokenizer), videos, crops and the processor are real. The overflowing
times go through the real path (JSON tool call -> ``run_crops`` -> ``parse_time``); the unexpected
exception is injected into ``run_crops`` for one row's video only (a fault, not a stub of the work).
"""

from __future__ import annotations

import asyncio
import shutil

from paravt_core.agent.episode import FINISH_REASONS, arun_episodes
from paravt_core.agent.parsing import format_tool_call
from paravt_core.engines.scripted import ScriptedEngine
from paravt_core.video import api as video_api
from tests.support.agent_support import MAX_PIXELS, MIN_PIXELS, tiny_agent_config

QUESTION = "Which shape appears first? A. square B. circle"
ANSWER = "</think><answer>B</answer>"


def call(start, end) -> str:
    return format_tool_call("crop_video", {"start_time": start, "end_time": end})


def rows(*videos) -> list[dict]:
    return [{"video": str(v), "question": QUESTION, "id": f"row-{i}"} for i, v in enumerate(videos)]


def shared_overview(path):
    # One overview for the group (as RL does): every episode reaches its first generation in order, so
    # the i-th first-turn reply goes to episode i.
    return video_api.overview(path, 8, max_pixels=MAX_PIXELS, min_pixels=MIN_PIXELS)


def test_overflowing_times_are_tool_errors_and_the_group_survives(tiny_model, video):
    # Each episode of the group calls with a 310-digit start (json gives a Python int whose float()
    # overflows: this escaped and lost the whole group before), a 5000-digit end (json refuses to read
    # it: a rejected call) and a normal window. Identical replies keep the script independent of which
    # episode asks first.
    huge = '{"name": "crop_video", "arguments": {"start_time": 1, "end_time": ' + "9" * 5000 + "}}"
    reply = call(10**309, 5) + f"<tool_call>\n{huge}\n</tool_call>" + call(2, 4)
    engine = ScriptedEngine(tiny_model.processor, [reply] * 3 + [ANSWER] * 3)
    results = asyncio.run(
        arun_episodes(
            rows(video, video, video),
            engine,
            tiny_agent_config(max_new_tokens=8192),  # room for the 5000 digits
            overview=shared_overview(video),
        )
    )
    assert [r.finish_reason for r in results] == ["answer", "answer", "answer"]
    assert [r.answer for r in results] == ["B", "B", "B"]
    for result in results:
        overflow, rejected, good = result.calls
        assert overflow.executed and not overflow.ok and "too large" in overflow.error
        assert not rejected.parsed and not rejected.executed
        assert good.ok and good.window == (2.0, 4.0)


def test_unexpected_exception_ends_only_its_own_episode(tiny_model, video, tmp_path, monkeypatch):
    faulty = tmp_path / "faulty.mp4"
    shutil.copyfile(video, faulty)
    real = video_api.run_crops

    def run_crops(uri, *args, **kwargs):
        if str(uri).endswith("faulty.mp4"):
            raise RuntimeError("injected fault")
        return real(uri, *args, **kwargs)

    monkeypatch.setattr(video_api, "run_crops", run_crops)
    engine = ScriptedEngine(tiny_model.processor, [call(0, 2)] * 3 + [ANSWER] * 2)
    results = asyncio.run(
        arun_episodes(
            rows(video, faulty, video), engine, tiny_agent_config(), overview=shared_overview(video)
        )
    )
    assert [r.finish_reason for r in results] == ["answer", "internal_error", "answer"]
    assert results[1].error == "RuntimeError: injected fault"
    assert [r.answer for r in (results[0], results[2])] == ["B", "B"]
    assert [len(r.turns) for r in results] == [2, 1, 2]  # the faulty one stopped in its first tool round
    assert "internal_error" in FINISH_REASONS
