"""OpenAIEngine against a real loopback server serving the tiny model (tests/openai_test_server.py)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from paravt_core.agent.episode import FINISH_REASONS, arun_episode
from paravt_core.engines.base import EngineError, GenerationRequest, SamplingParams
from paravt_core.engines.openai_engine import OpenAIEngine, to_openai_messages
from paravt_core.engines.transformers_engine import TransformersEngine
from tests.agent_support import tiny_agent_config, video  # noqa: F401
from tests.openai_test_server import TinyChatServer, _decode_data_url


@pytest.fixture(scope="module")
def engine(tiny_model) -> TransformersEngine:
    return TransformersEngine(tiny_model.model, tiny_model.processor)


def _frame(seed: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.integers(0, 256, (3, 64, 64), dtype=np.uint8))


def _request(question: str, frame: torch.Tensor, max_new_tokens: int = 12) -> GenerationRequest:
    messages = [
        {"role": "system", "content": "You describe frames."},
        {"role": "user", "content": [{"type": "image", "image": frame}, {"type": "text", "text": question}]},
    ]
    return GenerationRequest(messages=messages, sampling=SamplingParams(max_new_tokens=max_new_tokens))


def _direct(engine: TransformersEngine, request: GenerationRequest) -> str:
    """What the served model writes for this request, computed in-process without HTTP."""
    processor = engine.processor
    text = processor.apply_chat_template(request.messages, add_generation_prompt=True, tokenize=False)
    images = [
        p["image"]
        for m in request.messages
        if isinstance(m["content"], list)
        for p in m["content"]
        if p["type"] == "image"
    ]
    inputs = processor(text=[text], images=images, return_tensors="pt")
    local = GenerationRequest(
        input_ids=inputs["input_ids"][0].tolist(),
        pixel_values=inputs["pixel_values"],
        image_grid_thw=inputs["image_grid_thw"],
        sampling=request.sampling,
    )
    (completion,) = engine.generate_sync([local])
    ids = completion.token_ids
    if completion.finish_reason == "stop":
        ids = ids[:-1]
    return engine.tokenizer.decode(ids, skip_special_tokens=True)


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


def test_completions_match_the_served_model_and_keep_request_order(engine):
    requests = [_request(f"Question {i}: what is shown?", _frame(i)) for i in range(3)]
    with TinyChatServer(engine) as server:
        client = OpenAIEngine(server.base_url, "tiny", max_retries=0)
        completions = asyncio.run(client.generate(requests))
        assert server.attempts == 3
    for request, completion in zip(requests, completions, strict=True):
        assert completion.text == _direct(engine, request)
        assert not completion.exact_tokens and completion.prompt_tokens > 0
    assert len({c.text for c in completions}) > 1  # different prompts, different answers


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


def test_api_key(engine):
    with TinyChatServer(engine, api_key="sk-right") as server:
        ok = OpenAIEngine(server.base_url, "tiny", api_key="sk-right")
        assert asyncio.run(ok.chat([{"role": "user", "content": "hi"}], max_new_tokens=4)) is not None
        wrong = OpenAIEngine(server.base_url, "tiny", api_key="sk-wrong-secret", max_retries=0)
        with pytest.raises(EngineError, match="HTTP 401") as info:
            asyncio.run(wrong.chat([{"role": "user", "content": "hi"}]))
        assert "sk-wrong-secret" not in str(info.value)


def test_episode_over_http_with_forced_think_prefix(engine, tiny_model, video):  # noqa: F811
    with TinyChatServer(engine) as server:
        client = OpenAIEngine(server.base_url, "tiny", processor=tiny_model.processor)
        cfg = tiny_agent_config(think_prefix=True, max_new_tokens=16)
        result = asyncio.run(arun_episode({"video": str(video), "question": "What is shown?"}, client, cfg))
        first = server.bodies[0]
    assert result.finish_reason in FINISH_REASONS and result.turns
    assert first["continue_final_message"] is True
    assert first["messages"][-1] == {"role": "assistant", "content": "<think>\n"}
    images = [p for p in first["messages"][1]["content"] if p["type"] == "image_url"]
    assert len(images) == 8  # the overview frames
    assert result.turns[0].text.startswith("<think>\n")
