"""The training core shared by SFT and RL (``paravt_core.train``): chunked log-probs, the frozen vision tower,
activation checkpointing in ``eval()`` mode, the long-episode rule, and the 2-rank mixed-precision learner."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from paravt_core.models import load
from paravt_core.rl.learner import PolicyLogprobs, pack_sample, packed_logprobs, trace_sequence
from paravt_core.sft.packing import pack
from paravt_core.train.fsdp import CoreOptions, decoder_layers, prepare
from tests.support.paths import ROOT
from tests.support.rl_support import rollout_samples, tiny_learner, tiny_rl_config

REPO = ROOT


@pytest.fixture(scope="module")
def samples(rl_data, tiny_model_dir):
    return rollout_samples(tiny_rl_config(rl_data, tiny_model_dir, "unused"), tiny_model_dir, rl_data)


def test_chunked_logprobs_equal_the_full_logits_in_float64(samples, tiny_model_dir):
    model = load(tiny_model_dir, dtype=torch.float64).model
    seqs = [trace_sequence(s.episode.main, model.config.image_token_id, None) for s in samples[:3]]
    batch = pack([pack_sample(model.config, s) for s in seqs])
    assert batch.pixel_values_videos is not None or batch.pixel_values is not None  # real frames go through
    root = PolicyLogprobs(model, chunk=7)  # 7 positions per lm_head block: many blocks, a ragged last one
    with torch.no_grad():
        chunked = torch.cat(packed_logprobs(root, batch, 0.7))
        # the reference: the model's own full logits over every position, log_softmax over the vocabulary
        logits = model(**batch.model_inputs(), use_cache=False).logits[0]
        full_lp = torch.log_softmax(logits / 0.7, dim=-1)
    targets = batch.targets[0]
    trained = torch.nonzero(targets != -100).flatten()
    assert trained.numel() > 7
    want = torch.zeros_like(chunked)
    want[trained + 1] = full_lp[trained, targets[trained]]
    assert chunked.dtype == torch.float64
    assert float((chunked - want).abs().max()) <= 1e-6


def test_chunked_logprobs_gradient_equals_the_unchunked_one():
    from paravt_core.train.logprobs import target_logprobs

    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(13, 8, dtype=torch.float64, generator=g, requires_grad=True)
    weight = torch.randn(50, 8, dtype=torch.float64, generator=g, requires_grad=True)
    targets = torch.randint(0, 50, (13,), generator=g)
    target_logprobs(hidden, weight, targets, temperature=0.7, chunk=4).sum().backward()
    got = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    full = torch.log_softmax(hidden @ weight.T / 0.7, dim=-1)
    full.gather(-1, targets[:, None]).sum().backward()
    assert torch.allclose(got[0], hidden.grad, atol=1e-12) and torch.allclose(got[1], weight.grad, atol=1e-12)


def test_bf16_head_log_probs_are_computed_in_float32_against_a_float64_reference():
    """bf16 hidden states and head (the GPU learner's dtypes): the log-softmax must run in float32. In bf16
    itself logits / T, their logsumexp and the difference are each rounded to 8 significant bits (a log-prob
    near -8 to a multiple of 2**-5): off by up to 0.05 nats here."""
    from paravt_core.train.logprobs import target_logprobs

    g = torch.Generator().manual_seed(0)
    steps = torch.tensor([-1.0, -0.5, 0.0, 0.5, 1.0], dtype=torch.float64)
    # entries in halves and 4 of them per dot product: every logit is a multiple of 0.25 in [-4, 4], exact in
    # bf16, so the float64 reference below sees exactly the logits the bf16 head produces
    hidden64 = steps[torch.randint(0, 5, (9, 4), generator=g)]
    weight64 = steps[torch.randint(0, 5, (3000, 4), generator=g)]
    targets = torch.randint(0, 3000, (9,), generator=g)
    reference = (
        torch.log_softmax(hidden64 @ weight64.T / 0.7, dim=-1).gather(-1, targets[:, None]).squeeze(-1)
    )
    assert float(reference.max()) < -5.0  # a 3000-token vocabulary: every log-prob is far below 0
    hidden, weight = hidden64.to(torch.bfloat16), weight64.to(torch.bfloat16)
    assert torch.equal(torch.nn.functional.linear(hidden, weight).double(), hidden64 @ weight64.T)
    for requires_grad in (False, True):  # the plain path and the checkpointed one of training
        h = hidden.clone().requires_grad_(requires_grad)
        got = target_logprobs(h, weight, targets, temperature=0.7, chunk=4)  # chunks of 4, 4, 1
        assert float((got.double() - reference).abs().max()) <= 1e-5
        assert got.dtype == torch.float32


@pytest.mark.parametrize("freeze_vision", [True, False])
def test_frozen_vision_tower_is_unchanged_and_not_optimized(samples, rl_data, tiny_model_dir, freeze_vision):
    cfg = tiny_rl_config(rl_data, tiny_model_dir, "unused", "optim.lr=1e-3")
    learner = tiny_learner(cfg, tiny_model_dir, opts=CoreOptions(freeze_vision=freeze_vision))
    visual = dict(learner.model.model.visual.named_parameters())
    before = {k: v.detach().clone() for k, v in visual.items()}
    lm_before = learner.model.lm_head.weight.detach().clone()
    stats = learner.step(samples)
    assert stats["trained_sequences"] == 8 and stats["grad_norm"] > 0
    in_optimizer = {id(p) for group in learner.optimizer.param_groups for p in group["params"]}
    changed = [k for k, v in visual.items() if not torch.equal(v, before[k])]
    assert not torch.equal(learner.model.lm_head.weight, lm_before)  # the language model trained
    if freeze_vision:
        assert changed == [] and not any(id(p) in in_optimizer for p in visual.values())
        assert all(not p.requires_grad for p in visual.values())
    else:  # the control: the same step moves the tower when it is not frozen
        assert len(changed) == len(visual) and all(id(p) in in_optimizer for p in visual.values())


def test_no_weight_decay_on_norms_and_biases(tiny_model_dir):
    from paravt_core.train.fsdp import make_adamw

    model = load(tiny_model_dir).model
    prepare(model, CoreOptions(freeze_vision=False, activation_checkpointing=False), trainable=True)
    opt = make_adamw(model, 1e-3, 0.1, (0.9, 0.999))
    decay = {id(p) for p in opt.param_groups[0]["params"]}
    for name, p in model.named_parameters():
        is_norm_or_bias = name.endswith(".bias") or "norm" in name.rsplit(".", 2)[-2]
        assert (id(p) in decay) == (not is_norm_or_bias), name
    assert opt.param_groups[1]["weight_decay"] == 0.0


@pytest.mark.parametrize("checkpointing", [True, False])
def test_activation_checkpointing_recomputes_in_eval_mode(samples, rl_data, tiny_model_dir, checkpointing):
    cfg = tiny_rl_config(rl_data, tiny_model_dir, "unused")
    learner = tiny_learner(cfg, tiny_model_dir, opts=CoreOptions(activation_checkpointing=checkpointing))
    assert not learner.root.training  # no dropout anywhere
    layer = decoder_layers(learner.model)[0]
    inner = getattr(layer, "_checkpoint_wrapped_module", layer)
    assert (inner is not layer) == checkpointing
    calls = []
    # a pre-hook: the recompute stops early (non-reentrant checkpoint) once it has what the backward needs
    inner.register_forward_pre_hook(lambda *_: calls.append(torch.is_grad_enabled()))
    passes = int(learner.step(samples[:4])["forward_passes"])
    # per pass: prox (no grad), then the trained forward; with checkpointing, one more in the backward
    no_grad, with_grad = calls.count(False), calls.count(True)
    assert passes >= 1 and no_grad == passes and with_grad == passes * (2 if checkpointing else 1), calls


def test_an_episode_longer_than_the_pack_is_refused_and_counted(samples, rl_data, tiny_model_dir):
    cfg = tiny_rl_config(rl_data, tiny_model_dir, "unused")
    lengths = sorted(len(s.episode.main.token_ids) for s in samples)
    limit = lengths[len(lengths) // 2]  # about half the episodes are longer
    longer = sum(n > limit for n in lengths)
    assert 0 < longer < len(lengths)
    learner = tiny_learner(cfg, tiny_model_dir, limit)
    stats = learner.step(samples)
    assert stats["skipped_too_long"] == longer
    assert stats["trained_sequences"] == len(samples) - longer


def _moved_share(result: dict) -> float:
    """Share of the decoder layers' weight elements that changed in the step."""
    keys = [k for k in result["moved"] if ".language_model.layers." in k]
    return sum(result["moved"][k] for k in keys) / sum(result["sizes"][k] for k in keys)


def test_two_rank_learner_fp32_masters_move_at_lr_2e6_where_bf16_only_does_not(
    samples, tiny_model_dir, tmp_path
):
    path = tmp_path / "samples.pt"
    torch.save(samples, path)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    run = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    shares = {}
    for mode in ("fp32_master", "bf16_only"):
        out = tmp_path / f"{mode}.pt"
        cmd = [
            *run,
            str(REPO / "tests" / "support" / "train_mp_worker.py"),
            tiny_model_dir,
            str(path),
            mode,
            str(out),
        ]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        result = torch.load(out, weights_only=False)
        assert result["stats"]["trained_sequences"] == 8 and result["stats"]["grad_norm"] > 0
        shares[mode] = _moved_share(result)
    print(f"decoder weights moved at lr 2e-6: {shares}")
    # AdamW's first step moves every weight with a nonzero gradient by ~lr: float32 holds a 2e-6 step on
    # weights of ~0.02 (ulp 1.9e-9); bf16 (ulp 1.2e-4 at 0.02) keeps only the rare |w| < ~5e-4.
    assert shares["fp32_master"] > 0.9
    assert shares["bf16_only"] < 0.05


def test_handoff_payload_has_no_pixels_and_every_rank_rebuilds_the_same_pixels(
    samples,
    rl_data,
    tiny_model_dir,
):
    import pickle

    from paravt_core.engines.base import image_processor_kwargs
    from paravt_core.rl.handoff import compact, restore

    cfg = tiny_rl_config(rl_data, tiny_model_dir, "unused")
    full_bytes = len(pickle.dumps(samples))
    payload = pickle.dumps(compact(samples))
    got = pickle.loads(payload)
    assert all(seg.pixel_values is None for s in got for seg in s.episode.main.segments)
    kwargs = image_processor_kwargs(max_pixels=cfg.agent.max_pixels, min_pixels=cfg.agent.min_pixels)
    restore(got, load(tiny_model_dir).processor, kwargs)
    trainable = [s for s in samples if s.trainable]
    assert len(got) == len(trainable) > 0
    for mine, theirs in zip(trainable, got, strict=True):
        assert theirs.episode.main.pixel_values is not None
        assert torch.equal(theirs.episode.main.pixel_values, mine.episode.main.pixel_values)  # bit for bit
        assert theirs.episode.main.token_ids == mine.episode.main.token_ids
    print(f"handoff bytes: full samples {full_bytes}, learner view {len(payload)}")
    assert len(payload) < full_bytes / 4


def test_handoff_sends_only_the_trainable_samples(samples):
    """An engine failure, an episode without a main trace and one with nothing to train (every loss-mask
    entry 0) are not trainable: the learner view leaves exactly those out and keeps the others in order."""
    import copy

    from paravt_core.rl.handoff import compact

    assert [(s.group, s.index) for s in samples] == [(g, i) for g in (0, 1) for i in range(4)]
    assert all(s.trainable for s in samples)
    mixed = list(samples)
    mixed[1] = dataclasses.replace(
        samples[1], episode=dataclasses.replace(samples[1].episode, finish_reason="engine_error")
    )
    mixed[4] = dataclasses.replace(
        samples[4], episode=dataclasses.replace(samples[4].episode, conversation=None)
    )
    masked = copy.deepcopy(samples[6].episode)
    for seg in masked.main.segments:
        seg.loss_mask = [0] * len(seg.loss_mask)
    mixed[6] = dataclasses.replace(samples[6], episode=masked)
    got = compact(mixed)
    assert [(s.group, s.index) for s in got] == [(0, 0), (0, 2), (0, 3), (1, 1), (1, 3)]
    assert [s.reward.total for s in got] == [1.0, 0.5, -1.0, 0.0, -1.0]  # HAND_REWARDS by index
    assert [s.episode.main.token_ids for s in got] == [
        mixed[i].episode.main.token_ids for i in (0, 2, 3, 5, 7)
    ]


@pytest.mark.parametrize("freeze_vision", [True, False])
def test_sft_leaves_the_vision_tower_as_loaded_unless_told(
    tiny_model_dir, sft_data_output, tmp_path, freeze_vision
):
    from safetensors.torch import load_file

    from paravt_core.config import SftConfig, load_config
    from paravt_core.sft.stage import run as run_sft

    out = tmp_path / "sft"
    overrides = [f"model.uri={tiny_model_dir}", f"data.input={sft_data_output}", f"output={out}"]
    overrides += [f"work_dir={out}-work", "trainer.steps=2", "trainer.lr=1e-3", "data.num_workers=0"]
    overrides += [f"train.freeze_vision={freeze_vision}"]
    run_sft(load_config(SftConfig, REPO / "configs" / "sft" / "tiny.yaml", overrides))
    start = load_file(str(Path(tiny_model_dir) / "model.safetensors"))
    final = load_file(str(out / "final" / "model.safetensors"))
    vision = [k for k in start if k.startswith("model.visual.")]
    moved = [k for k in vision if not torch.equal(start[k], final[k].to(start[k].dtype))]
    assert len(vision) > 10 and not torch.equal(start["lm_head.weight"], final["lm_head.weight"])
    assert moved == [] if freeze_vision else len(moved) > len(vision) // 2


def test_sharded_build_reads_the_checkpoint_on_rank_0_only_and_every_shard_holds_it(tiny_model_dir, tmp_path):
    from safetensors.torch import load_file

    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd += [str(REPO / "tests" / "support" / "train_build_worker.py"), tiny_model_dir, str(tmp_path / "out")]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    r0, r1 = (torch.load(tmp_path / f"out.{r}.pt", weights_only=False) for r in (0, 1))
    # rank 0 read the weights once, on the CPU, in their stored dtype; rank 1 never read them
    r0_load = {"device": "cpu", "dtype": "None", "purpose": "trained model (rank 0 reads, then broadcasts)"}
    assert r0["calls"] == [r0_load] and r1["calls"] == []
    assert r0["model_is_none"] and r1["model_is_none"]  # no host copy kept after the broadcast
    assert r0["dtypes"] == r1["dtypes"] == {"torch.float32"}
    assert all("Shard(dim=0)" in p for p in r1["placements"].values())  # every parameter is sharded
    start = load_file(str(Path(tiny_model_dir) / "model.safetensors"))
    reference = load(tiny_model_dir).model
    for rank in (r0, r1):
        got = {k.removeprefix("inner."): v for k, v in rank["full"].items()}
        assert got.keys() == start.keys()
        for name, tensor in start.items():
            assert torch.equal(got[name], tensor.float()), name
        for name, buf in reference.named_buffers():  # the rotary inv_freq: not in any state dict
            assert torch.equal(rank["buffers"]["inner." + name], buf), name
