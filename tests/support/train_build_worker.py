"""``paravt_core.train.fsdp.build`` on 2 gloo ranks: who reads the checkpoint, and what the shards hold.

``python -m torch.distributed.run --nproc-per-node 2 tests/support/train_build_worker.py MODEL OUT``: every rank
builds the policy root; rank r writes OUT.r.pt with the ``models.load`` calls it made and its shards
gathered back to full tensors (plus the buffers)."""

from __future__ import annotations

import sys

import torch

import paravt_core.models as models
from paravt_core.rl.learner import PolicyLogprobs
from paravt_core.train.dist import setup_distributed
from paravt_core.train.fsdp import CoreOptions, build


def main(model: str, out: str) -> None:
    d = setup_distributed()
    calls = []
    real_load = models.load

    def counting_load(uri, device="cpu", dtype=None, cache_dir=None, purpose=None):
        calls.append({"device": device, "dtype": str(dtype), "purpose": purpose})
        return real_load(uri, device=device, dtype=dtype, cache_dir=cache_dir, purpose=purpose)

    models.load = counting_load
    root, loaded = build(model, d, lambda m: PolicyLogprobs(m, always_run_vision=True), CoreOptions())
    full = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in root.state_dict().items()}
    buffers = {k: v.clone() for k, v in root.named_buffers()}
    placements = {k: str(getattr(p, "placements", None)) for k, p in root.named_parameters()}
    torch.save(
        {
            "calls": calls,
            "model_is_none": loaded.model is None,
            "full": full,
            "buffers": buffers,
            "placements": placements,
            "dtypes": {str(p.dtype) for p in root.parameters()},
            "config_dtype": str(loaded.config.dtype),  # the checkpoint's, not the shards' (a copy was built)
        },
        f"{out}.{d.rank}.pt",
    )


if __name__ == "__main__":
    main(*sys.argv[1:3])
