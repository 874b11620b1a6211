"""vLLM answering: the eval stage end to end against a real vLLM server (its CPU build, tests/fixtures/
vllm_server.py) serving the tiny Qwen3-VL, through the OpenAI engine. Every request asks vLLM for the prompt
token ids it built (``return_token_ids``): they must equal, id for id, the ``input_ids`` our own processor
made for the same messages and frames, so the pixels and template the model sees are the ones we send. And
the log-probs vLLM reports for what it samples are the RL learner's own on the same tokens and pixels."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import httpx
import pytest
import torch

from paravt_core.engines.base import EngineError
from paravt_core.engines.openai_engine import OpenAIEngine
from paravt_core.engines.vllm_engine import VllmEngine, served_model
from paravt_core.eval.stage import run
from paravt_core.models import load
from paravt_core.rl.weight_sync import DiskSync, NcclSync, PushFailed, recover
from tests.support.eval_support import TINY_AGENT, tiny_eval_config
from tests.support.paths import ROOT
from tests.support.ports import free_port
from tests.support.rl_support import TINY_RL, straight_then_resumed
from tests.support.vllm_support import (
    _gap,
    _learner_logprobs,
    _moved,
    _sample,
    _weights,
)

PER_PROTOCOL = 25  # the fixture benchmarks' samples (tests/e2e/test_eval_stage.py)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# preset=release: tests/contract/test_release_wire_vllm.py, on a server with the release's image limit (its requests carry the
# fixture videos' 64 overview frames, over this server's 8)
@pytest.mark.parametrize("preset", ["paravt"])
def test_eval_against_vllm_sees_our_prompt_token_ids(
    vllm_server, tiny_model, eval_fixtures, tmp_path, preset
):
    engine = VllmEngine(vllm_server.base_url, vllm_server.model, processor=tiny_model.processor)
    cfg = tiny_eval_config(tmp_path, vllm_server.model, eval_fixtures, protocols=["agentic", "direct"],
                           agent={**TINY_AGENT, "max_new_tokens": 8}, max_error_share=0.0, preset=preset,
                           engine={"kind": "vllm", "base_url": vllm_server.base_url})  # fmt: skip
    run(cfg, engine=engine, processor=tiny_model.processor)
    results = json.loads((Path(cfg.output) / "results.json").read_text())
    assert results["totals"]["samples"] == 2 * PER_PROTOCOL and results["totals"]["errors"] == 0
    records = [r for p in Path(cfg.output, "samples").rglob("*.jsonl") for r in _lines(p)]
    assert len(records) == 2 * PER_PROTOCOL and all(r["status"] == "ok" for r in records)
    # every request's ids compared (one request per turn here: no sub-agent), none different
    assert engine.prompt_ids_checked == sum(r["turns"] for r in records) >= 2 * PER_PROTOCOL
    assert engine.prompt_id_mismatches == 0 and engine.prompt_token_mismatches == 0


def test_greedy_replies_equal_the_in_process_engines(vllm_server, eval_fixtures, tmp_path):
    """Greedy decoding on vLLM (float32, ``engine.kind=vllm``: its own token ids, nothing re-tokenized) and
    in process (transformers): the same reply, token for token, and the same score on every sample."""
    agent = {**TINY_AGENT, "max_new_tokens": 8}
    texts = {}
    for kind in ("vllm", "transformers"):
        engine = {"kind": kind, "base_url": vllm_server.base_url} if kind == "vllm" else {"kind": kind}
        cfg = tiny_eval_config(tmp_path / kind, vllm_server.model, eval_fixtures, protocols=["agentic", "direct"],
                               agent=agent, engine=engine)  # fmt: skip
        run(cfg)
        records = [r for p in Path(cfg.output, "samples").rglob("*.jsonl") for r in _lines(p)]
        texts[kind] = {(r["protocol"], r["benchmark"], r["id"]): (r["final_text"], r["finish_reason"], r["score"])
                       for r in records}  # fmt: skip
    assert len(texts["vllm"]) == 2 * PER_PROTOCOL
    assert texts["vllm"] == texts["transformers"]


def test_sampled_log_probs_equal_the_learners(vllm_server, tiny_model):
    """A multi-turn conversation with 3 images, sampled by vLLM at T = 0.7 (top-k off): the log-prob vLLM
    reports for each token it drew equals the RL learner's (``PolicyLogprobs``, the forward it trains through)
    on the same token ids and pixels, in float32."""
    engine = OpenAIEngine(vllm_server.base_url, vllm_server.model, processor=tiny_model.processor)
    seq, served = _sample(engine, tiny_model.processor)
    assert _gap(served, _learner_logprobs(tiny_model.model, seq)) < 1e-5  # measured 4.8e-7 (16 tokens)
    # and not the untempered values (vLLM's default raw_logprobs): those differ by far more
    assert _gap(served, _learner_logprobs(tiny_model.model, seq, temperature=1.0)) > 1e-3


def test_a_disk_push_serves_the_new_weights(tiny_model_dir, push_server, tmp_path):
    """DiskSync's push into vLLM (``VllmEngine``: paused, reloaded, caches reset, versioned, resumed): the
    same 3-image conversation, images already seen by the server, sampled again after the push. The server
    lives (a reload without the cache resets kills it on such a request), and the served log-probs are the
    learner's with the new weights, not the old."""
    old, new = load(tiny_model_dir), _moved(tiny_model_dir)
    engine = VllmEngine(push_server.base_url, push_server.model, processor=old.processor)
    sync = DiskSync(engine, old.model, str(tmp_path / "staging"))
    sync.push(_weights(old.model), version=0)  # whoever ran before
    seq, served = _sample(engine, old.processor)
    assert _gap(served, _learner_logprobs(old.model, seq)) < 1e-5
    sync = DiskSync(engine, new.model, str(tmp_path / "staging"))
    sync.push(_weights(new.model), version=1)
    after, served_after = _sample(engine, old.processor)
    info = httpx.get(engine.root + "/weight_info", timeout=30).json()
    assert _gap(served_after, _learner_logprobs(new.model, after)) < 1e-5
    assert _gap(served_after, _learner_logprobs(old.model, after)) > 1e-3
    assert sync.version == 1 and engine.weight_version == "1" and info["weight_version"] == "1"


def _group_sync(engine: VllmEngine) -> NcclSync:
    """The RL stage's push over a process group (gloo: this CPU), in buckets of 1 MiB (several requests)."""
    return NcclSync(engine, master_address="127.0.0.1", master_port=free_port(), server_ranks=1, backend="gloo",
                    bucket_bytes=1 << 20, pause_mode="wait", timeout_s=120)  # fmt: skip


def test_a_group_push_serves_the_new_weights(tiny_model_dir, push_server):
    """NcclSync's push over gloo into vLLM's workers (our transfer backend behind vLLM's weight-transfer
    routes): after it the server answers the images it has seen with the learner's new log-probs, not the old;
    a second sync (another run) joins under a new group; a push of the trainable weights alone (the frozen
    tower left out, as every push after a run's first) changes only what it sends."""
    old, new = load(tiny_model_dir), _moved(tiny_model_dir)
    engine = VllmEngine(push_server.base_url, push_server.model, processor=old.processor)
    sync = _group_sync(engine)
    try:
        sync.push(_weights(old.model), version=0)
        seq, served = _sample(engine, old.processor)
        assert _gap(served, _learner_logprobs(old.model, seq)) < 1e-5
        sync.push(_weights(new.model), version=1)
        assert len(sync.pushed_buckets) > 1  # one /update_weights per bucket
        after, served_after = _sample(engine, old.processor)
        assert _gap(served_after, _learner_logprobs(new.model, after)) < 1e-5
        assert _gap(served_after, _learner_logprobs(old.model, after)) > 1e-3
        assert httpx.get(engine.root + "/weight_info", timeout=30).json()["weight_version"] == "1"
    finally:
        sync.close()
    tower = {n for n in _weights(old.model) if "visual" in n}
    assert tower
    mixed = load(tiny_model_dir)  # the old language model beside the new tower: what a partial push serves
    mixed.model.load_state_dict(
        {**_weights(old.model), **{n: t for n, t in _weights(new.model).items() if n in tower}}
    )
    second = _group_sync(engine)
    try:
        second.push(_weights(new.model), version=2)
        second.static = tower  # sent by a sync's first push only
        second.push(_weights(old.model), version=3)
        assert not any(n in tower for bucket in second.pushed_buckets for n in bucket)
        seq, served = _sample(engine, old.processor)
        assert _gap(served, _learner_logprobs(mixed.model, seq)) < 1e-5
    finally:
        second.close()


def test_an_update_with_no_group_joined_is_refused_before_it_is_sent(vllm_server):
    """vLLM's engine core dies of ``/start_weight_update`` without a transfer engine: refused here, naming what
    is missing, and the server still answers (a server without our backend:
    ``test_release_wire_vllm.py``)."""
    engine = VllmEngine(vllm_server.base_url, vllm_server.model)
    with pytest.raises(EngineError, match="no weight-update group joined"):
        asyncio.run(engine.begin_weight_update())
    assert httpx.get(engine.root + "/health", timeout=30).status_code == 200


def test_a_cut_group_push_restarts_the_owned_server_and_pushes_in_full(
    tiny_model_dir, push_server, monkeypatch
):
    """A push over the group cut after a few tensors (the workers are left waiting in a receive, the engine core
    with them): ``recover`` restarts the server this process owns and pushes the same weights again in full to
    the new one, which then serves them."""
    old, new = load(tiny_model_dir), _moved(tiny_model_dir, seed=1)
    engine = VllmEngine(push_server.base_url, push_server.model, processor=old.processor)
    engine.server = push_server.process
    sync = _group_sync(engine)
    sent = sync._broadcast
    count = {"n": 0}

    def cut_after_three(tensor: torch.Tensor) -> None:
        count["n"] += 1
        if count["n"] > 3:
            raise RuntimeError("link down")
        sent(tensor)

    monkeypatch.setattr(sync, "_broadcast", cut_after_three)
    with pytest.raises(PushFailed, match="link down") as cut:
        sync.push(_weights(new.model), version=1)
    assert engine.wedged is not None and "link down" in engine.wedged
    fresh, said = recover(sync, _weights(new.model), 1, cut.value)
    try:
        assert said.endswith("; restarted the vLLM server this stage owns and pushed version 1 to it")
        assert fresh.group_name != sync.group_name and engine.wedged is None
        seq, served = _sample(engine, old.processor)
        assert _gap(served, _learner_logprobs(new.model, seq)) < 1e-5
    finally:
        fresh.close()


def _steps(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_rl_with_vllm_resumes_after_sigkill(rl_data, tiny_model_dir, push_server, tmp_path):
    """``paravt rl`` with vLLM rollouts killed with SIGKILL after step 2's checkpoint (in step 3: rolling out, or
    with a push to the server cut anywhere, leaving it paused or holding step 3's weights) and run again with
    the same command: it resumes from the checkpoint, pushes that checkpoint's weights before any rollout (step
    3's behaviour log-probs are the learner's own: behav_kl ~ 0), and its steps equal an uninterrupted run's."""
    root = push_server.base_url.removesuffix("/v1")
    base = [sys.executable, "-m", "paravt_core.cli", "rl", "--config", str(TINY_RL), f"data={rl_data}",
            f"model={tiny_model_dir}", "steps=3", "checkpoint.every=1", "engine.kind=vllm",
            f"engine.base_url={root}"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    straight, killed = straight_then_resumed(base, tmp_path, env, after_step=2)  # killed in step 3
    steps = _steps(killed)
    assert [m["policy_version"] for m in steps] == [1, 2, 3]
    assert abs(steps[2]["behav_kl"]) < 1e-5, steps[2]["behav_kl"]  # rolled out on the checkpoint's weights
    keys = ("step", "reward_mean", "loss", "samples", "behav_kl")
    assert [[m.get(k) for k in keys] for m in steps] == [[m.get(k) for k in keys] for m in _steps(straight)]
    assert httpx.get(root + "/weight_info", timeout=30).json()["weight_version"] == "3"
    final = load(str(killed / "final"))  # and it serves the final checkpoint's log-probs
    engine = VllmEngine(root, served_model(root), processor=final.processor)
    seq, served = _sample(engine, final.processor)
    assert _gap(served, _learner_logprobs(final.model, seq)) < 1e-5
