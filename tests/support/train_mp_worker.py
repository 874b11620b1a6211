"""One RL learner step at lr 2e-6 on 2 gloo ranks (``torchrun``), with activation checkpointing on, in one of
two precision set-ups; rank 0 writes which share of the language model's weights moved.

``python -m torch.distributed.run --nproc-per-node 2 tests/support/train_mp_worker.py MODEL SAMPLES.pt MODE OUT.pt``
- ``MODE=fp32_master``: float32 parameters sharded with FSDP2 under ``MixedPrecisionPolicy(param_dtype=bf16,
  reduce_dtype=float32)`` (bf16 compute, float32 masters and reductions) -- the training core's GPU set-up;
- ``MODE=bf16_only``: the checkpoint loaded in bf16 and sharded as is (what the 8B RL config did before).
"""

from __future__ import annotations

import sys

import torch

from paravt_core.models import load
from paravt_core.rl.config import OptimConfig
from paravt_core.rl.learner import Learner
from paravt_core.train.dist import setup_distributed
from paravt_core.train.fsdp import CoreOptions
from tests.support.rl_support import tiny_rl_config


def main(model: str, samples_path: str, mode: str, out: str) -> None:
    d = setup_distributed()
    samples = torch.load(samples_path, weights_only=False)
    cfg = tiny_rl_config("unused", model, out + "-unused")
    dtype = torch.float32 if mode == "fp32_master" else torch.bfloat16
    policy = load(model, dtype=dtype).model
    start = {k: v.detach().clone() for k, v in policy.state_dict().items()}
    opts = CoreOptions(
        freeze_vision=True, mixed_precision=mode == "fp32_master", activation_checkpointing=True
    )
    learner = Learner(
        policy,
        load(model, dtype=dtype).model,
        temperature=cfg.agent.temperature,
        advantage=cfg.advantage,
        loss=cfg.loss,
        optim=OptimConfig(lr=2e-6, weight_decay=0.01, grad_clip=1.0),
        dist=d,
        opts=opts,
    )
    stats = learner.step(samples)
    after = learner.weights()
    if d.rank == 0:
        moved = {k: int((after[k] != start[k]).sum()) for k in after}
        sizes = {k: after[k].numel() for k in after}
        dtypes = {str(v.dtype) for v in after.values()}
        torch.save({"stats": stats, "moved": moved, "sizes": sizes, "dtypes": dtypes}, out)


if __name__ == "__main__":
    main(*sys.argv[1:5])
