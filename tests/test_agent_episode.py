"""The episode loop: parallel dispatch, limits and every bad input ending cleanly with a recorded reason.

Main-agent replies are scripted (tokenized by the real tokenizer); videos, crops, the processor and the
chat template are real. One test runs the real tiny model end to end.
"""

from __future__ import annotations

import asyncio

import pytest

from paravt_core.agent.episode import FINISH_REASONS, arun_episode
from paravt_core.agent.parsing import format_tool_call
from paravt_core.engines.base import EngineError, GenerationRequest
from paravt_core.engines.scripted import Reply, RoutedEngine, ScriptedEngine
from paravt_core.engines.transformers_engine import TransformersEngine
from tests.agent_support import tiny_agent_config, video  # noqa: F401

QUESTION = "Which shape appears first? A. square B. circle"


def crop(start, end, **extra) -> str:
    return format_tool_call("crop_video", {"start_time": start, "end_time": end, **extra})


def run(engine, video_path, **cfg):
    row = {"video": str(video_path), "question": QUESTION, "id": "row-1"}
    return asyncio.run(arun_episode(row, engine, tiny_agent_config(**cfg)))


def tool_turn_text(result, turn: int) -> str:
    return next(s.text for s in result.main.segments if s.label == "tool_responses" and s.turn == turn)


def test_parallel_calls_run_as_one_batch_and_come_back_in_call_order(tiny_model, video):  # noqa: F811
    def report(request: GenerationRequest, i: int) -> str:
        # the sub-agent prompt names its window: echo it so the order of responses is checkable
        text = request.messages[0]["content"][-1]["text"]
        return "Saw " + text.split("segment of a video from ")[1].split(" (")[0]

    main = [crop(0, 2) + crop(3, 5) + crop(6, 8) + crop(9, 11), "</think><answer>B</answer>"]
    engine = ScriptedEngine(tiny_model.processor, main, subagent=report)
    result = run(engine, video)
    assert result.finish_reason == "answer" and result.answer == "B" and result.row_id == "row-1"
    assert engine.batches == [["main"], ["subagent"] * 4, ["main"]]
    assert [c.report for c in result.calls] == [
        "Saw 00:00 to 00:02",
        "Saw 00:03 to 00:05",
        "Saw 00:06 to 00:08",
        "Saw 00:09 to 00:11",
    ]
    text = tool_turn_text(result, 1)
    positions = [text.index(f"Saw 00:0{s}") for s in (0, 3, 6)] + [text.index("Saw 00:09")]
    assert positions == sorted(positions) and text.count("<tool_response>") == 4
    assert result.counts() == {
        "calls_total": 4,
        "calls_parsed": 4,
        "calls_executed": 4,
        "calls_succeeded": 4,
        "calls_failed": 0,
        "calls_rejected": 0,
    }
    assert result.tool_rounds == 1 and all(c.latency_s > 0 for c in result.calls)


def test_malformed_json_and_unknown_tool_get_error_responses(tiny_model, video):  # noqa: F811
    main = [
        "<tool_call>{not json}</tool_call>"
        + format_tool_call("zoom_in", {"start_time": 1, "end_time": 2})
        + crop(1, 3),
        "<answer>B</answer>",
    ]
    result = run(ScriptedEngine(tiny_model.processor, main), video)
    assert result.finish_reason == "answer"
    bad, unknown, good = result.calls
    assert not bad.parsed and not bad.executed and "not valid JSON" in bad.error
    assert unknown.parsed and not unknown.executed and "unknown tool 'zoom_in'" in unknown.error
    assert good.ok
    text = tool_turn_text(result, 1)
    assert text.count("<tool_response>\nError: ") == 2
    assert result.counts()["calls_rejected"] == 2 and result.counts()["calls_succeeded"] == 1


def test_more_calls_than_allowed(tiny_model, video):  # noqa: F811
    main = [crop(0, 2) + crop(2, 4) + crop(4, 6), "<answer>B</answer>"]
    engine = ScriptedEngine(tiny_model.processor, main)
    result = run(engine, video, max_parallel=2)
    assert result.finish_reason == "answer"
    assert [c.executed for c in result.calls] == [True, True, False]
    assert result.calls[2].error == "at most 2 tool calls are executed per turn; this call was skipped."
    assert engine.batches[1] == ["subagent", "subagent"]
    assert "Error: at most 2 tool calls" in tool_turn_text(result, 1)


def test_tool_calls_in_the_last_allowed_turn(tiny_model, video):  # noqa: F811
    engine = ScriptedEngine(tiny_model.processor, [crop(0, 2), crop(2, 4) + crop(4, 6)])
    result = run(engine, video, max_turns=1)
    assert result.finish_reason == "tool_call_in_last_turn"
    assert result.tool_rounds == 1 and len(result.turns) == 2
    assert [c.executed for c in result.turns[1].calls] == [False, False]
    assert all(c.parsed and c.error == "no tool rounds left" for c in result.turns[1].calls)
    # no tool round at all allowed
    result = run(ScriptedEngine(tiny_model.processor, [crop(0, 2)]), video, max_turns=0)
    assert result.finish_reason == "tool_call_in_last_turn" and result.tool_rounds == 0


def test_forced_answer_after_the_last_round_has_its_own_token_budget(tiny_model, video):  # noqa: F811
    engine = ScriptedEngine(tiny_model.processor, [crop(0, 2), "B " * 100])
    result = run(engine, video, max_turns=1, forced_answer="mcq")
    assert result.finish_reason == "max_tokens"  # the forced reply is capped at 64 tokens
    assert engine.requests[-1].sampling.max_new_tokens == 64  # SPEC §4.2
    assert result.turns[-1].tokens == 64 and len(result.turns) == 2
    forced = "Based on the video and cropped segments above, answer with ONLY the letter."  # SPEC §4.2
    assert "<|im_start|>user\n" + forced + "<|im_end|>\n<|im_start|>assistant\n" in result.main.text


@pytest.mark.parametrize("reply", ["", "   \n"])
def test_empty_generation(tiny_model, video, reply):  # noqa: F811
    result = run(ScriptedEngine(tiny_model.processor, [reply]), video)
    assert result.finish_reason == "empty_generation" and result.turns[0].text == reply


def test_generation_cut_by_the_token_limit(tiny_model, video):  # noqa: F811
    cut_in_answer = Reply("<think>the circle</think><answer>The circ", finish="length")
    result = run(ScriptedEngine(tiny_model.processor, [cut_in_answer]), video)
    assert result.finish_reason == "max_tokens_in_tag" and result.answer is None
    cut_in_call = Reply(crop(0, 2) + '<tool_call>{"name": "crop_video", "argu', finish="length")
    result = run(ScriptedEngine(tiny_model.processor, [cut_in_call]), video)
    assert result.finish_reason == "max_tokens_in_tag"
    assert [c.executed for c in result.calls] == [False, False]  # a cut turn runs nothing
    # cut by the request's own limit, outside any tag
    result = run(ScriptedEngine(tiny_model.processor, ["word " * 50]), video, max_new_tokens=10)
    assert result.finish_reason == "max_tokens" and result.turns[0].tokens == 10


def test_engine_error_and_timeout(tiny_model, video):  # noqa: F811
    result = run(ScriptedEngine(tiny_model.processor, [EngineError("server went away")]), video)
    assert result.finish_reason == "engine_error" and "server went away" in result.error
    slow = Reply("<answer>B</answer>", delay_s=5.0)
    result = run(ScriptedEngine(tiny_model.processor, [slow]), video, engine_timeout_s=0.2)
    assert result.finish_reason == "engine_timeout" and result.turns == []
    # a failing sub-agent batch fails its calls; the episode goes on
    engine = ScriptedEngine(
        tiny_model.processor, [crop(0, 2), "<answer>B</answer>"], subagent=EngineError("oom")
    )
    result = run(engine, video)
    assert result.finish_reason == "answer"
    (call,) = result.calls
    assert call.executed and not call.ok and "oom" in call.error and call.subagent is None
    assert result.counts()["calls_failed"] == 1


def test_video_that_fails_to_decode(tiny_model, tmp_path, video):  # noqa: F811
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 8)
    engine = ScriptedEngine(tiny_model.processor, ["<answer>B</answer>"])
    result = run(engine, broken)
    assert result.finish_reason == "video_error" and result.error and engine.batches == []
    result = run(ScriptedEngine(tiny_model.processor, []), tmp_path / "missing.mp4")
    assert result.finish_reason == "video_error"
    # bad windows are tool errors, not episode errors
    main = [crop(30, 40) + crop(5, 2) + crop("soon", 3) + crop(1, 2), "<answer>B</answer>"]
    result = run(ScriptedEngine(tiny_model.processor, main), video)
    assert result.finish_reason == "answer"
    assert [c.ok for c in result.calls] == [False, False, False, True]
    assert all(c.executed for c in result.calls) and result.counts()["calls_failed"] == 3


def test_context_overflow(tiny_model, video):  # noqa: F811
    result = run(ScriptedEngine(tiny_model.processor, ["<answer>B</answer>"]), video, max_context_tokens=256)
    assert result.finish_reason == "context_overflow"


def test_real_tiny_model_subagents_and_sequential_dispatch_agree(tiny_model, video):  # noqa: F811
    real = TransformersEngine(tiny_model.model, tiny_model.processor)
    main = [crop(0, 3) + crop(4, 7) + crop(8, 11), "<answer>B</answer>"]
    outs = {}
    for dispatch in ("batched", "sequential"):
        engine = RoutedEngine(ScriptedEngine(tiny_model.processor, list(main)), real)
        result = run(engine, video, dispatch=dispatch)
        assert result.finish_reason == "answer"
        assert engine.subagent_batches == ([3] if dispatch == "batched" else [1, 1, 1])
        outs[dispatch] = [c.subagent.generated_text() for c in result.calls]
        for call in result.calls:
            sub = call.subagent
            assert len(sub.segments) == 2 and len(sub.segments[1]) >= 1
            assert all(lp <= 0 for lp in sub.segments[1].logprobs)
    assert outs["batched"] == outs["sequential"]  # greedy: batching does not change what sub-agents write


def test_real_tiny_model_episode_ends_cleanly(tiny_model, video):  # noqa: F811
    engine = TransformersEngine(tiny_model.model, tiny_model.processor)
    result = run(engine, video, max_new_tokens=16, think_prefix=True)
    assert result.finish_reason in FINISH_REASONS
    trace = result.main
    gen = [s for s in trace.segments if s.kind == "generated"]
    assert len(gen) == len(result.turns) >= 1
    assert sum(trace.loss_mask) == sum(len(s) for s in gen)
    assert all(lp <= 0 for s in gen for lp in s.logprobs)
    assert result.to_dict()["main_trace"]["images"] == 8


def test_subagent_knobs_see_question_and_train(tiny_model, video):  # noqa: F811
    main = [crop(0, 2), "<answer>B</answer>"]
    engine = ScriptedEngine(tiny_model.processor, list(main))
    result = run(engine, video, subagent={"see_question": True, "train": True})
    sub_request = next(r for r in engine.requests if r.tag == "subagent")
    prompt_text = sub_request.messages[0]["content"][-1]["text"]
    assert QUESTION in prompt_text and "The video path" not in prompt_text  # the question, without suffix
    (sub,) = result.subagent_traces
    assert sum(sub.loss_mask) == len(sub.segments[-1]) > 0  # its generated tokens are trained
    engine = ScriptedEngine(tiny_model.processor, list(main))
    result = run(engine, video)  # defaults: as released
    sub_request = next(r for r in engine.requests if r.tag == "subagent")
    assert QUESTION not in sub_request.messages[0]["content"][-1]["text"]
    assert sum(result.subagent_traces[0].loss_mask) == 0


def test_shared_overview_and_per_row_frame_count(tiny_model, video):  # noqa: F811
    from paravt_core.video import api as video_api
    from tests.agent_support import MAX_PIXELS, MIN_PIXELS

    cfg = tiny_agent_config()
    row = {"video": str(video), "question": QUESTION, "nframes": 4}
    result = asyncio.run(arun_episode(row, ScriptedEngine(tiny_model.processor, ["<answer>B</answer>"]), cfg))
    # 4 targets uniform over [0, 11.75] (last frame at 4 fps): 0, 3.92, 7.83, 11.75 -> frames shown then
    assert result.nframes == 4 and result.overview_timestamps == [0.0, 3.75, 7.75, 11.75]
    shared = video_api.overview(str(video), 3, max_pixels=MAX_PIXELS, min_pixels=MIN_PIXELS)
    engine = ScriptedEngine(tiny_model.processor, ["<answer>B</answer>"])
    result = asyncio.run(
        arun_episode({"video": str(video), "question": QUESTION}, engine, cfg, overview=shared)
    )
    assert result.nframes == 3 and len(result.main.images) == 3
    # the very frames passed in (views of the shared tensor), not a second decode
    assert [im.data_ptr() for im in result.main.images] == [f.data_ptr() for f in shared.frames]
