"""The episode loop: parallel dispatch, limits and every bad input ending cleanly with a recorded reason.

Main-agent replies are scripted (tokenized by the real tokenizer); videos, crops, the processor and the
chat template are real. One test runs the real tiny model end to end.
"""

from __future__ import annotations

import asyncio

import pytest

from paravt_core.agent.episode import arun_episode
from paravt_core.agent.parsing import format_tool_call
from paravt_core.engines.base import EngineError, GenerationRequest
from paravt_core.engines.scripted import Reply, RoutedEngine, ScriptedEngine
from paravt_core.engines.transformers_engine import TransformersEngine
from tests.support.agent_support import tiny_agent_config
from tests.support.paths import ROOT

QUESTION = "Which shape appears first? A. square B. circle"


def crop(start, end, **extra) -> str:
    return format_tool_call("crop_video", {"start_time": start, "end_time": end, **extra})


def run(engine, video_path, **cfg):
    row = {"video": str(video_path), "question": QUESTION, "id": "row-1"}
    return asyncio.run(arun_episode(row, engine, tiny_agent_config(**cfg)))


def tool_turn_text(result, turn: int) -> str:
    return next(s.text for s in result.main.segments if s.label == "tool_responses" and s.turn == turn)


def test_parallel_calls_run_as_one_batch_and_come_back_in_call_order(tiny_model, video):
    def report(request: GenerationRequest, i: int) -> str:
        # the sub-agent prompt names its window: echo it so the order of responses is checkable
        text = request.messages[0]["content"][-1]["text"]
        return "Saw " + text.split("segment of a video from ")[1].split(" (")[0]

    main = [crop(0, 2) + crop(3, 5) + crop(6, 8) + crop(9, 11), "</think><answer>B</answer>"]
    engine = ScriptedEngine(tiny_model.processor, main, subagent=report)
    result = run(engine, video)
    assert result.finish_reason == "answer" and result.answer == "B" and result.row_id == "row-1"
    assert len(result.turns) == 2 and [len(t.calls) for t in result.turns] == [4, 0]
    assert [c.window for c in result.calls] == [(0.0, 2.0), (3.0, 5.0), (6.0, 8.0), (9.0, 11.0)]
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


def test_malformed_json_and_unknown_tool_get_error_responses(tiny_model, video):
    main = [
        "<tool_call>{not json}</tool_call>"
        + format_tool_call("zoom_in", {"start_time": 1, "end_time": 2})
        + crop(1, 3),
        "<answer>B</answer>",
    ]
    result = run(ScriptedEngine(tiny_model.processor, main), video)
    assert result.finish_reason == "answer" and len(result.turns) == 2
    bad, unknown, good = result.calls
    assert not bad.parsed and not bad.executed and "not valid JSON" in bad.error
    assert unknown.parsed and not unknown.executed and "unknown tool 'zoom_in'" in unknown.error
    assert unknown.error == "unknown tool 'zoom_in'; the only tool is crop_video."
    assert good.ok and good.window == (1.0, 3.0) and good.report == "A short report."
    text = tool_turn_text(result, 1)
    assert text.count("<tool_response>\nError: ") == 2
    assert result.counts()["calls_rejected"] == 2 and result.counts()["calls_succeeded"] == 1


def test_more_calls_than_allowed(tiny_model, video):
    main = [crop(0, 2) + crop(2, 4) + crop(4, 6), "<answer>B</answer>"]
    engine = ScriptedEngine(tiny_model.processor, main)
    result = run(engine, video, max_parallel=2)
    assert result.finish_reason == "answer" and len(result.turns) == 2
    assert [c.executed for c in result.calls] == [True, True, False]
    assert result.calls[2].error == "at most 2 tool calls are executed per turn; this call was skipped."
    assert engine.batches[1] == ["subagent", "subagent"]
    assert "Error: at most 2 tool calls" in tool_turn_text(result, 1)


def tool_messages(result) -> list[tuple[int, str]]:
    """(image count, text) of each message between the first two assistant turns (crop_frames mode)."""
    messages = result.conversation.messages
    first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    out = []
    for m in messages[first + 1 :]:
        if m["role"] == "assistant":
            break
        parts = m["content"]
        out.append((sum(p["type"] == "image" for p in parts), "".join(p.get("text", "") for p in parts)))
    return out


def block(text: str) -> str:
    return f"<tool_response>\n{text}\n</tool_response>"


CROP_FRAMES = {"tool_mode": "crop_frames", "max_turns": 1}


def test_crop_frames_release_v1_drops_calls_beyond_max_parallel(tiny_model, video):
    """The released driver keeps tcs[:max_parallel]: two responses, no message for the third call; its record
    says it was dropped (and why), and it is not counted as executed."""
    main = [crop(0, 2) + crop(2, 4) + crop(4, 6), "<answer>B</answer>"]
    result = run(ScriptedEngine(tiny_model.processor, main), video, max_parallel=2, prompt_set="release-v1",
                 **CROP_FRAMES)  # fmt: skip
    # 1 fps over [0, 2] and [2, 4]: 2 frames each
    assert tool_messages(result) == [
        (2, block("2 frames from 0.0s to 2.0s.")),
        (2, block("2 frames from 2.0s to 4.0s.")),
    ]
    assert [(c.executed, c.dropped) for c in result.calls] == [(True, False), (True, False), (False, True)]
    assert result.calls[2].error == "at most 2 tool calls are executed per turn; this call was skipped."
    assert result.counts()["calls_executed"] == 2 and result.counts()["calls_rejected"] == 1
    # the cap counts every call the driver read, a body it could not use included: [1, 2] after two calls is
    # dropped like the driver drops it (within the cap the driver would end the sample; we show our error)
    unusable_third = [crop(0, 2) + crop(2, 4) + "<tool_call>[1, 2]</tool_call>", "<answer>B</answer>"]
    result = run(ScriptedEngine(tiny_model.processor, unusable_third), video, max_parallel=2, prompt_set="release-v1",
                 **CROP_FRAMES)  # fmt: skip
    assert len(tool_messages(result)) == 2 and [c.dropped for c in result.calls] == [False, False, True]
    # the rules are crop_frames' only: the sub-agent mode under release-v1 still answers the third call
    engine = ScriptedEngine(tiny_model.processor, main, subagent="ok")
    result = run(engine, video, max_parallel=2, prompt_set="release-v1", max_turns=1)
    assert tool_turn_text(result, 1).count("<tool_response>") == 3 and not result.calls[2].dropped
    assert "Error: at most 2 tool calls" in tool_turn_text(result, 1)


def test_crop_frames_release_v1_reads_names_and_times_as_the_released_driver(tiny_model, video):
    """The released loop never checks the name, reads an unreadable time as 0.0 and a missing end as start + 10
    (utils.parse_time_val / eval_one at cf55249)."""
    main = [
        format_tool_call("zoom_in", {"start_time": 1, "end_time": 3})
        + format_tool_call("crop_video", {"start_time": "00:02"})  # end: 2 + 10 = 12
        + format_tool_call("crop_video", {"start_time": "soon", "end_time": "0:02"})  # start 0.0
        + format_tool_call("crop_video", {"start_time": 5, "end_time": "later"}),  # [5, 0]: no frames
        "<answer>B</answer>",
    ]
    result = run(ScriptedEngine(tiny_model.processor, main), video, prompt_set="release-v1", **CROP_FRAMES)
    assert tool_messages(result) == [
        (2, block("2 frames from 1.0s to 3.0s.")),
        (4, block("4 frames from 2.0s to 12.0s.")),  # 10 s at 1 fps, capped at crop.max_frames=4
        (2, block("2 frames from 0.0s to 2.0s.")),
        (0, block("[Error cropping 5.0s-0.0s]")),
    ]
    assert [c.window for c in result.calls] == [(1.0, 3.0), (2.0, 12.0), (0.0, 2.0), None]
    assert result.calls[0].name == "zoom_in" and result.calls[3].error


def test_crop_frames_release_v1_ignores_blocks_the_released_reader_cannot_read(tiny_model, video):
    """The driver's parse_tool_calls: an undecodable <tool_call> gets no response (and a turn with nothing else
    is final), a call inside a closed think block is still executed. The records count the ignored block."""
    main = [
        "<think>first <tool_call>" + '{"name": "crop_video", "arguments": {"start_time": 0, "end_time": 2}}'
        "</tool_call></think><tool_call>{not json}</tool_call>" + crop(4, 6),
        "<tool_call>{still not json}</tool_call>",
    ]
    result = run(ScriptedEngine(tiny_model.processor, main), video, prompt_set="release-v1", **CROP_FRAMES)
    assert tool_messages(result) == [
        (2, block("2 frames from 0.0s to 2.0s.")),
        (2, block("2 frames from 4.0s to 6.0s.")),
    ]
    assert [(c.executed, c.dropped, c.parsed) for c in result.calls] == [
        (True, False, True), (False, True, False), (True, False, True), (False, True, False)]  # fmt: skip
    assert result.calls[1].error.startswith("the <tool_call> body is not valid JSON")
    # the second turn holds only an unreadable block: for the driver it is the final reply
    assert (result.finish_reason, len(result.turns)) == ("no_answer", 2)
    assert result.to_dict()["calls_total"] == 4 and result.to_dict()["calls_parsed"] == 2


def test_crop_frames_paravt_v1_responses_unchanged(tiny_model, video):
    """paravt-v1 in crop_frames mode keeps its own rules: the note names the window served (clamped to the
    video), a failed crop shows "Error: " + the crop's reason, a call beyond max_parallel gets an error block,
    another tool's name and an unreadable time are errors."""
    main = [crop(8, 20) + crop(30, 40) + crop(0, 2), "<answer>B</answer>"]
    result = run(ScriptedEngine(tiny_model.processor, main), video, max_parallel=2, **CROP_FRAMES)
    reason = "start_time (30) is at or after the end of the video (duration 12.0 seconds)"
    assert tool_messages(result) == [
        (4, block("4 frames from 8.0s to 12.0s.")),
        (0, block("Error: " + reason)),
        (0, block("Error: at most 2 tool calls are executed per turn; this call was skipped.")),
    ]
    assert [c.dropped for c in result.calls] == [False, False, False] and result.calls[1].error == reason
    main = [
        format_tool_call("zoom_in", {"start_time": 1, "end_time": 3})
        + format_tool_call("crop_video", {"start_time": 2}),
        "<answer>B</answer>",
    ]
    result = run(ScriptedEngine(tiny_model.processor, main), video, **CROP_FRAMES)
    assert tool_messages(result) == [
        (0, block("Error: unknown tool 'zoom_in'; the only tool is crop_video.")),
        (0, block("Error: end_time is missing")),
    ]
    # an undecodable block gets its error, a call inside a closed think block is reasoning (not executed)
    main = ["<think><tool_call>" + '{"name": "crop_video", "arguments": {"start_time": 0, "end_time": 2}}'
            "</tool_call></think><tool_call>{not json}</tool_call>", "<answer>B</answer>"]  # fmt: skip
    result = run(ScriptedEngine(tiny_model.processor, main), video, **CROP_FRAMES)
    assert tool_messages(result) == [
        (0, block("Error: the <tool_call> body is not valid JSON (Expecting property name enclosed in double "
                  "quotes: line 1 column 2 (char 1))"))]  # fmt: skip


def test_tool_calls_in_the_last_allowed_turn(tiny_model, video):
    engine = ScriptedEngine(tiny_model.processor, [crop(0, 2), crop(2, 4) + crop(4, 6)])
    result = run(engine, video, max_turns=1)
    assert result.finish_reason == "tool_call_in_last_turn"
    assert result.tool_rounds == 1 and len(result.turns) == 2
    assert [c.executed for c in result.turns[1].calls] == [False, False]
    assert all(c.parsed and c.error == "no tool rounds left" for c in result.turns[1].calls)
    # no tool round at all allowed
    result = run(ScriptedEngine(tiny_model.processor, [crop(0, 2)]), video, max_turns=0)
    assert result.finish_reason == "tool_call_in_last_turn" and result.tool_rounds == 0


def test_forced_answer_after_the_last_round_has_its_own_token_budget(tiny_model, video):
    engine = ScriptedEngine(tiny_model.processor, [crop(0, 2), "B " * 100])
    result = run(engine, video, max_turns=1, forced_answer="mcq")
    assert result.finish_reason == "max_tokens"  # the forced reply is capped at 64 tokens
    assert engine.requests[-1].sampling.max_new_tokens == 64  # docs/method.md §4.2
    assert result.turns[-1].tokens == 64 and len(result.turns) == 2
    forced = (
        "Based on the video and cropped segments above, answer with ONLY the letter."  # docs/method.md §4.2
    )
    assert "<|im_start|>user\n" + forced + "<|im_end|>\n<|im_start|>assistant\n" in result.main.text


@pytest.mark.parametrize("reply", ["", "   \n"])
def test_empty_generation(tiny_model, video, reply):
    result = run(ScriptedEngine(tiny_model.processor, [reply]), video)
    assert result.finish_reason == "empty_generation" and result.turns[0].text == reply


def test_generation_cut_by_the_token_limit(tiny_model, video):
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


def test_engine_error_and_timeout(tiny_model, video):
    result = run(ScriptedEngine(tiny_model.processor, [EngineError("server went away")]), video)
    assert (result.finish_reason, result.error, result.turns) == (
        "engine_error",
        "EngineError: server went away",
        [],
    )
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
    assert call.executed and not call.ok and call.subagent is None
    assert call.error == "the segment could not be analyzed (EngineError: oom)."
    assert result.counts()["calls_failed"] == 1


def test_video_that_fails_to_decode(tiny_model, tmp_path, video):
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


def test_context_overflow(tiny_model, video):
    result = run(ScriptedEngine(tiny_model.processor, ["<answer>B</answer>"]), video, max_context_tokens=256)
    # the first prompt alone (system prompt + 8 frames x 4 tokens + question) is longer than 256 tokens
    assert result.finish_reason == "context_overflow" and result.turns == [] and len(result.main) > 256


def test_real_tiny_model_subagents_and_sequential_dispatch_agree(tiny_model, video):
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


def test_real_tiny_model_episode_ends_cleanly(tiny_model, video):
    """Smoke run of the random tiny model, checked against an independent greedy decode of its prompt."""
    import torch

    engine = TransformersEngine(tiny_model.model, tiny_model.processor)
    result = run(engine, video, max_new_tokens=16, think_prefix=True)
    trace = result.main
    gen = [s for s in trace.segments if s.kind == "generated"]
    prompt = trace.segments[: trace.segments.index(gen[0])]
    ids = torch.tensor([[t for s in prompt for t in s.token_ids]])
    with torch.no_grad():
        out = tiny_model.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            # Qwen3-VL marks image tokens with type 1 (its processor's mm_token_type_ids)
            mm_token_type_ids=(ids == tiny_model.tokenizer.convert_tokens_to_ids("<|image_pad|>")).long(),
            pixel_values=trace.pixel_values,
            image_grid_thw=trace.image_grid_thw,
            max_new_tokens=16,
            do_sample=False,
        )
    expected = out[0, ids.shape[1] :].tolist()
    assert gen[0].token_ids == expected
    eos = tiny_model.tokenizer.convert_tokens_to_ids("<|im_end|>")
    text = "<think>\n" + tiny_model.tokenizer.decode([t for t in expected if t != eos])
    # the random model writes no call and no answer: one turn, ended by the limit (inside the open <think>)
    # or by eos (no answer)
    assert "<tool_call>" not in text and "<answer>" not in text
    assert len(result.turns) == 1 and result.turns[0].text == text
    assert result.finish_reason == ("no_answer" if expected[-1] == eos else "max_tokens_in_tag")
    assert sum(trace.loss_mask) == len(expected)
    assert result.to_dict()["main_trace"]["images"] == 8


def test_subagent_knobs_see_question_and_train(tiny_model, video):
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


def test_shared_overview_and_per_row_frame_count(tiny_model, video):
    from paravt_core.video import api as video_api
    from tests.support.agent_support import MAX_PIXELS, MIN_PIXELS

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


def test_subagent_temperature_follows_the_main_agent_and_seeds_are_distinct(tiny_model, video):
    main = [crop(0, 2) + crop(3, 5) + crop(6, 8), "<answer>B</answer>"]
    # eval protocol: temperature 0 -> greedy sub-agents too (docs/method.md §4.4.5)
    engine = ScriptedEngine(tiny_model.processor, list(main))
    run(engine, video, temperature=0.0, subagent={"temperature": None})
    assert [r.sampling.temperature for r in engine.requests] == [0.0] * 5
    # sampling with a seed: main turns get seed + turn, the three sub-agents of turn 0 seeds 1000 + k
    engine = ScriptedEngine(tiny_model.processor, list(main))
    result = run(engine, video, temperature=0.7, seed=7, subagent={"temperature": None})
    assert [(r.tag, r.sampling.temperature, r.sampling.seed) for r in engine.requests] == [
        ("main", 0.7, 7),
        ("subagent", 0.7, 1007),
        ("subagent", 0.7, 1008),
        ("subagent", 0.7, 1009),
        ("main", 0.7, 8),
    ]
    assert result.finish_reason == "answer"
    # an explicit sub-agent temperature wins
    engine = ScriptedEngine(tiny_model.processor, list(main))
    run(engine, video, temperature=0.0, subagent={"temperature": 0.3})
    assert [r.sampling.temperature for r in engine.requests if r.tag == "subagent"] == [0.3] * 3


def test_a_user_prompt_set_changes_the_texts_not_the_code(tiny_model, video, tmp_path):
    import yaml

    from paravt_core.agent.prompts import load_prompt_set

    data = yaml.safe_load(load_prompt_set("paravt-v1").model_dump_json())
    data["name"] = "released-x"
    data["subagent"]["prompt"] = "Segment {start}-{end} ({duration:.0f} s).{question_block} Describe it."
    data["tool_response"]["open"] = "<tool_response>"
    data["forced_answer"]["mcq"]["text"] = "Letter only."
    path = tmp_path / "released-x.yaml"
    path.write_text(yaml.safe_dump(data))
    engine = ScriptedEngine(tiny_model.processor, [crop(65, 70), "<answer>B</answer>"], subagent="ok")
    long_video = video  # 12 s: the call fails, the error still uses the set's block opening
    result = run(engine, long_video, prompt_set=str(path), max_turns=1, forced_answer="mcq")
    assert result.prompt_set == str(path)
    assert result.prompt_set_checksum == load_prompt_set(str(path)).checksum != load_prompt_set().checksum
    assert (
        "<tool_response>Error: " in result.main.text
        and "<|im_start|>user\nLetter only.<|im_end|>" in result.main.text
    )
    engine = ScriptedEngine(tiny_model.processor, [crop(2, 5), "<answer>B</answer>"], subagent="ok")
    run(engine, video, prompt_set=str(path))
    sub = next(r for r in engine.requests if r.tag == "subagent")
    assert sub.messages[0]["content"][-1]["text"] == "Segment 00:02-00:05 (3 s). Describe it."


def test_prompt_set_checksum_is_recorded_and_pinned(tiny_model, video, tmp_path):
    import hashlib
    import json

    import yaml

    from paravt_core.agent.prompts import load_prompt_set, packaged_prompt_sets

    cfg = tiny_agent_config()
    assert cfg.prompt_set_checksum is None
    result = asyncio.run(
        arun_episode(
            {"video": str(video), "question": "q"},
            ScriptedEngine(tiny_model.processor, ["<answer>B</answer>"]),
            cfg,
        )
    )
    # the documented checksum: SHA-256 of the set's fields as canonical JSON, worked out from the file here
    packaged = ROOT / "paravt_core" / "agent" / "prompt_sets" / "paravt-v1.yaml"
    fields = yaml.safe_load(packaged.read_text())
    canonical = json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    expected = "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    assert cfg.prompt_set_checksum == result.prompt_set_checksum == expected
    assert result.to_dict()["prompt_set_checksum"] == expected
    # comments and layout do not change it; a changed text does
    relaid = tmp_path / "relaid.yaml"
    relaid.write_text(json.dumps(fields, indent=1))
    assert load_prompt_set(str(relaid)).checksum == expected
    # a config pinning another checksum refuses the set
    with pytest.raises(ValueError, match="config pins sha256:0000"):
        run(ScriptedEngine(tiny_model.processor, []), video, prompt_set_checksum="sha256:" + "0" * 64)
    # bad sets fail at load time, naming the field
    fields["subagent"]["prompt"] = "from {begin}"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(fields))
    with pytest.raises(ValueError, match=r"subagent\.prompt: bad placeholder.*begin"):
        load_prompt_set(str(bad))
    with pytest.raises(ValueError, match="unknown prompt set 'paravt-v9'; packaged: paravt-v1"):
        load_prompt_set("paravt-v9")
    # shipped in the wheel: every packaged set matches the package-data glob of pyproject.toml
    import fnmatch
    import tomllib

    pyproject = tomllib.loads((packaged.parents[3] / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["paravt_core.agent"]
    assert packaged_prompt_sets() == ["paravt-v1", "release-v1"]
    assert any(fnmatch.fnmatch("prompt_sets/paravt-v1.yaml", g) for g in globs)


def test_with_no_tool_round_the_forced_answer_budget_is_max_new_tokens(tiny_model, video) -> None:
    """``max_turns = 0``: the first turn is the last, but no tool round preceded it, so no forced-answer
    instruction was shown and the turn keeps ``max_new_tokens`` (100), not the forced answer's 64."""
    engine = ScriptedEngine(tiny_model.processor, ["<answer>B</answer>"])
    cfg = tiny_agent_config(max_turns=0, forced_answer="mcq", max_new_tokens=100)
    result = asyncio.run(arun_episode({"video": str(video), "question": "q"}, engine, cfg))
    assert result.finish_reason == "answer"
    assert [r.sampling.max_new_tokens for r in engine.requests] == [100]
    assert "ONLY the letter" not in result.main.text


@pytest.mark.parametrize(("delta", "truncated"), [(-1, True), (0, False), (1, False)])
def test_a_report_of_exactly_its_token_limit_is_not_truncated(tiny_model, video, delta, truncated) -> None:
    """The report has n tokens; limit n - 1 cuts it (mark added), limits n and n + 1 keep it whole."""
    report = "first second third fourth"
    n = len(tiny_model.tokenizer(report, add_special_tokens=False)["input_ids"])
    engine = ScriptedEngine(
        tiny_model.processor, [format_tool_call("crop_video", {"start_time": 0, "end_time": 2}), "<answer>x</answer>"],
        subagent=report,
    )  # fmt: skip
    cfg = tiny_agent_config(subagent={"max_report_tokens": n + delta, "max_new_tokens": 64})
    result = asyncio.run(arun_episode({"video": str(video), "question": "q"}, engine, cfg))
    (call,) = result.calls
    assert call.truncated is truncated
    assert call.report_tokens == min(n, n + delta)
    assert call.report.endswith(" [truncated]") is truncated
    if not truncated:
        assert call.report == report
