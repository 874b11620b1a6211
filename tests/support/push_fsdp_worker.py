"""Two ranks (FSDP2 on gloo) push the learner's weights through the RL stage's own push (``WeightPush.push``) into
SGLang's receiver: rank 0 sends, rank 1 takes part in every bucket's gathers.

``python -m torch.distributed.run --nproc-per-node 2 tests/support/push_fsdp_worker.py MODEL URL PORT OUT``: push 1
(in full), push 2 (without the frozen tower), then pushes cut on rank 0 at their 3rd tensor: push 3 to an
external server (every rank stops with ``PushFailed``), push 4 to a server the stage owns whose restart comes
back where nothing answers (the recovery push fails), push 5 to one whose restart fails. After each failure
every rank must raise rank 0's error at once: the group's timeout is short (``TIMEOUT_S``), so a rank left
waiting fails the run instead of hanging it. Each rank writes ``OUT.<rank>.json``."""

from __future__ import annotations

import json
import socket
import sys

import torch

from paravt_core.engines.sglang_engine import SGLangEngine
from paravt_core.rl.config import RlConfig
from paravt_core.rl.push import WeightPush
from paravt_core.rl.weight_sync import NcclSync, PushFailed
from paravt_core.train.dist import setup_distributed
from tests.support.rl_support import HostCopies, tiny_learner

TIMEOUT_S = 120.0  # the learner group's collectives (the stage's default is 1800 s)


class _Restart:
    """``engine.server`` of a server the stage owns, whose restart goes wrong: ``refuse``: the launch raises;
    otherwise the server comes back at an address nothing answers (the recovery push fails at its join)."""

    def __init__(self, engine: SGLangEngine, refuse: bool):
        self.engine, self.refuse = engine, refuse

    def stop(self, timeout_s: float = 30.0) -> None:
        pass

    def start(self) -> None:
        if self.refuse:
            raise RuntimeError("sglang.launch_server exited with code 1")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.engine.base_url = f"http://127.0.0.1:{s.getsockname()[1]}"  # closed again: refused


def _cut(sync: NcclSync) -> None:
    send, sent = sync._broadcast, []

    def cut(tensor: torch.Tensor) -> None:
        sent.append(1)
        if len(sent) == 3:
            raise RuntimeError("learner interrupted mid-bucket")
        send(tensor)

    sync._broadcast = cut


def _outcome(run: WeightPush, version: int) -> str | None:
    try:
        run.push(version)
    except PushFailed as err:
        return str(err)
    return None


def main(model: str, url: str, port: str, out: str) -> None:
    d = setup_distributed(TIMEOUT_S)
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
    run = WeightPush(d, learner, sync, torch.bfloat16, streams=True)
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
        _cut(sync)
    report["cut"] = _outcome(run, 3)
    for version, refuse in ((4, False), (5, True)):
        if d.rank == 0:  # a new run's sync (the last one failed), its server owned by the stage
            run.sync = NcclSync(SGLangEngine(url, timeout_s=120, control_timeout_s=5), master_address="127.0.0.1",
                                master_port=int(port), server_ranks=1, backend="gloo", bucket_bytes=32 * 1024,
                                timeout_s=20, dtype=torch.bfloat16)  # fmt: skip
            run.sync.engine.server = _Restart(run.sync.engine, refuse)
            _cut(run.sync)
        report[f"recovery_{version}"] = _outcome(run, version)
    d.barrier()  # both ranks got here: none is left in a collective the other never joins
    with open(f"{out}.{d.rank}.json", "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main(*sys.argv[1:5])
