"""``rl/weight_sync.py`` in-process (its mutation run's survivors): every value below is worked out by
hand. Real parts only: torch gloo process groups (a group of one, rank 0 alone, where no server side is
needed), the loopback SGLang receiver built from SGLang 0.5.23's own scheduler code (``tests/support/sglang_side.py``)
and the loopback contract servers of ``test_engines_sglang.py`` behind a ``FleetEngine``. The one stand-in is
the owned server's stop / start (``SGLangServer`` needs a GPU): it records the calls."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from paravt_core.engines.base import EngineError
from paravt_core.engines.fleet import FleetEngine
from paravt_core.engines.sglang_engine import SGLangEngine
from paravt_core.engines.transformers_engine import TransformersEngine
from paravt_core.models import load
from paravt_core.rl.weight_sync import (
    Bucket,
    DiskSync,
    InProcessSync,
    NcclSync,
    PushFailed,
    _cause,
    buckets,
    dict_stream,
    recover,
    restart,
)
from tests.support.ports import free_port
from tests.support.sglang_contract_server import _ContractServer

_CLOSED_PORT = free_port()
CLOSED = f"http://127.0.0.1:{_CLOSED_PORT}"  # nothing listens there: every call is refused at once


def _open_port() -> int:
    """A free port, never the closed one (a rendezvous would listen there)."""
    return free_port(avoid={_CLOSED_PORT})


def _sync(url: str = CLOSED, *, server_ranks: int = 1, timeout_s: float = 2.0, **kw) -> NcclSync:
    return NcclSync(SGLangEngine(url, timeout_s=60), master_address="127.0.0.1", master_port=_open_port(),
                    server_ranks=server_ranks, backend="gloo", timeout_s=timeout_s, **kw)  # fmt: skip


def test_buckets_refuse_a_size_below_one_byte_naming_it() -> None:
    w = [("w", torch.zeros(1))]
    for size in (0, -4):
        with pytest.raises(ValueError, match=rf"^bucket size must be positive, got {size}$"):
            buckets(w, size)


def test_the_cause_of_a_chain_is_its_first_error_whatever_its_length() -> None:
    try:
        try:
            try:
                raise RuntimeError("gather failed")
            finally:
                raise EngineError("/end_weight_update failed")
        finally:
            raise TimeoutError("continue timed out")
    except TimeoutError as err:
        # the first of three, not the middle one; the error itself last
        assert _cause(err) == "RuntimeError: gather failed (then TimeoutError: continue timed out)"


def test_a_state_dicts_stream_casts_only_floating_tensors_and_skips_the_named() -> None:
    """``dict_stream``: floating tensors in the sync's dtype, an integer tensor (e.g. a position-id buffer) as
    it is; no dtype: every tensor as it is; the skipped names left out; buckets cut as sent (bf16: 2 bytes)."""
    weights = {
        "w": torch.tensor([1.5, -2.25, 3.0]),
        "ids": torch.tensor([7, 8], dtype=torch.int64),
        "frozen": torch.ones(4),
        "b": torch.tensor([0.5]),
    }
    count, made = dict_stream(weights)(20, torch.bfloat16, {"frozen"})
    # as sent: w 3 x 2 = 6 bytes; ids 2 x 8 = 16 (6 + 16 > 20: a new bucket); b 1 x 2 = 2 (16 + 2 <= 20)
    got = [[(n, t.dtype, t.tolist()) for n, t in bucket] for bucket in made]
    assert count == 2 and got == [
        [("w", torch.bfloat16, [1.5, -2.25, 3.0])],
        [("ids", torch.int64, [7, 8]), ("b", torch.bfloat16, [0.5])],
    ]
    count, made = dict_stream(weights)(1 << 20, None, set())
    assert count == 1
    assert [(n, t.dtype) for bucket in made for n, t in bucket] == [
        ("w", torch.float32),
        ("ids", torch.int64),
        ("frozen", torch.float32),
        ("b", torch.float32),
    ]


class _Server:
    """What ``SGLangEngine.launch`` leaves on ``engine.server``: here it records stop / start."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def stop(self, timeout_s: float = 30.0) -> None:
        self.calls.append(f"stop {timeout_s:g}")

    def start(self) -> None:
        self.calls.append("start")


def test_restart_stops_and_starts_the_owned_server_and_returns_a_renewed_sync() -> None:
    sync = _sync(version=7, bucket_bytes=512, dtype=torch.bfloat16)
    sync.static, sync.failed, sync._pushed = {"model.visual.x"}, "cut", True
    sync.engine.server = server = _Server()
    fresh = restart(sync, PushFailed("cut"))
    assert server.calls == ["stop 5", "start"]  # a wedged server gets 5 s of grace, not 30
    assert fresh is not sync and fresh.engine is sync.engine and fresh.group_name != sync.group_name
    assert (fresh.version, fresh.bucket_bytes, fresh.dtype) == (7, 512, torch.bfloat16)
    assert fresh.static == {"model.visual.x"}
    assert (fresh.failed, fresh._pushed, fresh.group) == (None, False, None)


def test_in_process_sync_loads_the_weights_and_serves_their_version(tiny_model_dir: str) -> None:
    loaded = load(tiny_model_dir)
    engine = TransformersEngine(loaded.model, loaded.processor)
    weights = {k: v.detach() + 0.5 for k, v in loaded.model.state_dict().items()}
    sync = InProcessSync(engine)
    assert sync.version == 0
    sync.push(weights, 9)
    assert sync.version == 9 and engine.weight_version == 9
    served = engine.model.state_dict()
    assert all(torch.equal(served[k], weights[k]) for k in weights)


def _calls(server: _ContractServer) -> list[tuple[str, dict]]:
    return [(path, body) for path, body in server.calls if path != "/generate"]


def test_disk_sync_reloads_every_server_and_repushes_a_lagging_one(
    tiny_model_dir: str, tmp_path: Path
) -> None:
    """A fleet of two contract servers (each really loads the pushed directory): every push writes
    ``staging/v<8 digits>``, pauses, reloads with the version and resumes each server; the directory served
    before is deleted (and one already gone is no error); a server that lags (restarted on the old weights)
    gets the served directory once more, with the served version. Unpaused (``pause_mode=None``): the reload
    alone."""
    policy = load(tiny_model_dir).model
    w1 = {k: v.detach() + 0.5 for k, v in policy.state_dict().items()}
    w2 = {k: v + 0.25 for k, v in w1.items()}
    servers = []
    for _ in range(2):
        own = load(tiny_model_dir)
        servers.append(_ContractServer(TransformersEngine(own.model, own.processor), own.processor))
    a, b = servers
    try:
        fleet = FleetEngine(CLOSED, worker_urls=[a.url, b.url], timeout_s=120)
        staging = tmp_path / "staging"
        sync = DiskSync(fleet, policy, str(staging))
        sync.push(w1, 1)
        v1 = str(staging / "v00000001")
        for s in servers:
            assert _calls(s) == [
                ("/pause_generation", {"mode": "retract"}),
                ("/update_weights_from_disk", {"model_path": v1, "flush_cache": True, "weight_version": "1"}),
                ("/continue_generation", {}),
            ]
            assert all(torch.equal(s.engine.model.state_dict()[k], w1[k]) for k in w1)
        with b._lock:
            b.weight_version = "default"  # restarted on its launch checkpoint
        before = len(b.calls)
        sync.verify()
        assert sync.repushes == 1 and len(a.calls) == 3
        assert b.calls[before:] == [
            ("/update_weights_from_disk", {"model_path": v1, "flush_cache": True, "weight_version": "1"})
        ]
        assert b.weight_version == "1"
        sync.push(w2, 2)
        assert sorted(p.name for p in staging.iterdir()) == ["v00000002"]  # v1 deleted once both moved on
        assert a.weight_versions == ["1", "2"] and b.weight_versions == ["1", "1", "2"]
        (staging / "v00000002").rename(tmp_path / "gone")  # deleted under it: the next push goes on
        sync.push(w1, 3)
        assert sorted(p.name for p in staging.iterdir()) == ["v00000003"] and sync.version == 3
        assert sync.repushes == 1
        unpaused = DiskSync(fleet, policy, str(tmp_path / "unpaused"), version=3, pause_mode=None)
        before = len(a.calls)
        unpaused.push(w2, 4)  # pause_mode None: the reload alone, with its version
        v4 = str(tmp_path / "unpaused" / "v00000004")
        assert a.calls[before:] == [
            ("/update_weights_from_disk", {"model_path": v4, "flush_cache": True, "weight_version": "4"})
        ]
        assert (a.weight_version, b.weight_version, unpaused.version) == ("4", "4", 4)
    finally:
        for s in servers:
            s.close()


class _Counted:
    """A :data:`BucketStream` that counts the buckets made (the learner's collective gathers, in the stage)."""

    def __init__(self, weights: dict[str, torch.Tensor]):
        self.weights, self.made = weights, 0

    def __call__(
        self, max_bytes: int, dtype: torch.dtype | None, skip: set[str]
    ) -> tuple[int, Iterator[Bucket]]:
        names = [n for n in self.weights if n not in skip]

        def each() -> Iterator[Bucket]:
            for n in names:
                self.made += 1
                yield [(n, self.weights[n])]

        return len(names), each()


def test_a_push_that_cannot_join_fails_the_sync_and_every_later_push_refuses() -> None:
    """No server answers: the join fails, the push raises ``PushFailed`` naming it, every bucket of the stream
    is still made (the other ranks' gathers go on), and the sync refuses to push again. Neither ``restart``
    nor ``recover`` can restart a server it does not own: one line naming what to restart."""
    stream = _Counted({"a": torch.ones(2), "b": torch.zeros(3)})
    sync = _sync(version=4)
    with pytest.raises(PushFailed) as first:
        sync.push(stream, 5)
    said = str(first.value)
    prefix = f"NCCL weight push of version 5 failed: EngineError: weight-update group {sync.group_name}: "
    assert said.startswith(prefix + f"the server side failed ({CLOSED}/init_weights_update_group: "), said
    assert sync.failed == said.removeprefix("NCCL weight push of version 5 failed: ")
    assert (stream.made, sync.version, sync.group, sync.pushed_buckets) == (2, 4, None, [])
    with pytest.raises(PushFailed) as again:
        sync.push(stream, 6)
    assert str(again.value) == f"NCCL weight sync: an earlier push failed ({sync.failed}); restart the server"
    assert stream.made == 4 and sync.version == 4
    external = (
        f"{first.value}. Restart the SGLang server at {CLOSED} (an interrupted weight push leaves it unable to "
        "take another), then rerun this stage: it resumes from its last checkpoint"
    )
    with pytest.raises(PushFailed) as no_restart:
        restart(sync, first.value)
    assert str(no_restart.value) == external and no_restart.value.__cause__ is first.value
    with pytest.raises(PushFailed) as no_recover:
        recover(sync, stream, 5, first.value)
    assert str(no_recover.value) == external and stream.made == 4  # nothing made for a push never tried


def test_a_joined_group_is_the_syncs_own_with_its_timeout_and_closes_without_a_server() -> None:
    """``_join`` with no server rank (a group of one: rank 0 alone completes the rendezvous): the group is
    named as the sync, rank 0 of the group is rank 0, its collectives time out after the sync's
    ``timeout_s`` (not torch's default 30 min), and a broadcast from it returns the tensor as it is. ``close``
    with the server gone (every call refused) still destroys our group."""
    sync = _sync(server_ranks=0, timeout_s=7.0)
    sync._join()
    group = sync.group
    try:
        assert (group.size(), group.rank(), group.group_name) == (1, 0, sync.group_name)
        assert group._get_backend(torch.device("cpu")).options._timeout == timedelta(seconds=7)
        assert c10d._world.pg_group_ranks[group] == {0: 0}
        assert dist.get_global_rank(group, 0) == 0 and dist.get_process_group_ranks(group) == [0]
        t = torch.arange(6.0).reshape(2, 3).t()  # not contiguous: sent as a contiguous copy
        sync._broadcast(t)
        assert torch.equal(t, torch.tensor([[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]))
    except BaseException:
        dist.destroy_process_group(group)
        raise
    sync.close()
    assert sync.group is None and group not in c10d._world.pg_map
    sync.close()  # closed: nothing left to do


def test_closing_a_failed_nccl_sync_aborts_its_own_group_never_the_learners_world(tmp_path: Path) -> None:
    """After a failed push on NCCL, ``close`` aborts the sync's group; torchrun's world group (the learner's
    ranks' collectives) stays. ``torch.distributed._abort_process_group(None)`` would abort every group, the
    default one too (torch 2.14 ``distributed_c10d.py``: ``pg = group or GroupMember.WORLD``). The abort path
    is NCCL's: a gloo group of one stands in for the NCCL group (the abort is generic c10d code)."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'world'}", rank=0, world_size=1)
    try:
        sync = _sync(server_ranks=0)
        sync._join()
        group = sync.group
        sync.backend, sync.failed = "nccl", "RuntimeError: cut"
        sync.close()
        assert sync.group is None and group not in c10d._world.pg_map
        assert dist.is_initialized()
        total = torch.tensor([2.0])
        dist.all_reduce(total)
        assert total.item() == 2.0
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_recover_pushes_in_full_to_the_restarted_server_and_says_so(receiver, tiny_model_dir: str) -> None:
    weights = {k: v.detach() + 0.25 for k, v in load(tiny_model_dir).model.state_dict().items()}
    sync = _sync(receiver.url, timeout_s=120, bucket_bytes=1 << 20)
    sync.static = {n for n in weights if n.startswith("model.visual.")}
    sync.failed, sync._pushed = "RuntimeError: cut", True  # as a cut push leaves it (never joined here)
    sync.engine.server = server = _Server()  # "restarted": the receiver, fresh, stands for the new server
    err = PushFailed("NCCL weight push of version 3 failed: RuntimeError: cut")
    fresh, said = recover(sync, weights, 3, err)
    try:
        received = receiver.snapshot()
    finally:
        fresh.close()
    assert server.calls == ["stop 5", "start"]  # a wedged server gets 5 s of grace, not 30
    assert said == (
        "NCCL weight push of version 3 failed: RuntimeError: cut; restarted the SGLang server this stage owns "
        "and pushed version 3 to it"
    )
    assert list(received) == list(weights) and all(torch.equal(received[k], weights[k]) for k in weights)
    assert (fresh.version, fresh.failed) == (3, None)


# 1 ----------------------------------------------------------------------------------------------------------
def test_two_group_names_made_in_one_process_differ():
    """A retried attempt in the same container (PID 1, same pod hostname) must not re-join under a name that
    SGLang and torch already hold: host and PID alone do not tell two attempts apart."""
    from paravt_core.engines.sglang_engine import SGLangEngine
    from paravt_core.rl.weight_sync import NcclSync, unique_group_name

    a, b = unique_group_name(), unique_group_name()
    assert a != b
    prefix = f"paravt-{socket.gethostname()}-{os.getpid()}-"
    assert a.startswith(prefix) and b.startswith(prefix)

    def sync() -> NcclSync:  # nothing is contacted before the first push
        engine = SGLangEngine("http://127.0.0.1:9")
        return NcclSync(engine, master_address="127.0.0.1", master_port=9, server_ranks=1, backend="gloo")

    assert sync().group_name != sync().group_name
    engine = SGLangEngine("http://127.0.0.1:9")
    given = NcclSync(engine, master_address="h", master_port=1, server_ranks=1, group_name="mine")
    assert given.group_name == "mine"
