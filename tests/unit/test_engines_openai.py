"""OpenAIEngine against a real loopback server serving the tiny model (tests/support/openai_test_server.py)."""

from __future__ import annotations

import asyncio

import pytest
import torch

from paravt_core.agent.episode import arun_episode
from paravt_core.agent.parsing import format_tool_call
from paravt_core.engines.base import EngineError, GenerationRequest, SamplingParams, image_processor_kwargs
from paravt_core.engines.openai_engine import OpenAIEngine, retry_after_seconds, to_openai_messages
from paravt_core.engines.scripted import Reply, ScriptedEngine
from paravt_core.engines.transformers_engine import TransformersEngine
from tests.support.agent_support import MAX_PIXELS, MIN_PIXELS, tiny_agent_config
from tests.support.openai_support import _direct, _frame, _request
from tests.support.openai_test_server import TinyChatServer, _decode_data_url


@pytest.fixture(scope="module")
def engine(tiny_model) -> TransformersEngine:
    return TransformersEngine(tiny_model.model, tiny_model.processor)


def test_message_mapping():
    frame = _frame(0)
    messages = [
        {"role": "assistant", "content": "<think>\nx</think><tool_call>{}</tool_call>"},
        {"role": "tool", "content": [{"type": "text", "text": "report A"}]},
        {
            "role": "tool",
            "content": [{"type": "text", "text": "<0.5 seconds>"}, {"type": "image", "image": frame}],
        },
    ]
    out = to_openai_messages(messages)
    assert out[0] == {"role": "assistant", "content": "<think>\nx</think><tool_call>{}</tool_call>"}
    assert len(out) == 2 and out[1]["role"] == "user"  # both tool results share one user turn
    texts = [p.get("text") for p in out[1]["content"]]
    assert texts[:4] == ["<tool_response>\n", "report A", "\n</tool_response>", "\n"]
    image = next(p for p in out[1]["content"] if p["type"] == "image_url")
    assert torch.equal(_decode_data_url(image["image_url"]["url"]), frame)  # lossless PNG

    request = GenerationRequest(
        messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "<think>\n"}],
        continue_final_message=True,
        sampling=SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=5, stop=("</answer>",), seed=3),
    )
    body = OpenAIEngine("http://x/v1", "m").payload(request)
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["stop"], body["seed"]) == (
        5,
        0.7,
        0.9,
        ["</answer>"],
        3,
    )
    assert "mm_processor_kwargs" not in body  # no images, nothing to process
    ours = image_processor_kwargs(max_pixels=MAX_PIXELS, min_pixels=MIN_PIXELS)
    with_frame = _request("q", frame)
    with_frame.images_kwargs = ours
    assert OpenAIEngine("http://x/v1", "m").payload(with_frame)["mm_processor_kwargs"] == {
        "size": {"shortest_edge": 32 * 32, "longest_edge": 64 * 96}
    }


def test_transient_failures_are_retried(engine):
    with TinyChatServer(engine, fail_first=2, fail_status=503) as server:
        client = OpenAIEngine(server.base_url, "tiny", max_retries=3, backoff_s=0.01)
        (completion,) = asyncio.run(client.generate([_request("q", _frame(1))]))
        assert server.attempts == 3 and client.attempts == 3
        assert completion.text == _direct(engine, _request("q", _frame(1)))


def test_client_errors_are_not_retried_and_retries_are_bounded(engine):
    with TinyChatServer(engine) as server:
        client = OpenAIEngine(server.base_url, "no-such-model", max_retries=3, backoff_s=0.01)
        with pytest.raises(EngineError, match="HTTP 400"):
            asyncio.run(client.generate([_request("q", _frame(1))]))
        assert server.attempts == 1
    with TinyChatServer(engine, fail_first=100, fail_status=502) as server:
        client = OpenAIEngine(server.base_url, "tiny", max_retries=2, backoff_s=0.01)
        with pytest.raises(EngineError, match=r"HTTP 502.*after 3 attempt"):
            asyncio.run(client.generate([_request("q", _frame(1))]))
        assert server.attempts == 3


def test_timeouts(engine):
    with TinyChatServer(engine, delay_s=1.5) as server:
        client = OpenAIEngine(server.base_url, "tiny", timeout_s=0.2, max_retries=1, backoff_s=0.01)
        with pytest.raises(EngineError, match="timed out"):
            asyncio.run(client.generate([_request("q", _frame(1))]))
        assert client.attempts == 2
    assert server._thread is not None and not server._thread.is_alive()  # stopped before the next test


def test_retry_after_is_honoured(engine):
    with TinyChatServer(engine, fail_first=1, fail_status=429, retry_after="1") as server:
        client = OpenAIEngine(server.base_url, "tiny", max_retries=2, backoff_s=0.0)
        (completion,) = asyncio.run(client.generate([_request("q", _frame(1))]))
        assert server.attempts == 2
    # backoff 0 (jitter draws from [0, 0]): the one wait is the server's Retry-After of 1 s
    assert client.waits == [1.0] and completion.text == _direct(engine, _request("q", _frame(1)))
    with TinyChatServer(engine, fail_first=1, fail_status=503, retry_after="3600") as server:
        client = OpenAIEngine(server.base_url, "tiny", max_retries=1, backoff_s=0.0, max_retry_after_s=0.2)
        asyncio.run(client.generate([_request("q", _frame(1))]))
    assert client.waits == [0.2]  # an hour asked, capped at max_retry_after_s
    # the HTTP-date form: 90 s after "now"
    assert retry_after_seconds("Wed, 21 Oct 2015 07:29:30 GMT", now=1445412480.0) == 90.0  # 07:28:00 UTC
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None
    assert retry_after_seconds("-5") == 0.0


def test_api_key(engine):
    with TinyChatServer(engine, api_key="sk-right") as server:
        ok = OpenAIEngine(server.base_url, "tiny", api_key="sk-right")
        text = asyncio.run(ok.chat([{"role": "user", "content": "hi"}], max_new_tokens=4))
        wrong = OpenAIEngine(server.base_url, "tiny", api_key="sk-wrong-secret", max_retries=0)
        with pytest.raises(EngineError, match="HTTP 401") as info:
            asyncio.run(wrong.chat([{"role": "user", "content": "hi"}]))
        assert "sk-wrong-secret" not in str(info.value)
    expected = _direct(
        engine,
        GenerationRequest(
            messages=[{"role": "user", "content": "hi"}], sampling=SamplingParams(max_new_tokens=4)
        ),
    )
    assert text == expected


def _encoded_request(processor, frame: torch.Tensor, images_kwargs: dict | None) -> GenerationRequest:
    """A chat request that also carries our exact token count (as the episode's requests do)."""
    request = _request("What is shown?", frame)
    text = processor.apply_chat_template(request.messages, add_generation_prompt=True, tokenize=False)
    ours = image_processor_kwargs(max_pixels=MAX_PIXELS, min_pixels=MIN_PIXELS)
    request.input_ids = list(processor(text=[text], images=[frame], images_kwargs=ours)["input_ids"][0])
    request.images_kwargs = images_kwargs
    return request


def test_server_pixels_follow_our_processor_settings(engine, tiny_model, caplog):
    """The served checkpoint's own minimum (96² px, like Qwen3-VL's 256²) would upsize our 64x64 frame to
    96x96 (9 image tokens instead of 4); mm_processor_kwargs keeps our size, and a mismatch is counted."""
    checkpoint = {"size": {"shortest_edge": 96 * 96, "longest_edge": 128 * 128}}
    ours = image_processor_kwargs(max_pixels=MAX_PIXELS, min_pixels=MIN_PIXELS)
    frame = _frame(3)
    with TinyChatServer(engine, checkpoint_images_kwargs=checkpoint) as server:
        client = OpenAIEngine(server.base_url, "tiny", max_retries=0)
        kept = _encoded_request(tiny_model.processor, frame, ours)
        (same,) = asyncio.run(client.generate([kept]))
        assert same.prompt_tokens == len(kept.input_ids) and client.prompt_token_mismatches == 0
        resized = _encoded_request(tiny_model.processor, frame, None)
        with caplog.at_level("WARNING"):
            (other,) = asyncio.run(client.generate([resized]))
    assert other.prompt_tokens == len(resized.input_ids) - 4 + 9
    assert client.prompt_token_mismatches == 1
    assert f"counted {other.prompt_tokens} prompt tokens" in caplog.text


@pytest.mark.parametrize("reason", ["content_filter", "tool_calls"])
def test_other_finish_reasons_are_kept(engine, reason):
    with TinyChatServer(engine, finish_reason=reason) as server:
        client = OpenAIEngine(server.base_url, "tiny")
        (completion,) = asyncio.run(client.generate([_request("q", _frame(2), max_new_tokens=3)]))
    assert completion.finish_reason == reason


def crop(start, end) -> str:
    return format_tool_call("crop_video", {"start_time": start, "end_time": end})


def test_scripted_episode_over_http(tiny_model, video):
    main = [crop(1, 3) + crop(6, 8), "The square.</think><answer>A</answer>"]

    def report(request, i):  # sub-agents arrive concurrently: answer with the window the prompt names
        prompt = tiny_model.tokenizer.decode(request.input_ids)
        return (
            "Saw " + prompt.split("segment of a video from ")[1].split(" (")[0]
        )  # 15 tokens with eos: within the 16 allowed

    scripted = ScriptedEngine(tiny_model.processor, main, subagent=report)
    with TinyChatServer(scripted) as server:
        client = OpenAIEngine(server.base_url, "tiny", processor=tiny_model.processor)
        cfg = tiny_agent_config(think_prefix=True)
        result = asyncio.run(arun_episode({"video": str(video), "question": "Which shape?"}, client, cfg))
        bodies = list(server.bodies)
    assert (result.finish_reason, result.answer, len(result.turns)) == ("answer", "A", 2)
    assert [t.text for t in result.turns] == ["<think>\n" + main[0], "<think>\n" + main[1]]
    assert [(c.window, c.frames, c.report) for c in result.calls] == [
        ((1.0, 3.0), 2, "Saw 00:01 to 00:03"),  # 1 fps over [1, 3]: 2 frames
        ((6.0, 8.0), 2, "Saw 00:06 to 00:08"),
    ]
    first = bodies[0]
    assert first["continue_final_message"] is True and first["add_generation_prompt"] is False
    assert first["messages"][-1] == {"role": "assistant", "content": "<think>\n"}
    assert sum(p["type"] == "image_url" for p in first["messages"][1]["content"]) == 8  # the overview
    assert first["mm_processor_kwargs"] == {"size": {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS}}
    # the server renders the same template: its prompt count equals our exact count every turn
    assert result.prompt_token_mismatches == 0 and client.prompt_token_mismatches == 0


def test_a_finish_reason_other_than_stop_adds_no_eos(tiny_model, video):
    cut = Reply("<answer>B</answer>", finish="content_filter")
    scripted = ScriptedEngine(tiny_model.processor, [cut])
    with TinyChatServer(scripted, finish_reason="content_filter") as server:
        client = OpenAIEngine(server.base_url, "tiny", processor=tiny_model.processor)
        result = asyncio.run(
            arun_episode({"video": str(video), "question": "q"}, client, tiny_agent_config())
        )
    assert (result.finish_reason, result.answer) == ("answer", "B")
    assert result.turns[0].finish_reason == "content_filter"
    (generated,) = [s for s in result.main.segments if s.kind == "generated"]
    assert generated.text == "<answer>B</answer>"  # no <|im_end|> the model never wrote
    scripted = ScriptedEngine(tiny_model.processor, ["<answer>B"])
    with TinyChatServer(scripted, finish_reason="abort") as server:
        client = OpenAIEngine(server.base_url, "tiny", processor=tiny_model.processor)
        result = asyncio.run(
            arun_episode({"video": str(video), "question": "q"}, client, tiny_agent_config())
        )
    assert (result.finish_reason, result.error) == ("engine_error", "the server aborted the generation")


def test_the_context_budget_uses_the_servers_larger_prompt_count(tiny_model, video):
    """A server that ignores mm_processor_kwargs (SGLang's chat endpoint) and upsizes the 8 overview frames
    to 96x96 counts 8 x (9 - 4) = 40 prompt tokens more than we do: each turn is counted as a mismatch and
    the next generation's budget leaves room for the server's count, not ours."""
    checkpoint = {"size": {"shortest_edge": 96 * 96, "longest_edge": 128 * 128}}
    scripted = ScriptedEngine(tiny_model.processor, [crop(1, 3), "<answer>A</answer>"], subagent="ok")
    server = TinyChatServer(scripted, checkpoint_images_kwargs=checkpoint, honour_mm_processor_kwargs=False)
    with server:
        client = OpenAIEngine(server.base_url, "tiny", processor=tiny_model.processor)
        cfg = tiny_agent_config(max_context_tokens=1000, max_new_tokens=2000)
        result = asyncio.run(arun_episode({"video": str(video), "question": "Which shape?"}, client, cfg))
        main_bodies = [b for b in server.bodies if b["messages"][0]["role"] == "system"]
    assert (result.finish_reason, len(result.turns)) == ("answer", 2)
    # both main turns (40 more each) and the sub-agent (2 crop frames: 2 x 5 = 10 more)
    assert result.prompt_token_mismatches == 2 and client.prompt_token_mismatches == 3
    first_gen = next(i for i, s in enumerate(result.main.segments) if s.kind == "generated")
    prompt0 = sum(len(s) for s in result.main.segments[:first_gen])
    prompt1 = len(result.main) - len(result.main.segments[-1])  # everything before the last generation
    assert [b["max_tokens"] for b in main_bodies] == [1000 - prompt0, 1000 - prompt1 - 40]
