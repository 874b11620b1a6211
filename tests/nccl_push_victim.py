"""A learner killed mid-push (``test_sglang_contract.py``): ``python tests/nccl_push_victim.py URL PORT MODEL
MARKER``: joins the receiver's weight-update group, pushes the tiny model's weights + 0.5 in 64 KiB buckets
and, before the 40th tensor (a later bucket: the session is open, generation paused), writes its group name
to MARKER and waits to be killed."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from paravt_core.engines.sglang_engine import SGLangEngine
from paravt_core.models import load
from paravt_core.rl.weight_sync import NcclSync

STOP_AT = 40


def main(url: str, port: str, model: str, marker: str) -> None:
    weights = {k: v.detach() + 0.5 for k, v in load(model).model.state_dict().items()}
    sync = NcclSync(
        SGLangEngine(url, timeout_s=120),
        master_address="127.0.0.1",
        master_port=int(port),
        server_ranks=1,
        backend="gloo",
        bucket_bytes=64 * 1024,
        timeout_s=120,
    )
    send, sent = sync._broadcast, [0]

    def broadcast(tensor):
        sent[0] += 1
        if sent[0] == STOP_AT:
            Path(marker).write_text(getattr(sync, "group_name", "weight_update_group"))
            time.sleep(3600)  # the test kills us here
        send(tensor)

    sync._broadcast = broadcast
    sync.push(weights, 1)


if __name__ == "__main__":
    main(*sys.argv[1:5])
