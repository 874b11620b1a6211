"""The NCCL push stays on the device. The stage's push (``WeightPush.push``) streams
``Learner.weight_buckets`` into SGLang 0.5.23's own weight receiver (the loopback receiver of
``tests/support/sglang_support.py``, gloo in place of NCCL): no parameter goes to the host, the push allocates one
bucket at a time (measured with torch's profiler, which sees every CPU-allocator allocation and free), never a
copy of the model, and after the first push the frozen tower is neither gathered nor sent.

On this CPU machine the learner's "device" is the host, so host copies are counted as the calls that copy to
the host on a GPU (``.cpu()``, ``.to(<cpu>)``, ``.numpy()``) and host memory as what the push allocates."""

from __future__ import annotations

from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from paravt_core.engines.sglang_engine import SGLangEngine
from paravt_core.models import load
from paravt_core.rl.config import RlConfig
from paravt_core.rl.learner import Learner, state_checksum
from paravt_core.rl.push import WeightPush
from paravt_core.rl.weight_sync import NcclSync
from paravt_core.train.dist import Dist
from tests.support.paths import ROOT
from tests.support.ports import free_port
from tests.support.rl_support import HostCopies

BUCKET = 32 * 1024


def _peak_allocated(prof: Any) -> int:
    """The largest amount the profiled code held allocated at once beyond what it started with (bytes)."""
    events = sorted(
        (e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
        key=lambda e: e.start_ns(),
    )
    held = peak = 0
    for e in events:
        held += e.nbytes()
        peak = max(peak, held)
    return peak


def test_the_push_streams_device_buckets_and_gathers_the_tower_once(receiver, tiny_model_dir: str) -> None:
    cfg = RlConfig(engine={"kind": "sglang", "weight_sync": "distributed", "base_url": receiver.url})
    learner = Learner(  # float32 weights, freeze_vision by default; the server is sent bf16
        load(tiny_model_dir).model,
        load(tiny_model_dir).model,
        temperature=cfg.agent.temperature,
        advantage=cfg.advantage,
        loss=cfg.loss,
        optim=cfg.optim,
    )
    sync = NcclSync(SGLangEngine(receiver.url, timeout_s=120), master_address="127.0.0.1",
                    master_port=free_port(), server_ranks=1, backend="gloo", bucket_bytes=BUCKET,
                    timeout_s=60, dtype=torch.bfloat16)  # fmt: skip
    frozen = learner.frozen_names()
    sync.static = frozen
    run = WeightPush(Dist(), learner, sync, torch.bfloat16, streams=True)
    want = learner.weights(torch.bfloat16)  # what the server must end up holding
    model_bytes = sum(t.numel() * t.element_size() for t in want.values())
    largest = max(t.numel() * t.element_size() for t in want.values())
    sync.connect()  # the join (its own buffers) is not part of a push
    try:
        copies = HostCopies()
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof, copies:
            weights, _ = run.push(1)
        first = [n for b in sync.pushed_buckets for n in b]
        with torch.no_grad():  # a training step's change, on the trainable weights only
            for name, p in learner.model.named_parameters():
                if name not in frozen:
                    p.add_(0.5)
        want2 = learner.weights(torch.bfloat16)
        second_copies = HostCopies()
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof2, second_copies:
            run.push(2)
        second = [n for b in sync.pushed_buckets for n in b]
        served = receiver.snapshot()
    finally:
        sync.close()
        receiver.finish()

    peak = _peak_allocated(prof)
    print(f"push peak {peak} B, bucket {BUCKET} B, largest tensor {largest} B, model (bf16) {model_bytes} B")
    # a bucket being sent (a tensor larger than a bucket goes alone), the next one being made and what is let
    # go of between them (the broadcast thread's release is not ordered with the main thread's gathers), not
    # the model's bf16 copy (the old push cloned it whole: a peak of at least the model)
    bound = 2 * max(BUCKET, largest) + BUCKET
    assert model_bytes > 2 * bound, (model_bytes, bound)
    assert peak <= bound, (peak, BUCKET, largest, model_bytes)
    assert _peak_allocated(prof2) <= bound  # the later push: trainable weights only, one bucket at a time
    assert copies.count == 0 and second_copies.count == 0, (copies.count, second_copies.count)
    assert weights is None  # nothing gathered whole
    # the tower: gathered and sent by the first push only; the server holds the learner's weights exactly
    assert first == list(want) and frozen and set(first) >= frozen
    assert second == [k for k in want if k not in frozen]
    assert list(served) == list(want)
    assert all(torch.equal(served[k], want2[k]) for k in want2)
    assert any(not torch.equal(want[k], want2[k]) for k in want)  # the second push changed something
    # the checkpoint's checksum, made one tensor at a time, is that of the whole served state
    assert learner.weights_checksum(torch.bfloat16) == state_checksum(want2)


def test_a_cut_streamed_push_restarts_the_owned_server_and_streams_again_in_full(
    receiver, tiny_model_dir: str, tmp_path
) -> None:
    from tests.support.push_support import _OwnedServer

    cfg = RlConfig(engine={"kind": "sglang", "weight_sync": "distributed", "base_url": receiver.url})
    learner = Learner(
        load(tiny_model_dir).model,
        load(tiny_model_dir).model,
        temperature=cfg.agent.temperature,
        advantage=cfg.advantage,
        loss=cfg.loss,
        optim=cfg.optim,
    )
    sync = NcclSync(SGLangEngine(receiver.url, timeout_s=120, control_timeout_s=5), master_address="127.0.0.1",
                    master_port=free_port(), server_ranks=1, backend="gloo", bucket_bytes=BUCKET,
                    timeout_s=20, dtype=torch.bfloat16)  # fmt: skip
    sync.static = learner.frozen_names()
    sync.engine.server = server = _OwnedServer(sync.engine, receiver, tmp_path / "restarted")
    run = WeightPush(Dist(), learner, sync, torch.bfloat16, streams=True)
    run.push(1)  # the first push: everything, the tower included
    assert run.pushed_full
    send, sent = sync._broadcast, []

    def cut(tensor: torch.Tensor) -> None:  # the second push (trainable weights only) cut at its 5th tensor
        sent.append(1)
        if len(sent) == 5:
            raise RuntimeError("learner interrupted mid-bucket")
        send(tensor)

    sync._broadcast = cut
    run.push(2)
    try:
        assert server.starts == 1 and run.sync is not sync and run.sync.version == 2 and run.pushed_full
        want = learner.weights(torch.bfloat16)
        received = server.receiver.snapshot()
        assert list(received) == list(want)  # in full: the restarted server has the tower again
        assert all(torch.equal(received[k], want[k]) for k in want)
    finally:
        run.sync.close()
        server.receiver.kill()


def test_two_ranks_push_through_the_stage_and_stop_together_on_a_cut_push_or_recovery(
    receiver, tiny_model_dir: str, tmp_path
) -> None:
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = ROOT
    worker = str(repo / "tests" / "support" / "push_fsdp_worker.py")
    out = str(tmp_path / "push")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", worker,
           tiny_model_dir, receiver.url, str(free_port()), out]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lead, other = (json.loads(Path(f"{out}.{r}.json").read_text()) for r in (0, 1))
    want = {k: v.bfloat16() for k, v in load(tiny_model_dir).model.state_dict().items()}
    frozen = set(lead["frozen"])
    assert frozen and lead["copies"] == other["copies"] == 0  # the buckets never went to the host
    assert lead["first"] == list(want) and lead["second"] == [k for k in want if k not in frozen]
    served = receiver.snapshot()
    assert list(served) == list(want) and all(torch.equal(served[k], want[k]) for k in want)
    # the cut push: rank 0 names the server to restart
    assert lead["cut"].startswith("NCCL weight push of version 3 failed: RuntimeError: learner interrupted")
    assert f"Restart the SGLang server at {receiver.url}" in lead["cut"]
    assert other["cut"] == lead["cut"]  # rank 1 (which finished its gathers) stops with rank 0's error
    # a server the stage owns, restarted: the recovery push fails (its join refused), or the restart itself;
    # every rank raises rank 0's error (before the old code, rank 1 went on, or waited in gathers)
    # (the receiver still holds push 3's cut receive: the first attempts fail at its join or at the cut)
    four, five = lead["recovery_4"], lead["recovery_5"]
    assert four.startswith("NCCL weight push of version 4 failed: EngineError: weight-update group ")
    assert "the server side failed (http://127.0.0.1:" in four and "ConnectError" in four  # the restarted one
    assert five.startswith("NCCL weight push of version 5 failed: ")
    assert five.endswith(
        "; restarting the SGLang server failed: RuntimeError: sglang.launch_server exited with code 1"
    )
    assert (other["recovery_4"], other["recovery_5"]) == (four, five)
