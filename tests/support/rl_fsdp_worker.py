"""One RL learner step on fixed episodes, run as one plain process or under ``torchrun`` (FSDP2 on gloo).

``python tests/support/rl_fsdp_worker.py MODEL DATA OUT.pt``: rank 0 samples one step of episodes on the tiny model,
overwrites their rewards with hand-picked distinct values (a random tiny model gets equal rewards within a
group, i.e. zero advantages and a gradient of pure round-off), broadcasts them, and every rank runs the
learner step. Rank 0 saves the learner metrics and the gathered updated weights to OUT.pt."""

from __future__ import annotations

import asyncio
import dataclasses
import sys

import torch

from paravt_core.engines.coalesce import CoalescingEngine
from paravt_core.engines.transformers_engine import TransformersEngine
from paravt_core.models import load
from paravt_core.rl.data import load_prompts
from paravt_core.rl.rollout import arollout_step
from paravt_core.rl.stage import _broadcast
from paravt_core.train.dist import setup_distributed
from tests.support.rl_support import HostCopies, tiny_learner, tiny_rl_config

REWARDS = (1.0, 0.0, 0.5, -1.0)  # per index within a group: every group has a nonzero spread


def main(model: str, data: str, out: str) -> None:
    cfg = tiny_rl_config(data, model, out + "-unused")
    d = setup_distributed()
    samples = None
    if d.rank == 0:
        rollout = load(model)
        engine = CoalescingEngine(TransformersEngine(rollout.model, rollout.processor), seed=0)
        prompts = load_prompts(data).prompts[:2]
        steps = asyncio.run(arollout_step(prompts, engine, cfg.agent, cfg.paravt, group_size=4, version=0))
        samples = [
            dataclasses.replace(s, reward=dataclasses.replace(s.reward, total=REWARDS[s.index]))
            for s in steps.samples
        ]
    samples = _broadcast(d, samples)
    torch.manual_seed(0)
    learner = tiny_learner(cfg, model, dist=d)
    stats = learner.step(samples)
    weights = learner.weights()
    whole = HostCopies()  # the control: the disk push's gather copies each tensor to rank 0's host
    with whole:
        served = learner.weights(
            torch.bfloat16
        )  # what a bf16 server is sent: converted where it was gathered
    # the NCCL push's stream: gathered bucket by bucket and cast on the device, nothing copied to the host
    copies = HostCopies()
    with copies:
        count, parts = learner.weight_buckets(32 * 1024, torch.bfloat16)
        streamed = list(parts)
    assert copies.count == 0 and len(streamed) == count > 1, (copies.count, len(streamed), count)
    checksum = learner.weights_checksum(torch.bfloat16)
    if d.rank == 0:
        torch.save(
            {"stats": stats, "weights": weights, "served": served, "streamed": streamed, "checksum": checksum,
             "whole_copies": whole.count},
            out,
        )  # fmt: skip
    else:
        assert weights == served == {}  # only rank 0 receives the full weights
        assert streamed == [[]] * count and checksum is None


if __name__ == "__main__":
    main(*sys.argv[1:4])
