"""The RL stage on the tiny model and the data stage's output for synthetic videos: rollouts through the real
episode loop, the learner, weight sync (checksums, policy versions), outputs, bad input."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from paravt_core import checkpoint
from paravt_core.agent.parsing import format_tool_call
from paravt_core.engines.base import EngineError
from paravt_core.engines.coalesce import CoalescingEngine
from paravt_core.engines.scripted import RoutedEngine, ScriptedEngine
from paravt_core.engines.transformers_engine import TransformersEngine
from paravt_core.models import load
from paravt_core.rl.data import load_prompts
from paravt_core.rl.gating import nframes_for
from paravt_core.rl.learner import (
    Learner,
    PolicyLogprobs,
    pack_groups,
    pack_sample,
    packed_logprobs,
    state_checksum,
    trace_sequence,
    vision_tokens_ok,
)
from paravt_core.rl.rollout import arollout_step
from paravt_core.rl.stage import prompts_for_step, run
from paravt_core.sft.packing import pack
from tests.support.rl_support import tiny_rl_config


def test_prompts_come_from_the_data_stage_output(rl_data, synth_dataset):
    data = load_prompts(rl_data)
    rows = pq.read_table(next(Path(rl_data, "rl").glob("*.parquet"))).to_pylist()
    assert len(data.prompts) == len(rows) and not data.skipped
    first = data.prompts[0]
    assert first.row_id == rows[0]["id"] and first.gold == rows[0]["extra_info"]["answer"]
    assert "<video>" not in first.question and first.question in rows[0]["prompt"][0]["content"]
    assert Path(first.video).is_file()


def test_missing_video_and_malformed_rows_are_skipped_and_counted(rl_data, tmp_path):
    rows = pq.read_table(next(Path(rl_data, "rl").glob("*.parquet"))).to_pylist()
    rows[0]["videos"] = [{"video": str(tmp_path / "gone.mp4")}]
    rows[1]["prompt"] = [{"role": "user", "content": "<video>"}]  # no question left
    (tmp_path / "rl").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rl" / "x.parquet")
    data = load_prompts(str(tmp_path))
    assert dict(data.skipped) == {"missing_video": 1, "no_question": 1}
    assert len(data.prompts) == len(rows) - 2


def test_data_order_is_a_seeded_permutation_per_epoch(rl_data):
    prompts = load_prompts(rl_data).prompts
    n = len(prompts)
    epoch0 = [p.row_id for s in range(n) for p in prompts_for_step(prompts, s, 1, seed=5)]
    assert sorted(epoch0) == sorted(p.row_id for p in prompts)  # every prompt once per epoch
    assert prompts_for_step(prompts, 3, 2, seed=5) == prompts_for_step(prompts, 3, 2, seed=5)


def test_one_step_by_hand_weights_synced_and_versions_recorded(rl_data, tiny_model_dir, tmp_path):
    cfg = tiny_rl_config(rl_data, tiny_model_dir, str(tmp_path / "out"), "group_size=3", "prompts_per_step=2")
    policy, reference, rollout = (load(tiny_model_dir) for _ in range(3))
    inner = TransformersEngine(rollout.model, rollout.processor)
    engine = CoalescingEngine(inner, seed=0)
    learner = Learner(
        policy.model,
        reference.model,
        temperature=0.7,
        advantage=cfg.advantage,
        loss=cfg.loss,
        optim=cfg.optim,
    )
    before = state_checksum(policy.model.state_dict())
    prompts = load_prompts(rl_data).prompts[:2]

    step0 = asyncio.run(arollout_step(prompts, engine, cfg.agent, cfg.paravt, group_size=3, version=0))
    samples = step0.samples
    assert [(s.group, s.index) for s in samples] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    for s in samples:
        k = nframes_for(s.prompt.row_id, enabled=True, seed=0, choices=[4, 8], default=8)
        assert s.nframes == k and s.episode.nframes == k  # the gated K reached the sampler
        assert s.episode.turns[0].text.startswith("<think>\n")  # PARA-GRPO's forced prefix
        assert s.policy_version == 0
    # the group's episodes ran concurrently and were coalesced: fewer engine calls than requests
    assert engine.batches < engine.requests

    stats = learner.step(samples)
    assert stats["trained_sequences"] > 0 and stats["grad_norm"] > 0
    after = state_checksum(policy.model.state_dict())
    assert after != before  # the step changed the weights
    assert state_checksum(inner.model.state_dict()) == before  # not pushed yet
    inner.load_weights(learner.weights())
    assert state_checksum(inner.model.state_dict()) == after  # engine == learner after the sync
    assert inner.weight_version == 1
    step1 = asyncio.run(
        arollout_step(prompts, engine, cfg.agent, cfg.paravt, group_size=3, version=inner.weight_version)
    )
    assert {s.policy_version for s in step1.samples} == {1}


def test_stage_runs_three_steps_and_writes_its_outputs(rl_data, tiny_model_dir, tmp_path):
    out = tmp_path / "rl"
    result = run(tiny_rl_config(rl_data, tiny_model_dir, str(out), "checkpoint.every=2"))
    history = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in history] == [0, 1, 2]
    assert [m["policy_versions"] for m in history] == [[0], [1], [2]]  # synchronous: sampled by the latest
    assert [m["policy_version"] for m in history] == [1, 2, 3]
    for m in history:
        assert m["samples"] == 8 and sum(m["k_histogram"].values()) == 8  # 2 prompts x 4 rollouts
        assert set(m["k_histogram"]) <= {"4", "8"}
        for key in (
            "reward_mean",
            "format_mean",
            "format_compliance",
            "tool_call_rate",
            "loss",
            "kl_ref",
            "clip_fraction",
            "dropped_fraction",
            "staleness_max",
            "rollout_s",
            "learner_s",
            "sync_s",
        ):
            assert key in m
    assert [s for s, _, ok in checkpoint.list_checkpoints(str(out)) if ok] == [2, 3]
    trainer = json.loads((out / "checkpoints" / "step_00000003" / "trainer.json").read_text())
    assert (
        trainer["step"] == 3
        and trainer["policy_version"] == 3
        and trainer["reference_model"] == tiny_model_dir
    )
    final = load(result.outputs["final"])  # the HF checkpoint holds exactly the trained weights
    assert state_checksum(final.model.state_dict()) == trainer["weights_sha256"]
    assert state_checksum(final.model.state_dict()) != state_checksum(load(tiny_model_dir).model.state_dict())
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    lines = (out / "trajectories" / "step_00000001.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["episode"]["turns"]
    assert (out / "_COMPLETE").exists() and result.metrics["steps"] == 3


def test_bounded_staleness_trains_on_samples_at_most_one_version_old(rl_data, tiny_model_dir, tmp_path):
    out = tmp_path / "rl"
    run(tiny_rl_config(rl_data, tiny_model_dir, str(out), "max_staleness=1", "steps=4", "checkpoint.every=4"))
    history = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["staleness_max"] for m in history][0] == 0  # step 0: nothing trained yet
    for m in history:
        step = m["step"]
        # learner at version `step` trains samples started under version step - 1 or step, never older
        assert set(m["policy_versions"]) <= {step - 1, step} and m["staleness_max"] <= 1
    # the next step's rollouts ran while the learner trained: they were sampled by the previous version
    assert max(m["staleness_max"] for m in history) == 1
    assert history[-1]["policy_version"] == 4


def test_overflow_and_engine_failures(rl_data, tiny_model_dir, tmp_path, monkeypatch):
    # a context too small for the system prompt: every episode ends with context_overflow, none is trained,
    # the stage still completes and counts them
    out = tmp_path / "small"
    run(tiny_rl_config(rl_data, tiny_model_dir, str(out), "steps=1", "agent.max_context_tokens=256"))
    (m,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert m["finish_reasons"] == {"context_overflow": 8} and m["untrained_samples"] == 8
    assert m["trained_sequences"] == 0

    # an engine that always fails: retried by the coalescer, then the stage stops with one clear error
    calls = []

    def broken(self, requests):
        calls.append(len(requests))
        raise EngineError("CUDA out of memory (injected)")

    monkeypatch.setattr(TransformersEngine, "generate_sync", broken)
    with pytest.raises(EngineError, match="failed every episode.*out of memory"):
        run(tiny_rl_config(rl_data, tiny_model_dir, str(tmp_path / "broken"), "steps=1"))
    assert len(calls) == 3  # one coalesced batch, tried 1 + 2 retries


def test_checksum_sees_any_change():
    state = {"a": torch.zeros(3), "b": torch.ones(2)}
    changed = {"a": torch.tensor([0.0, 0.0, 1e-7]), "b": torch.ones(2)}
    assert state_checksum(state) == state_checksum({k: v.clone() for k, v in state.items()})
    assert state_checksum(state) != state_checksum(changed)


def _one_by_one_logprobs(model, seq, temperature):
    """Reference: one unpadded sequence per forward, every position projected (log p of token t at t)."""
    inputs = {
        "input_ids": seq.input_ids[None],
        "attention_mask": torch.ones(1, len(seq), dtype=torch.long),
        "mm_token_type_ids": seq.mm_token_type_ids[None],
    }
    if seq.pixel_values is not None:
        inputs["pixel_values"], inputs["image_grid_thw"] = seq.pixel_values, seq.image_grid_thw
    with torch.no_grad():
        logits = model(**inputs).logits[0, :-1].double()
    picked = torch.log_softmax(logits / temperature, dim=-1).gather(-1, seq.input_ids[1:, None]).squeeze(-1)
    return torch.cat([picked.new_zeros(1), picked])


def test_packed_logprobs_equal_one_by_one_and_the_behaviour_logprobs(rl_data, tiny_model_dir, tmp_path):
    cfg = tiny_rl_config(rl_data, tiny_model_dir, str(tmp_path), "agent.max_turns=0")
    loaded = load(tiny_model_dir)
    engine = CoalescingEngine(TransformersEngine(loaded.model, loaded.processor), seed=3)
    prompts = load_prompts(rl_data).prompts[:3]
    samples = asyncio.run(
        arollout_step(prompts, engine, cfg.agent, cfg.paravt, group_size=2, version=0)
    ).samples
    model = loaded.model
    seqs = [trace_sequence(s.episode.main, model.config.image_token_id, None) for s in samples if s.trainable]
    seqs = [s for s in seqs if vision_tokens_ok(model.config, s)]  # the random model may write image pads
    assert len(seqs) >= 3
    batch = pack([pack_sample(model.config, s) for s in seqs])  # all sequences in one forward pass
    with torch.no_grad():
        packed = packed_logprobs(PolicyLogprobs(model), batch, 0.7)
    for seq, got in zip(seqs, packed, strict=True):
        mask = seq.loss_mask > 0
        want = _one_by_one_logprobs(model, seq, 0.7)
        assert torch.allclose(got[mask].double(), want[mask], atol=1e-5)  # no attention across samples
        assert torch.all(got[~mask] == 0)
        # the engine's behaviour log-probs (batched, left-padded generate) are the same distribution
        assert torch.allclose(seq.behav_logp[mask].double(), want[mask], atol=1e-4)


def test_pack_groups_respect_the_token_limit():
    # lengths 5, 4, 3, 9, 2 with limit 9: [5, 4] = 9, [3], [9], [2]... greedy in order
    assert pack_groups([5, 4, 3, 9, 2], 9) == [[0, 1], [2], [3], [4]]
    assert pack_groups([12, 1], 9) == [[0], [1]]  # an over-long sequence gets its own pass


@pytest.mark.parametrize("train_subagents", [False, True])
def test_subagent_generations_are_trained_only_when_asked(rl_data, tiny_model_dir, tmp_path, train_subagents):
    cfg = tiny_rl_config(
        rl_data,
        tiny_model_dir,
        str(tmp_path),
        f"agent.subagent.train={train_subagents}",
        "agent.max_new_tokens=256",
    )
    policy, reference, rollout = (load(tiny_model_dir) for _ in range(3))
    calls = "\n".join(
        format_tool_call("crop_video", {"start_time": a, "end_time": b}) for a, b in ((0, 3), (4, 7))
    )
    # scripted main agent (both episodes of the group: two calls, then an answer); real tiny sub-agents
    main = ScriptedEngine(
        rollout.processor, ["look closer</think>\n" + calls] * 2 + ["done.</think><answer>A</answer>"] * 2
    )
    engine = RoutedEngine(main, TransformersEngine(rollout.model, rollout.processor))
    prompt = load_prompts(rl_data).prompts[0]
    samples = asyncio.run(
        arollout_step([prompt], engine, cfg.agent, cfg.paravt, group_size=2, version=0)
    ).samples
    assert [c.ok for s in samples for c in s.episode.calls] == [True] * 4, [
        (s.episode.finish_reason, [c.error for c in s.episode.calls]) for s in samples
    ]
    learner = Learner(
        policy.model,
        reference.model,
        temperature=0.7,
        advantage=cfg.advantage,
        loss=cfg.loss,
        optim=cfg.optim,
    )
    stats = learner.step(samples)
    mains = 2
    if train_subagents:  # every sub-agent report is a sequence of its own (unless it wrote image pads)
        assert stats["trained_sequences"] + stats["skipped_vision_tokens"] == mains + 4
        assert stats["subagent_sequences"] == stats["trained_sequences"] - mains >= 1
    else:
        assert (stats["trained_sequences"], stats["subagent_sequences"]) == (mains, 0)
