"""Behaviour once tested against our own OpenAI-compatible test server, now against the real vLLM server of the
session (tests/fixtures/vllm_server.py): batched completions keep request order and equal the served model's
own greedy replies; ``paravt agent run`` with ``--engine vllm`` and ``--engine openai`` gives the in-process
engine's trajectory. (The test server stays for the faults it injects: 5xx, timeouts, Retry-After, cut replies.)"""

from __future__ import annotations

import asyncio
import json

from paravt_core.cli import main as paravt
from paravt_core.engines.openai_engine import OpenAIEngine
from paravt_core.engines.transformers_engine import TransformersEngine
from paravt_core.engines.vllm_engine import VllmEngine
from tests.support.agent_cli_support import FAST
from tests.support.openai_support import _direct, _frame, _request


def test_batched_completions_keep_order_and_equal_the_models_greedy_replies(vllm_server, tiny_model):
    requests = [_request(f"Question {i}: what is shown?", _frame(i)) for i in range(3)]
    expected = [_direct(TransformersEngine(tiny_model.model, tiny_model.processor), r) for r in requests]
    assert len(set(expected)) > 1  # the replies differ, so a swapped order would show
    client = OpenAIEngine(vllm_server.base_url, vllm_server.model, max_retries=0)
    completions = asyncio.run(client.generate(requests))
    # vLLM's text: special tokens stripped (as _direct does), and a last partial UTF-8 character held back
    assert [c.text for c in completions] == [e.removesuffix("\ufffd") for e in expected]
    processor = tiny_model.processor
    for request, completion in zip(requests, completions, strict=True):
        text = processor.apply_chat_template(request.messages, add_generation_prompt=True, tokenize=False)
        frame = request.messages[1]["content"][0]["image"]
        assert completion.prompt_tokens == len(processor(text=[text], images=[frame])["input_ids"][0])
        assert not completion.exact_tokens  # re-tokenized text: the plain OpenAI engine
    exact = asyncio.run(VllmEngine(vllm_server.base_url, vllm_server.model).generate(requests))
    decode = processor.tokenizer.decode
    assert [decode(c.token_ids, skip_special_tokens=True) for c in exact] == expected  # vLLM's own ids
    assert all(c.exact_tokens and len(c.logprobs) == len(c.token_ids) for c in exact)


def _trajectory(tmp_path, name: str, tiny_model_dir: str, video, engine: list[str]) -> dict:
    out = tmp_path / f"{name}.json"
    args = ["agent", "run", *engine, "--model", tiny_model_dir, "--video", str(video)]
    args += ["--question", "What is shown?", "--json", str(out)]
    assert paravt(args + FAST) == 0
    return json.loads(out.read_text())


def test_agent_run_on_vllm_gives_the_in_process_trajectory(vllm_server, tiny_model_dir, video, tmp_path):
    local = _trajectory(tmp_path, "local", tiny_model_dir, video, [])
    served = ["--base-url", vllm_server.base_url, "--served-model", vllm_server.model]
    exact = _trajectory(tmp_path, "vllm", tiny_model_dir, video, ["--engine", "vllm", *served])
    plain = _trajectory(tmp_path, "openai", tiny_model_dir, video, ["--engine", "openai", *served])
    for run in (exact, plain):
        assert run["finish_reason"] == local["finish_reason"]
        assert [t["text"] for t in run["turns"]] == [t["text"] for t in local["turns"]], run["turns"]
    # vLLM's own token ids: the same trace, token for token counted, as in process (the plain OpenAI engine
    # re-tokenizes its text, one token short here)
    assert exact["main_trace"]["tokens"] == local["main_trace"]["tokens"]
    assert [t["tokens"] for t in exact["turns"]] == [t["tokens"] for t in local["turns"]]
