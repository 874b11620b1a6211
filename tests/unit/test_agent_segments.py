"""Exact token accounting: the episode's append-only segments equal the chat template's rendering.

The conversation the model should have seen is written out here from the scenario (system prompt, overview
frames with their labels, the scripted assistant texts, the reports, the errors), rendered with the tiny
model's real chat template and tokenized with its real processor. At every turn boundary — before each
generation and after it — the episode's concatenated segment tokens must equal that tokenization, multi-call
turns, a malformed call, the forced answer and image-bearing tool responses included.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from paravt_core.agent.conversation import Conversation
from paravt_core.agent.episode import arun_episode
from paravt_core.agent.parsing import format_tool_call, parse_tool_calls
from paravt_core.agent.prompts import load_prompt_set
from paravt_core.agent.segments import SegmentEncoder, SegmentKind
from paravt_core.engines.base import Completion
from paravt_core.engines.scripted import ScriptedEngine
from paravt_core.video import api as video_api
from tests.support.agent_support import MAX_PIXELS, MIN_PIXELS, tiny_agent_config

SIZE = {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS}
PS = load_prompt_set("paravt-v1")


def _images(messages: list[dict]) -> list[torch.Tensor]:
    return [
        part["image"]
        for m in messages
        if isinstance(m["content"], list)
        for part in m["content"]
        if part["type"] == "image"
    ]


def _expected_ids(processor, messages: list[dict], *, open_turn: bool, prefix: str = "") -> list[int]:
    """Real template + processor: ``open_turn`` ends with the next assistant header (+ prefix); otherwise
    the conversation ends with the last assistant turn's <|im_end|> (what the model generated last)."""
    text = processor.apply_chat_template(messages, add_generation_prompt=open_turn, tokenize=False)
    if open_turn:
        text += prefix
    else:
        assert text.endswith("<|im_end|>\n")
        text = text[:-1]
    images = _images(messages)
    out = processor(text=[text], images=images or None, return_tensors="pt", images_kwargs={"size": SIZE})
    return out["input_ids"][0].tolist()


def _boundaries(trace) -> tuple[list[int], list[int]]:
    """Token positions right before and right after every generated segment."""
    before, after, pos = [], [], 0
    for seg in trace.segments:
        if seg.kind == SegmentKind.GENERATED:
            before.append(pos)
            after.append(pos + len(seg))
        pos += len(seg)
    return before, after


def _overview_parts(path, k: int) -> list[dict]:
    frames = video_api.overview(str(path), k, max_pixels=MAX_PIXELS, min_pixels=MIN_PIXELS)
    parts: list[dict] = []
    for t, frame in zip(frames.timestamps, frames.frames, strict=True):
        parts += [{"type": "text", "text": f"<{t:.1f} seconds>"}, {"type": "image", "image": frame}]
    return parts


def test_subagent_episode_segments_match_template(tiny_model, video):
    processor = tiny_model.processor
    calls0 = (
        "Two segments might matter.</think>\n"
        + format_tool_call("crop_video", {"video_path": "clip.mp4", "start_time": 1, "end_time": 4})
        + '\n<tool_call>\n{"name": "crop_video", "arguments": {"start_time": 2,,}}\n</tool_call>\n'
        + format_tool_call("crop_video", {"start": "00:07", "end": 9.5})
    )
    calls1 = (
        "One more look.</think>\n"
        + format_tool_call("crop_video", {"start_time": 5, "end_time": 6})
        + "\n"
        + format_tool_call("crop_video", {"start_time": 0, "end_time": 2})
    )
    final = "The red circle came first.</think><answer>B</answer>"
    reports = ["Report zero: a red circle.", "Report one: a blue square.", "Report two.", "Report three."]
    engine = ScriptedEngine(processor, [calls0, calls1, final], subagent=lambda req, i: reports[i])
    cfg = tiny_agent_config(think_prefix=True, max_turns=2, forced_answer="mcq")
    row = {"video": str(video), "question": "Which shape appears first? A. square B. circle"}
    result = asyncio.run(arun_episode(row, engine, cfg))
    assert result.finish_reason == "answer" and result.answer == "B"
    # the two sub-agents of each turn went out as one engine call, between the main generations
    assert engine.batches == [
        ["main"],
        ["subagent", "subagent"],
        ["main"],
        ["subagent", "subagent"],
        ["main"],
    ]

    bad_json_error = parse_tool_calls(calls0.removeprefix("Two segments might matter.</think>\n"))[1].error
    assert bad_json_error is not None
    question = row["question"] + " The video path for this video is: clip.mp4"
    messages: list[dict] = [
        {"role": "system", "content": PS.system_prompt("agentic_general")},
        {"role": "user", "content": _overview_parts(video, 8) + [{"type": "text", "text": question}]},
    ]
    expected_before = [_expected_ids(processor, messages, open_turn=True, prefix="<think>\n")]
    expected_after = []
    script = [
        (calls0, [reports[0], "Error: " + bad_json_error, reports[1]], None),
        (calls1, [reports[2], reports[3]], PS.forced_answer["mcq"].text),
        (final, None, None),
    ]
    for text, responses, forced in script:
        messages.append({"role": "assistant", "content": "<think>\n" + text})
        expected_after.append(_expected_ids(processor, messages, open_turn=False))
        if responses is None:
            break
        messages += [{"role": "tool", "content": [{"type": "text", "text": r}]} for r in responses]
        if forced:
            messages.append({"role": "user", "content": forced})
        expected_before.append(_expected_ids(processor, messages, open_turn=True, prefix="<think>\n"))

    trace = result.main
    ids = trace.token_ids
    before, after = _boundaries(trace)
    assert len(before) == len(after) == 3
    for pos, expected in zip(before, expected_before, strict=True):
        assert ids[:pos] == expected
    for pos, expected in zip(after, expected_after, strict=True):
        assert ids[:pos] == expected

    # Loss mask: exactly the model's own tokens (the scripted texts + <|im_end|>), nothing of the prefix.
    tok = tiny_model.tokenizer
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    own = [t for text, _, _ in script for t in tok(text, add_special_tokens=False)["input_ids"] + [eos]]
    assert [t for t, m in zip(ids, trace.loss_mask, strict=True) if m] == own
    assert sum(trace.loss_mask) == len(own)
    assert all(p == (-0.5 if m else 0.0) for p, m in zip(trace.logprobs, trace.loss_mask, strict=True))

    # Pixels: the trace carries exactly what the processor makes of the rendered conversation's images.
    full = processor(
        text=[processor.apply_chat_template(messages, tokenize=False)[:-1]],
        images=_images(messages),
        return_tensors="pt",
        images_kwargs={"size": SIZE},
    )
    assert ids == full["input_ids"][0].tolist()
    assert torch.equal(trace.pixel_values, full["pixel_values"])
    assert torch.equal(trace.image_grid_thw, full["image_grid_thw"])

    # Sub-agent traces: prompt (frames + prompt text) then their report; untrained by default.
    subs = result.subagent_traces
    assert len(subs) == 4
    for sub, report in zip(subs, reports, strict=True):
        assert sub.generated_text() == report + "<|im_end|>"
        assert sum(sub.loss_mask) == 0


def test_crop_frames_episode_segments_match_template(tiny_model, video):
    """Eval-parity mode (the released driver's layout): one user message per call with that call's frames,
    unlabelled, then a <tool_response> naming the frame count and window; a failed call gets a message
    with its error block only."""
    processor = tiny_model.processor
    turn0 = (
        format_tool_call("crop_video", {"start_time": 1, "end_time": 3})
        + format_tool_call("crop_video", {"start_time": 30, "end_time": 40})
        + format_tool_call("crop_video", {"start_time": 8, "end_time": 20})
    )
    final = "<answer>A</answer>"
    engine = ScriptedEngine(processor, [turn0, final])
    cfg = tiny_agent_config(tool_mode="crop_frames", max_turns=1, prompt_mode="agentic_minimal")
    row = {"video": str(video), "question": "When is the blue square visible?"}
    result = asyncio.run(arun_episode(row, engine, cfg))
    assert result.finish_reason == "answer"
    assert engine.batches == [["main"], ["main"]]  # no sub-agents in this mode
    # [30, 40] starts after the 12 s video; [8, 20] is clamped to the duration
    assert [c.window for c in result.calls] == [(1.0, 3.0), None, (8.0, 12.0)]
    crop_error = result.calls[1].error
    assert crop_error is not None and [c.ok for c in result.calls] == [True, False, True]

    question = row["question"] + " The video path for this video is: clip.mp4"
    messages: list[dict] = [
        {"role": "system", "content": PS.system_prompt("agentic_minimal")},
        {"role": "user", "content": _overview_parts(video, 8) + [{"type": "text", "text": question}]},
        {"role": "assistant", "content": turn0},
    ]
    crops = {}
    for start, end in [(1, 3), (8, 20)]:
        crops[start] = video_api.crop(
            str(video), start, end, max_frames=4, max_pixels=MAX_PIXELS, min_pixels=MIN_PIXELS
        )
    # 1 fps: [1, 3] -> 2 frames, [8, 12] -> 4 frames
    assert [len(crops[1]), len(crops[8])] == [2, 4]
    messages += [
        {
            "role": "user",
            "content": [{"type": "image", "image": f} for f in crops[1].frames]
            + [{"type": "text", "text": "<tool_response>\n2 frames from 1.0s to 3.0s.\n</tool_response>"}],
        },
        {
            "role": "user",
            "content": [{"type": "text", "text": f"<tool_response>\nError: {crop_error}\n</tool_response>"}],
        },
        {
            "role": "user",
            "content": [{"type": "image", "image": f} for f in crops[8].frames]
            + [{"type": "text", "text": "<tool_response>\n4 frames from 8.0s to 12.0s.\n</tool_response>"}],
        },
    ]
    before_final = _expected_ids(processor, messages, open_turn=True)
    messages.append({"role": "assistant", "content": final})
    trace = result.main
    before, after = _boundaries(trace)
    assert trace.token_ids[: before[1]] == before_final
    assert trace.token_ids == _expected_ids(processor, messages, open_turn=False)
    assert [c.frames for c in result.calls] == [2, 0, 4]
    assert len(trace.images) == 8 + 2 + 4
    assert all(
        torch.equal(a, b) for a, b in zip(trace.images[8:], [*crops[1].frames, *crops[8].frames], strict=True)
    )
    # the chat messages (what a chat engine is sent) hold the same three user messages
    conv = result.conversation
    assert [m["role"] for m in conv.messages[3:6]] == ["user", "user", "user"]
    assert "seconds>" not in trace.text[trace.text.index(turn0) :]  # crop frames are not labelled


def test_release_v1_crop_frames_responses_are_the_released_drivers(tiny_model, video):
    """prompt set release-v1 under tool_mode=crop_frames: the tool responses the released driver sends
    (paravt/eval/driver.py eval_one at cf55249), written out here as it builds them. The note names the times
    the call asked for, not the window served; a crop with no frames gets "[Error cropping {st:.1f}s-{et:.1f}s]"
    as a plain string message (no "Error: " prefix); the calls beyond max_parallel get no message at all
    (tcs[:max_parallel]). The records keep the served window, the real failure reason and the dropped call."""
    processor = tiny_model.processor
    release = load_prompt_set("release-v1")
    turn0 = (
        format_tool_call("crop_video", {"start_time": 1, "end_time": 3})
        + format_tool_call("crop_video", {"start_time": 30, "end_time": 40})
        + format_tool_call("crop_video", {"start_time": 8, "end_time": 20})
        + format_tool_call("crop_video", {"start_time": 4, "end_time": 6})
    )
    final = "<answer>A</answer>"
    engine = ScriptedEngine(processor, [turn0, final])
    cfg = tiny_agent_config(
        tool_mode="crop_frames",
        max_turns=1,
        prompt_mode="agentic_minimal",
        prompt_set="release-v1",
        max_parallel=3,
    )
    row = {"video": str(video), "question": "When is the blue square visible?"}
    result = asyncio.run(arun_episode(row, engine, cfg))
    assert result.finish_reason == "answer"
    # served windows: [8, 20] clamped to the 12 s video; [30, 40] starts after it; [4, 6] never ran
    assert [c.window for c in result.calls] == [(1.0, 3.0), None, (8.0, 12.0), None]
    assert [(c.executed, c.ok, c.dropped) for c in result.calls] == [
        (True, True, False), (True, False, False), (True, True, False), (False, False, True)]  # fmt: skip
    # the real reason is recorded
    assert (
        result.calls[1].error == "start_time (30) is at or after the end of the video (duration 12.0 seconds)"
    )
    assert result.calls[3].error == "at most 3 tool calls are executed per turn; this call was skipped."
    assert result.to_dict()["turns"][0]["calls"][3]["dropped"] is True

    question = row["question"] + " The video path for this video is: clip.mp4"
    messages: list[dict] = [
        {"role": "system", "content": release.system_prompt("agentic_minimal")},
        {"role": "user", "content": _overview_parts(video, 8) + [{"type": "text", "text": question}]},
        {"role": "assistant", "content": turn0},
    ]
    first = video_api.crop(str(video), 1, 3, max_frames=4, max_pixels=MAX_PIXELS, min_pixels=MIN_PIXELS)
    clamped = video_api.crop(str(video), 8, 12, max_frames=4, max_pixels=MAX_PIXELS, min_pixels=MIN_PIXELS)
    assert [len(first), len(clamped)] == [2, 4]  # 1 fps: [1, 3] -> 2 frames, [8, 12] -> 4 frames
    messages += [
        {
            "role": "user",
            "content": [{"type": "image", "image": f} for f in first.frames]
            + [{"type": "text", "text": "<tool_response>\n2 frames from 1.0s to 3.0s.\n</tool_response>"}],
        },
        {"role": "user", "content": "<tool_response>\n[Error cropping 30.0s-40.0s]\n</tool_response>"},
        {
            "role": "user",
            "content": [{"type": "image", "image": f} for f in clamped.frames]
            + [{"type": "text", "text": "<tool_response>\n4 frames from 8.0s to 20.0s.\n</tool_response>"}],
        },
    ]
    trace = result.main
    before, _ = _boundaries(trace)
    assert trace.token_ids[: before[1]] == _expected_ids(processor, messages, open_turn=True)
    messages.append({"role": "assistant", "content": final})
    assert trace.token_ids == _expected_ids(processor, messages, open_turn=False)
    assert len(trace.images) == 8 + 2 + 4
    # a chat engine is sent the same three user messages and nothing for the fourth call
    assert [m["role"] for m in result.conversation.messages[3:]] == ["user", "user", "user", "assistant"]


@pytest.mark.parametrize("limit", [3])
def test_subagent_report_is_truncated_to_its_token_budget(tiny_model, video, limit):
    processor = tiny_model.processor
    long_report = "first second third fourth fifth sixth seventh"
    engine = ScriptedEngine(
        processor,
        [format_tool_call("crop_video", {"start_time": 0, "end_time": 2}), "<answer>x</answer>"],
        subagent=long_report,
    )
    cfg = tiny_agent_config(subagent={"max_report_tokens": limit, "max_new_tokens": 64})
    result = asyncio.run(arun_episode({"video": str(video), "question": "q"}, engine, cfg))
    (call,) = result.calls
    ids = tiny_model.tokenizer(long_report, add_special_tokens=False)["input_ids"]
    assert len(ids) > limit
    expected = tiny_model.tokenizer.decode(ids[:limit]).strip() + " [truncated]"
    assert call.truncated and call.report_tokens == limit and call.report == expected
    assert long_report.startswith(call.report.removesuffix(" [truncated]"))
    # the main agent saw the truncated report
    assert "<tool_response>\n" + expected + "\n</tool_response>" in result.main.text


@pytest.mark.parametrize(("reason", "eos"), [("stop", True), ("length", False), ("content_filter", False)])
def test_only_a_real_stop_puts_an_end_of_turn_token_in_the_trace(tiny_model, reason: str, eos: bool) -> None:
    """A chat engine returns text; ``<|im_end|>`` goes into the trace only when the server says ``stop``."""
    encoder = SegmentEncoder(tiny_model.processor, max_pixels=MAX_PIXELS, min_pixels=MIN_PIXELS)
    conv = Conversation(encoder)
    text = "<answer>B</answer>"
    completion = Completion(token_ids=[], text=text, logprobs=None, finish_reason=reason, exact_tokens=False)
    body = conv.add_generation(completion, turn=0)
    (seg,) = conv.trace.segments
    plain = encoder.count(text)
    assert seg.token_ids == plain + [encoder.eos_token_id] * eos
    assert body == text
