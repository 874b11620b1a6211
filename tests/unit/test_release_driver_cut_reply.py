"""A tool-round reply cut by the token limit (finish reason "length") under the release's reader: the calls it
completed run and the episode goes on, as the released driver's loop does (it never reads the finish reason);
our own path still ends the episode there.

The scripted engine cuts the reply at the request's ``max_new_tokens`` exactly as a server does; the limit is
set inside the third call block, so the reply holds two closed ``<tool_call>`` blocks and an open third. The
video is index-coded (frame i shows code i at i / 10 s) so the crop frames sent back are read from the pixels.
"""

from __future__ import annotations

import asyncio

import pytest

from paravt_core.agent.config import AgentConfig
from paravt_core.agent.episode import arun_episode
from paravt_core.agent.parsing import format_tool_call
from paravt_core.engines.scripted import Reply, ScriptedEngine
from paravt_core.eval.protocols import preset_agent
from paravt_core.synth import read_code, write_coded_video

WINDOWS = ((1.0, 3.0), (5.0, 7.0), (8.0, 9.5))
FORCED = "Based on the video and cropped segments above, answer with ONLY the letter."


@pytest.fixture(scope="module")
def coded_video(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("cut") / "coded.mp4"
    write_coded_video(path, [(100, 10.0)], x264_params="bframes=0")
    return str(path)


def _call(start: float, end: float) -> str:
    return format_tool_call("crop_video", {"video_path": "coded.mp4", "start_time": start, "end_time": end})


def _script(tokenizer) -> tuple[str, int]:
    """The full reply (three calls) and a token limit that cuts it inside the third block."""
    two = "<think>Check three parts.</think>\n" + _call(*WINDOWS[0]) + "\n" + _call(*WINDOWS[1]) + "\n"
    full = two + _call(*WINDOWS[2])
    limit = len(tokenizer(two, add_special_tokens=False)["input_ids"]) + 8  # 8 tokens into the third block
    return full, limit


def _run(tiny_model, video: str, cfg: AgentConfig, full: str):
    engine = ScriptedEngine(tiny_model.processor, [Reply(full), "<answer>B</answer>"])
    result = asyncio.run(arun_episode({"video": video, "question": "Which code?"}, engine, cfg))
    return engine, result


def test_the_release_runs_the_complete_calls_of_a_cut_reply(tiny_model, coded_video):
    full, limit = _script(tiny_model.processor.tokenizer)
    base = AgentConfig(prompt_set="release-v1", temperature=0.0, forced_answer="mcq")
    cfg = preset_agent("release", base).model_copy(update={"max_new_tokens": limit, "max_turns": 1})
    engine, result = _run(tiny_model, coded_video, cfg, full)

    cut = result.turns[0]
    assert cut.finish_reason == "length" and cut.tokens == limit
    assert (cut.text.count("<tool_call>"), cut.text.count("</tool_call>")) == (3, 2)
    assert full.startswith(cut.text) and cut.text != full  # the reply as cut, nothing added or removed
    # the two closed blocks ran, the open third is no call at all (the driver's regex needs </tool_call>)
    assert [(c.executed, c.ok, c.window) for c in cut.calls] == [(True, True, w) for w in WINDOWS[:2]]
    # the episode went on: the round counts (max_turns=1, so the forced answer follows it) and B is the answer
    assert (result.finish_reason, result.answer, result.tool_rounds) == ("answer", "B", 1)
    assert len(result.turns) == 2

    first, second = (r for r in engine.requests if r.tag == "main")
    # crops: 1-3 s = frames ceil(10) = 10 to floor(30) = 30, 21 frames = 2.1 s -> 2 frames [10, 30]; 5-7 s -> [50, 70]
    assert [read_code(f.numpy()) for f in second.images[len(first.images) :]] == [10, 30, 50, 70]
    # the cut text is the assistant message as it is, closed by <|im_end|> as a chat template closes it
    assistant = [m for m in result.conversation.messages if m["role"] == "assistant"]
    assert assistant[0] == {"role": "assistant", "content": cut.text}
    prompt = tiny_model.processor.tokenizer.decode(second.input_ids)
    assert cut.text + "<|im_end|>\n<|im_start|>user\n" in prompt
    assert "2 frames from 1.0s to 3.0s." in prompt and "2 frames from 5.0s to 7.0s." in prompt
    assert prompt.count("<tool_response>") == 2  # nothing for the open third block
    assert prompt.endswith(f"{FORCED}<|im_end|>\n<|im_start|>assistant\n")


def test_a_cut_reply_without_a_complete_call_is_the_final_reply(tiny_model, coded_video):
    tokenizer = tiny_model.processor.tokenizer
    opened = "<think>Check.</think>\n" + _call(*WINDOWS[0])
    limit = len(tokenizer("<think>Check.</think>\n", add_special_tokens=False)["input_ids"]) + 8
    cfg = preset_agent("release", AgentConfig(prompt_set="release-v1", temperature=0.0, forced_answer="mcq"))
    _, result = _run(tiny_model, coded_video, cfg.model_copy(update={"max_new_tokens": limit}), opened)
    # driver.py: no call found -> final = response; break
    assert (result.finish_reason, len(result.turns), result.turns[0].calls) == ("max_tokens_in_tag", 1, [])


def test_our_own_path_still_ends_the_episode_at_a_cut_reply(tiny_model, coded_video):
    full, limit = _script(tiny_model.processor.tokenizer)
    cfg = AgentConfig(temperature=0.0, max_new_tokens=limit)  # preset=paravt: sub-agents, paravt-v1
    engine, result = _run(tiny_model, coded_video, cfg, full)
    assert result.finish_reason == "max_tokens_in_tag" and len(result.turns) == 1
    assert [(c.executed, c.error) for c in result.calls] == [(False, "generation cut by the token limit")] * 3
    assert len(engine.requests) == 1  # no sub-agent ran, no further turn
