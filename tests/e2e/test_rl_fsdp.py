"""The RL learner sharded with FSDP2 on 2 gloo ranks (``torchrun``): one learner step equals the one-process
step on the same episodes; the stage under torchrun; a 2-rank checkpoint resumed on 1 rank."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from paravt_core import checkpoint
from paravt_core.models import load
from paravt_core.rl.learner import Learner, state_checksum
from paravt_core.rl.stage import run
from tests.support.paths import ROOT
from tests.support.rl_support import TINY_RL, tiny_rl_config

REPO = ROOT
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def _history(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_two_rank_learner_step_equals_the_one_process_step(rl_data, tiny_model_dir, tmp_path):
    worker = str(REPO / "tests" / "support" / "rl_fsdp_worker.py")
    _run([sys.executable, worker, tiny_model_dir, rl_data, str(tmp_path / "one.pt")])
    _run([*TORCHRUN, worker, tiny_model_dir, rl_data, str(tmp_path / "two.pt")])
    one, two = torch.load(tmp_path / "one.pt"), torch.load(tmp_path / "two.pt")
    s1, s2 = one["stats"], two["stats"]
    assert s1["zero_advantage_groups"] == s2["zero_advantage_groups"] == 0  # the hand-set rewards differ
    assert s2["trained_sequences"] == s1["trained_sequences"] == 8  # 2 prompts x 4 rollouts
    assert s2["trained_tokens"] == s1["trained_tokens"]  # n_tokens: the global count on both ranks
    assert s2["forward_passes"] == 2 and s1["forward_passes"] == 1  # one pack per rank vs all in one
    # The global gradient (norm over all shards, before clipping at 1.0) agrees to float32 round-off.
    assert abs(s2["grad_norm"] - s1["grad_norm"]) <= 1e-5 * s1["grad_norm"]
    assert abs(s2["loss"] - s1["loss"]) <= 1e-6
    start = load_file(str(Path(tiny_model_dir) / "model.safetensors"))
    w1, w2 = one["weights"], two["weights"]
    assert w1.keys() == w2.keys() == start.keys()  # rank 0 got the full, unprefixed weights
    # AdamW's first step moves a weight by about lr = 1e-4 (m / sqrt(v) = sign(g)): 5e-6 is 5% of that.
    assert max(float((w1[k] - start[k]).abs().max()) for k in w1) > 5e-5
    for name in w1:
        assert torch.allclose(w1[name], w2[name], atol=5e-6), name
    for run_ in (one, two):  # the served dtype: each float32 weight converted, nothing else changed
        assert run_["served"].keys() == start.keys()
        assert all(torch.equal(run_["served"][k], run_["weights"][k].bfloat16()) for k in start)
        # the NCCL push's buckets: the served tensors, in order, made on the device
        streamed = [kv for bucket in run_["streamed"] for kv in bucket]
        assert [k for k, _ in streamed] == list(run_["served"])
        assert all(torch.equal(t, run_["served"][k]) for k, t in streamed)
        assert run_["checksum"] == state_checksum(run_["served"])
    # the host-copy counter sees the disk push's copies to rank 0's host (2 ranks: one per tensor), so the
    # worker's count of 0 for the stream is a count, not a blind spot
    assert two["whole_copies"] == len(start) and one["whole_copies"] == 0


def test_stage_under_torchrun_then_resume_on_one_process(rl_data, tiny_model_dir, tmp_path):
    common = ["steps=1", "checkpoint.every=1"]
    one = tmp_path / "one"
    run(tiny_rl_config(rl_data, tiny_model_dir, str(one), *common))
    two = tmp_path / "two"
    cmd = [*TORCHRUN, "-m", "paravt_core.cli", "rl", "--config", str(TINY_RL)]
    _run([*cmd, f"data={rl_data}", f"model={tiny_model_dir}", f"output={two}", *common])

    # Rank 0 sampled the very episodes of the one-process run (same seeds): same rewards and token counts.
    (h1,), (h2,) = _history(one), _history(two)
    for key in ("reward_mean", "trained_tokens", "trained_sequences", "policy_version"):
        assert h2[key] == h1[key], key
    assert h2["policy_version"] == 1
    ckpt = checkpoint.step_dir(str(two), 1)
    shards = sorted(p.name for p in Path(ckpt, "model_optim").glob("*.distcp"))
    assert shards == ["__0_0.distcp", "__1_0.distcp"]  # written by two ranks

    # The 2-rank checkpoint loads on one process: the weights are those of the final HF checkpoint.
    cfg = tiny_rl_config(rl_data, tiny_model_dir, str(two))
    fresh = load(tiny_model_dir).model
    learner = Learner(
        fresh,
        load(tiny_model_dir).model,
        temperature=0.7,
        advantage=cfg.advantage,
        loss=cfg.loss,
        optim=cfg.optim,
    )
    state = checkpoint.load(ckpt, learner.root, learner.optimizer, staging_root=str(tmp_path / "s"))
    assert state["step"] == 1 and state["history"] == [h2]
    final = load_file(str(two / "final" / "model.safetensors"))
    for name, tensor in fresh.state_dict().items():
        assert torch.equal(tensor, final[name]), name
    assert {int(s["step"]) for s in learner.optimizer.state_dict()["state"].values()} == {1}

    # ... and the stage resumes it on one process for a second step.
    resumed = tmp_path / "resumed"
    shutil.copytree(two / "checkpoints", resumed / "checkpoints")
    result = run(tiny_rl_config(rl_data, tiny_model_dir, str(resumed), "steps=2", "checkpoint.every=1"))
    assert result.metrics["policy_version"] == 2
    history = _history(resumed)
    assert history[0] == h2 and [h["step"] for h in history] == [0, 1]
