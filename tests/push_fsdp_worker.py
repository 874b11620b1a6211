"""Two ranks (FSDP2 on gloo) push the learner's weights through the RL stage's own push (``_Run.push``) into
SGLang's receiver: rank 0 sends, rank 1 takes part in every bucket's gathers.

``python -m torch.distributed.run --nproc-per-node 2 tests/push_fsdp_worker.py MODEL URL PORT OUT``: push 1
(in full), push 2 (without the frozen tower), then push 3 cut on rank 0 at its 3rd tensor: the server is an
external one, so every rank stops with ``PushFailed``. Each rank writes ``OUT.<rank>.json``."""

from __future__ import annotations

import json
import sys

import torch

from paravt_core.engines.sglang_engine import SGLangEngine
from paravt_core.rl.config import RlConfig
from paravt_core.rl.stage import _Run
from paravt_core.rl.weight_sync import NcclSync, PushFailed
from paravt_core.train.dist import setup_distributed
from tests.rl_support import HostCopies, tiny_learner


def main(model: str, url: str, port: str, out: str) -> None:
    d = setup_distributed()
    cfg = RlConfig(engine={"kind": "sglang", "weight_sync": "distributed", "base_url": url})
    learner = tiny_learner(cfg, model, dist=d)
    sync = None
    if d.rank == 0:
        # buckets of 32 KiB here, 1 GiB on rank 1: the gathers are per tensor, so only the skipped names
        # have to agree between ranks, not the bucket plan
        engine = SGLangEngine(url, timeout_s=120, control_timeout_s=5)
        sync = NcclSync(engine, master_address="127.0.0.1", master_port=int(port), server_ranks=1,
                        backend="gloo", bucket_bytes=32 * 1024, timeout_s=20, dtype=torch.bfloat16)  # fmt: skip
        sync.static = learner.frozen_names()
    run = _Run(cfg=cfg, d=d, learner=learner, policy=None, data=None, judge=None, engine=None, sync=sync,
               handoff=None, images_kwargs={}, staging="", reference_uri="", pool=None,
               dtype=torch.bfloat16)  # fmt: skip
    copies = HostCopies()
    with copies:
        run.push(1)
        first = [n for b in sync.pushed_buckets for n in b] if sync else []
        run.push(2)
        second = [n for b in sync.pushed_buckets for n in b] if sync else []
    report = {
        "copies": copies.count,
        "first": first,
        "second": second,
        "frozen": sorted(learner.frozen_names()),
    }
    if sync is not None:
        send, sent = sync._broadcast, []

        def cut(tensor: torch.Tensor) -> None:
            sent.append(1)
            if len(sent) == 3:
                raise RuntimeError("learner interrupted mid-bucket")
            send(tensor)

        sync._broadcast = cut
    try:
        run.push(3)
        report["cut"] = None
    except PushFailed as err:
        report["cut"] = str(err)
    with open(f"{out}.{d.rank}.json", "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main(*sys.argv[1:5])
