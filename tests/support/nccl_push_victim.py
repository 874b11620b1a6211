"""A learner killed mid-bucket (``tests/support/sglang_support.py:kill_mid_bucket``): ``python tests/support/nccl_push_victim.py
URL PORT MODEL`` joins the receiver's weight-update group and pushes the tiny model's weights + 0.5 in 64 KiB
buckets (``NcclSync`` over gloo). In the first bucket after the first one with at least two tensors, once half
of them (at least one) are sent (the session open, generation paused, the bucket's request in flight), it
prints ``MID-BUCKET {"group", "bucket", "sent", "of"}`` and blocks on its stdin until it is killed."""

from __future__ import annotations

import json
import sys

from paravt_core.engines.sglang_engine import SGLangEngine
from paravt_core.models import load
from paravt_core.rl.weight_sync import NcclSync, buckets

BUCKET = 64 * 1024


def main(url: str, port: str, model: str) -> None:
    weights = {k: v.detach() + 0.5 for k, v in load(model).model.state_dict().items()}
    sync = NcclSync(SGLangEngine(url, timeout_s=120), master_address="127.0.0.1", master_port=int(port),
                    server_ranks=1, backend="gloo", bucket_bytes=BUCKET, timeout_s=120)  # fmt: skip
    plan = buckets(list(weights.items()), BUCKET)  # the cut the push makes (no static names, no dtype)
    cut = next(i for i, b in enumerate(plan) if i > 0 and len(b) >= 2)
    sent_here = len(plan[cut]) // 2
    stop_at = sum(len(b) for b in plan[:cut]) + sent_here + 1  # the broadcast that never happens
    send, calls = sync._broadcast, [0]

    def broadcast(tensor):
        calls[0] += 1
        if calls[0] == stop_at:
            said = {"group": sync.group_name, "bucket": cut, "sent": sent_here, "of": len(plan[cut])}
            print("MID-BUCKET " + json.dumps(said), flush=True)
            sys.stdin.read()  # the test kills us here
        send(tensor)

    sync._broadcast = broadcast
    sync.push(weights, 1)


if __name__ == "__main__":
    main(*sys.argv[1:4])
