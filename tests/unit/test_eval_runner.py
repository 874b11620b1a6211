"""The runner on the real episode loop: scripted main agents per question (tests/support/eval_support.KeyedEngine) for
each scenario, the real tiny Qwen3-VL for cross-sample batching. Every scenario ends in exactly one record:
scored, or an error with its reason - never a wrong answer standing in for an error, never a lost sample."""

from __future__ import annotations

import asyncio
import json

import pytest

from paravt_core.agent import prompts
from paravt_core.agent.config import AgentConfig
from paravt_core.agent.parsing import format_tool_call
from paravt_core.engines.base import EngineError
from paravt_core.engines.coalesce import CoalescingEngine
from paravt_core.engines.scripted import Reply
from paravt_core.engines.transformers_engine import TransformersEngine
from paravt_core.eval import benchmarks as B
from paravt_core.eval.records import SampleLog
from paravt_core.eval.runner import RunOptions, run_one, run_samples
from tests.support.eval_support import TINY_AGENT, KeyedEngine, fixture_entry
from tests.support.paths import ROOT

PS = prompts.load_prompt_set(prompts.DEFAULT_PROMPT_SET)
OPTS = RunOptions(concurrency=4, retries=1, backoff_s=0.0)
CALLS = "\n".join(format_tool_call("crop_video", {"video_path": "v.mp4", "start_time": a, "end_time": b})
                  for a, b in ((0.0, 2.0), (4.0, 6.0)))  # fmt: skip


@pytest.fixture(scope="module")
def video(eval_fixtures) -> str:
    return fixture_entry(eval_fixtures, "videomme")["media_root"] + "/data/fxSynthA001.mp4"


def _mcq(key: str, video: str, **kw) -> B.Sample:
    return B.Sample("videomme", key, video=video, question=f"[{key}] Which shape appears first?", gold="B",
                    letters="ABCD", **kw)  # fmt: skip


def _run(sample, engine, protocol="agentic", bench="videomme", **agent):
    base = AgentConfig.model_validate({**TINY_AGENT, "max_new_tokens": 512, **agent})  # scripted replies fit
    return asyncio.run(run_one(sample, protocol, B.get(bench), engine, base, OPTS, sleep=_no_sleep))


async def _no_sleep(_: float) -> None:
    return None


def test_parallel_calls_then_right_answer(tiny_model, video):
    engine = KeyedEngine(
        tiny_model.processor, {"[ok]": ["<think>two windows</think>\n" + CALLS, "<answer>B</answer>"]}
    )
    rec = _run(_mcq("ok", video), engine)
    assert (rec["status"], rec["score"], rec["prediction"]) == ("ok", 1.0, "B")
    assert (rec["tool_calls"], rec["tool_rounds"], rec["turns"], rec["finish_reason"]) == (2, 1, 2, "answer")
    assert rec["frames"] == TINY_AGENT["overview_frames"] and rec["attempts"] == 1
    # the forced MCQ answer follows the last tool round (max_turns 2 -> after round 2; here the answer came first)
    assert PS.forced_answer["mcq"].text not in engine.prompts["[ok]"][-1]


def test_forced_answer_after_the_last_round(tiny_model, video):
    engine = KeyedEngine(tiny_model.processor, {"[forced]": [CALLS, "<answer>C</answer>"]})
    rec = _run(_mcq("forced", video), engine, max_turns=1)
    assert PS.forced_answer["mcq"].text in engine.prompts["[forced]"][1]
    assert (rec["status"], rec["score"], rec["prediction"]) == ("ok", 0.0, "C")


def test_the_final_reply_decides_over_an_earlier_answer_tag(tiny_model, video):
    """Turn 1 tags A and calls the tool, the forced final reply is a bare "C": C is scored (the
    release scores its final reply); an earlier turn's tag must not override it."""
    engine = KeyedEngine(tiny_model.processor, {"[final]": ["<answer>A</answer>\n" + CALLS, "C"]})
    rec = _run(_mcq("final", video), engine, max_turns=1)
    assert PS.forced_answer["mcq"].text in engine.prompts["[final]"][1]
    assert (rec["status"], rec["prediction"], rec["score"]) == ("ok", "C", 0.0)


def test_context_overflow_is_an_error_not_a_wrong_answer(tiny_model, video):
    """A prompt that does not fit ``max_context_tokens`` (256 < the system prompt alone) is
    recorded as an error with its reason, never scored 0, and not retried."""
    engine = KeyedEngine(tiny_model.processor, {"[big]": ["<answer>B</answer>"]})
    rec = _run(_mcq("big", video), engine, max_context_tokens=256)
    assert (rec["status"], rec["score"], rec["error"]["reason"]) == ("error", None, "context_overflow")
    assert rec["attempts"] == 1 and "prediction" not in rec


def test_malformed_tool_calls_are_counted_and_the_episode_goes_on(tiny_model, video):
    bad = '<tool_call>{"name": "crop_video", "arguments": {"start_time": 1,</tool_call>\n'
    engine = KeyedEngine(tiny_model.processor, {"[bad]": [bad + CALLS.split("\n</tool_call>")[0] + "\n</tool_call>",
                                                          "<answer>A</answer>"]})  # fmt: skip
    rec = _run(_mcq("bad", video), engine)
    assert (rec["status"], rec["score"], rec["finish_reason"]) == (
        "ok",
        0.0,
        "answer",
    )  # A is wrong, not an error
    assert (rec["tool_calls_total"], rec["tool_calls_malformed"], rec["tool_calls"]) == (2, 1, 1)


def test_empty_answer_is_a_wrong_answer_with_its_reason(tiny_model, video):
    engine = KeyedEngine(tiny_model.processor, {"[empty]": [""]})
    rec = _run(_mcq("empty", video), engine)
    assert (rec["status"], rec["score"], rec["score_reason"]) == ("ok", 0.0, "empty_answer")
    assert rec["finish_reason"] == "empty_generation"


def test_engine_timeout_is_retried_then_recorded_as_an_error(tiny_model, video):
    engine = KeyedEngine(tiny_model.processor, {"[slow]": [Reply("<answer>B</answer>", delay_s=5.0)]})
    rec = _run(_mcq("slow", video), engine, engine_timeout_s=0.2)
    assert (rec["status"], rec["score"], rec["error"]["reason"]) == ("error", None, "engine_timeout")
    assert rec["attempts"] == 2  # 1 + retries=1
    assert engine.seen.count("[slow]") == 2


def test_transient_engine_error_then_success(tiny_model, video):
    engine = KeyedEngine(tiny_model.processor, {"[flaky]": [EngineError("HTTP 503"), "<answer>B</answer>"]})
    rec = _run(_mcq("flaky", video), engine)
    assert (rec["status"], rec["score"], rec["attempts"]) == ("ok", 1.0, 2)


def test_missing_and_corrupt_videos_are_errors_not_retried(tiny_model, tmp_path):
    corrupt = tmp_path / "corrupt.mp4"
    corrupt.write_bytes(b"\x00\x00\x00\x18ftypmp42 this is not a video" * 10)
    engine = KeyedEngine(tiny_model.processor, {})
    for path in (str(tmp_path / "missing.mp4"), str(corrupt)):
        rec = _run(_mcq("v", path), engine)
        assert (rec["status"], rec["error"]["reason"], rec["attempts"]) == ("error", "video_error", 1)
    assert engine.generate_calls == 0


def test_row_error_is_recorded_without_running(tiny_model):
    engine = KeyedEngine(tiny_model.processor, {})
    sample = B.Sample("videomme", "001-9", error="row_error: missing field 'options'")
    rec = _run(sample, engine)
    assert rec["status"] == "error" and rec["error"] == {"reason": "row_error",
                                                         "message": "row_error: missing field 'options'"}  # fmt: skip
    assert engine.generate_calls == 0


@pytest.mark.parametrize("protocol", ["direct", "reasoning"])
def test_no_tool_protocols_use_their_own_format_instruction(tiny_model, video, protocol):
    engine = KeyedEngine(tiny_model.processor, {"[nt]": ["<think>red first</think><answer>B</answer>"]})
    rec = _run(_mcq("nt", video), engine, protocol=protocol)
    (prompt,) = engine.prompts["[nt]"]
    own = PS.system.direct if protocol == "direct" else PS.system.reasoning
    other = PS.system.reasoning if protocol == "direct" else PS.system.direct
    assert own in prompt and other not in prompt
    assert "crop_video" not in prompt and "The video path for this video is" not in prompt
    assert (rec["status"], rec["score"], rec["tool_calls"]) == ("ok", 1.0, 0)


def test_charades_uses_the_bare_envelope_and_the_grounding_forced_answer(tiny_model, video):
    sample = B.Sample("charades", "c1", video=video, question="[ch] find: a red circle appears", gold="1.0, 3.0",
                      qtype="tvg")  # fmt: skip
    engine = KeyedEngine(
        tiny_model.processor,
        {"[ch]": [CALLS, "<answer>The event happens in the 1.0 - 2.0 seconds.</answer>"]},
    )
    rec = _run(sample, engine, bench="charades", max_turns=1)
    first, second = engine.prompts["[ch]"]
    assert PS.system_prompt("agentic_minimal") in first and "You are a video understanding agent" not in first
    assert PS.forced_answer["tvg"].text in second
    assert rec["score"] == pytest.approx(0.5)  # [1,2] inside [1,3]: 1 / 2


def test_run_samples_records_every_sample_once(tiny_model, video, tmp_path):
    samples = [_mcq(f"s{i}", video) for i in range(5)] + [B.Sample("videomme", "bad", error="row_error: x")]
    engine = KeyedEngine(
        tiny_model.processor, {f"[s{i}]": [f"<answer>{'AB'[i % 2]}</answer>"] for i in range(5)}
    )
    base = AgentConfig.model_validate(TINY_AGENT)
    with SampleLog(tmp_path / "r.jsonl") as log:
        ran = asyncio.run(run_samples(samples, "agentic", B.get("videomme"), engine, base, log, OPTS))
        again = asyncio.run(run_samples(samples, "agentic", B.get("videomme"), engine, base, log, OPTS))
    lines = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert (ran, again) == (6, 0)
    assert sorted(r["id"] for r in lines) == sorted(s.id for s in samples)
    # s1, s3 answer B (right); s0, s2, s4 answer A
    assert {r["id"]: r["score"] for r in lines} == {
        "s0": 0.0,
        "s1": 1.0,
        "s2": 0.0,
        "s3": 1.0,
        "s4": 0.0,
        "bad": None,
    }


def test_coalesced_concurrent_samples_match_one_at_a_time(tiny_model, eval_fixtures, tmp_path):
    """The real tiny model, greedy: concurrent samples batched into shared generate calls write the same
    predictions as one sample at a time."""
    e = fixture_entry(eval_fixtures, "synthetic")
    from paravt_core.eval.formats import read_rows

    samples = B.to_samples("synthetic", read_rows(e["source"]), B.Context(e["media_root"]))[:6]
    base = AgentConfig.model_validate({**TINY_AGENT, "max_new_tokens": 12})
    inner = TransformersEngine(tiny_model.model, tiny_model.processor)
    outs = {}
    for name, engine, concurrency in (
        ("serial", inner, 1),
        ("coalesced", CoalescingEngine(inner, seed=None, max_retries=0), 6),
    ):
        with SampleLog(tmp_path / f"{name}.jsonl") as log:
            opts = RunOptions(concurrency=concurrency, retries=0)
            asyncio.run(run_samples(samples, "agentic", B.get("synthetic"), engine, base, log, opts))
            outs[name] = {r["id"]: (r["final_text"], r["score"]) for r in log.records}
        if name == "coalesced":
            assert engine.requests > engine.batches  # samples really shared generate calls
    assert outs["coalesced"] == outs["serial"]
    assert len(outs["serial"]) == 6


def test_judge_down_records_the_open_ended_sample_as_an_error(tiny_model, video):
    from paravt_core.rewards.judge import Judge
    from tests.support.judge_test_server import ScriptedChatServer

    sample = B.Sample(
        "mmvu", "oe1", video=video, question="[oe] What colour is the square?", gold="blue", qtype="oe"
    )
    engine = KeyedEngine(tiny_model.processor, {"[oe]": ["<answer>navy</answer>"]})
    base = AgentConfig.model_validate({**TINY_AGENT, "max_new_tokens": 512})
    with ScriptedChatServer(status=503) as server:
        judge = Judge(server.base_url, "judge", timeout_s=5, max_retries=0, backoff_s=0.0, deadline_s=10)
        rec = asyncio.run(run_one(sample, "agentic", B.get("mmvu"), engine, base, OPTS, judge=judge))
        assert server.attempts == 1
    assert (rec["status"], rec["score"], rec["error"]["reason"]) == ("error", None, "judge_error")
    assert rec["answer"] == "navy"  # the episode's result is kept with the error


def test_crop_frames_parity_mode(tiny_model, video):
    """agent.tool_mode=crop_frames: the crop frames themselves answer the calls (no sub-agent generations)."""
    engine = KeyedEngine(
        tiny_model.processor, {"[cf]": [CALLS, "<answer>B</answer>"]}, report=RuntimeError("no sub-agents")
    )
    rec = _run(_mcq("cf", video), engine, tool_mode="crop_frames")
    assert (rec["status"], rec["score"], rec["tool_calls"], rec["tool_rounds"]) == ("ok", 1.0, 2, 1)
    second = engine.prompts["[cf]"][1]
    assert second.count("<tool_response>") == 2 and "<|image_pad|>" in second.split("<tool_response>", 1)[1]


def test_release_layout_records_the_calls_the_model_got_no_response_for(tiny_model, video):
    """release-v1 under crop_frames drops the calls beyond max_parallel (the released driver's tcs[:max_parallel]);
    the record still counts them: 3 written, 2 executed, 1 dropped. paravt-v1 answers all three (0 dropped)."""
    three = (
        CALLS
        + "\n"
        + format_tool_call("crop_video", {"video_path": "v.mp4", "start_time": 1.0, "end_time": 3.0})
    )
    for prompt_set, dropped, blocks in (("release-v1", 1, 2), ("paravt-v1", 0, 3)):
        engine = KeyedEngine(tiny_model.processor, {"[drop]": [three, "<answer>B</answer>"]})
        rec = _run(
            _mcq("drop", video), engine, tool_mode="crop_frames", max_parallel=2, prompt_set=prompt_set
        )
        assert (rec["tool_calls_total"], rec["tool_calls"], rec["tool_calls_dropped"]) == (3, 2, dropped)
        assert engine.prompts["[drop]"][1].count("<tool_response>") == blocks


# ------------------------------------------------------------------------------------ presets


def _tokens_per_frame(frames, processor) -> int:
    """Image tokens of one frame of ``frames``: (h / patch) x (w / patch) / merge^2 (Qwen3-VL's vision tower)."""
    ip = processor.image_processor
    h, w = int(frames.frames.shape[2]), int(frames.frames.shape[3])
    return (h // ip.patch_size) * (w // ip.patch_size) // ip.merge_size**2


def test_release_preset_reproduces_the_released_driver(tiny_model, video):
    """preset=release: 64 unlabelled overview frames of 100,352-602,112 px (qwen-vl-utils 0.0.14, nframes=64),
    crop frames of at most 50,176 px returned as they are, a 65,536-token context; Charades keeps its labels."""
    from paravt_core.eval.protocols import preset_agent
    from paravt_core.video import release_frames

    base = preset_agent("release", AgentConfig.model_validate({**TINY_AGENT, "max_new_tokens": 512}))
    assert (base.overview_frames, base.overview_pixels, base.crop_pixels) == (
        64,
        (100_352, 602_112),
        (784, 50_176),
    )
    assert (base.tool_mode, base.max_context_tokens, base.crop.fps, base.crop.max_frames) == (
        "crop_frames", 65_536, 1.0, 16)  # fmt: skip
    one_call = format_tool_call("crop_video", {"video_path": "v.mp4", "start_time": 0.0, "end_time": 2.0})
    engine = KeyedEngine(
        tiny_model.processor, {"[rel]": [one_call, "B"], "[relg]": ["<answer>1 - 3</answer>"]}
    )
    opts = RunOptions(concurrency=1, retries=0, backoff_s=0.0)
    rec = asyncio.run(
        run_one(_mcq("rel", video), "agentic", B.get("videomme"), engine, base, opts, preset="release")
    )
    # the fixture video has 64 frames (8 s at 8 fps): the overview is every one of them, round(linspace(0, 63, 64)),
    # unlabelled; 128 x 96 is below 100,352 px, so qwen-vl-utils scales it up by sqrt(100,352 / 12,288) and rounds
    # up to the 28-px grid: ceil(274.3 / 28) x 28 = 280 by ceil(365.8 / 28) x 28 = 392; the processor's own
    # settings (tiny: longest_edge 16,384 px, 32-px grid) shrink that to 96 x 128: (96 / 16) x (128 / 16) / 2^2 = 12
    # tokens a frame
    assert (rec["status"], rec["frames"], rec["prediction"]) == ("ok", 64, "B")
    overview = release_frames.overview(video)
    assert (overview.indices, tuple(overview.frames.shape[2:])) == (list(range(64)), (280, 392))
    first, second = engine.prompts["[rel]"]
    assert first.count("<|image_pad|>") == 64 * 12 and "seconds>" not in first
    # the crop 0-2 s at 8 fps: frames ceil(0) = 0 to floor(16) = 16, 17 frames = 2.125 s -> 2 frames (0 and 16);
    # qwen-vl-utils sizes 128 x 96 to the 28-px grid: 140 x 84; the processor makes it 128 x 96: 12 tokens a frame
    crop = release_frames.crop(video, 0.0, 2.0)
    assert (crop.indices, tuple(crop.frames.shape[2:])) == ([0, 16], (84, 140))
    assert second.count("<|image_pad|>") == 64 * 12 + 2 * 12

    grounding = B.Sample(
        "charades", "[relg]", video=video, question="[relg] When?", gold="1.0, 3.0", qtype="tvg"
    )
    rec = asyncio.run(run_one(grounding, "agentic", B.get("charades"), engine, base, opts, preset="release"))
    assert (rec["status"], rec["score"]) == ("ok", 1.0)  # [1, 3] against the gold [1, 3]
    # Charades keeps the labels: frame i at i / 8 s, "<0.0 seconds>" (0.125 s reads 0.1) to "<7.9 seconds>" (7.875 s)
    labels = engine.prompts["[relg]"][0]
    assert labels.count("seconds>") == 64 and labels.count("<|image_pad|>") == 64 * 12
    assert "<0.0 seconds>" in labels and "<0.1 seconds>" in labels and "<7.9 seconds>" in labels


def test_separate_overview_and_crop_pixel_budgets(tiny_model, video):
    """agent.overview_max_pixels / crop_max_pixels: a full-size overview with small crops (one max_pixels could not
    express it)."""
    from paravt_core.video import api as video_api

    engine = KeyedEngine(tiny_model.processor, {"[px]": [CALLS, "<answer>B</answer>"]})
    rec = _run(_mcq("px", video), engine, tool_mode="crop_frames", max_turns=1, overview_max_pixels=128 * 96,
               crop_max_pixels=32 * 32 * 2)  # fmt: skip
    assert rec["status"] == "ok"
    overview = video_api.overview(video, TINY_AGENT["overview_frames"], max_pixels=128 * 96,
                                  min_pixels=TINY_AGENT["min_pixels"])  # fmt: skip
    first, second = engine.prompts["[px]"]
    assert first.count("<|image_pad|>") == len(overview) * _tokens_per_frame(overview, tiny_model.processor)
    crops = [video_api.crop(video, a, b, max_frames=4, max_pixels=32 * 32 * 2, min_pixels=TINY_AGENT["min_pixels"])
             for a, b in ((0.0, 2.0), (4.0, 6.0))]  # fmt: skip
    crop_pads = second.count("<|image_pad|>") - first.count("<|image_pad|>")
    assert crop_pads == sum(len(c) * _tokens_per_frame(c, tiny_model.processor) for c in crops)
    assert _tokens_per_frame(crops[0], tiny_model.processor) < _tokens_per_frame(
        overview, tiny_model.processor
    )


def test_release_config_file_resolves_to_the_released_driver():

    from paravt_core.config import load_config
    from paravt_core.eval.config import EvalConfig
    from paravt_core.eval.protocols import preset_agent

    configs = ROOT / "configs" / "eval"
    release = load_config(EvalConfig, configs / "release.yaml")
    agent = preset_agent(release.preset, release.agent)
    assert (release.preset, agent.overview_frames, agent.overview_pixels, agent.crop_pixels) == (
        "release", 64, (100_352, 602_112), (784, 50_176))  # fmt: skip
    assert (agent.tool_mode, agent.max_context_tokens, agent.temperature) == ("crop_frames", 65_536, 0.0)
    ours = load_config(EvalConfig, configs / "withtool.yaml")
    assert ours.preset == "paravt" and preset_agent(ours.preset, ours.agent) == ours.agent
