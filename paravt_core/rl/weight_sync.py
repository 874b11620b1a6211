"""Pushing the learner's weights to the rollout engine after every step (policy version + 1).

- ``InProcessSync``: the in-process ``TransformersEngine`` loads the state dict directly.
- ``DiskSync``: a server (SGLang, an SGLang fleet, vLLM: ``engines.base.ReloadsFromDisk``) reloads a Hugging
  Face directory written by rank 0 into a staging directory it can read; the previous version's directory is
  deleted once the server has moved on.
- ``NcclSync``: the tensors go straight from rank 0's GPU to the server's (``engines.base.UpdatesOverGroup``:
  SGLang, vLLM) over an NCCL group that the server joins (``/init_weights_update_group`` once), then per step: generation paused, a begin/end weight
  update session, the tensors in buckets (one ``/update_weights_from_distributed`` each), generation resumed.
  GPU (NCCL); the same code runs with gloo on CPU in the tests.

Every sync keeps ``version`` (the policy version the engine serves, an int) for the samples' bookkeeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import socket
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from paravt_core.engines.base import EngineError, ReloadsFromDisk, UpdatesOverGroup


async def _closing(engine: Any, call: Any) -> Any:
    """Await one engine call on a short-lived loop (``asyncio.run``), then close that loop's HTTP client."""
    try:
        return await call
    finally:
        await engine.aclose()


class InProcessSync:
    def __init__(self, engine: Any):
        self.engine = engine

    @property
    def version(self) -> int:
        return int(self.engine.weight_version)

    def push(self, weights: dict[str, torch.Tensor], version: int) -> None:
        self.engine.load_weights(weights)
        self.engine.weight_version = version


class DiskSync:
    def __init__(
        self,
        engine: ReloadsFromDisk,
        hf_model: Any,
        staging_dir: str,
        version: int = 0,
        pause_mode: str | None = "retract",
        dtype: torch.dtype | None = None,
    ):
        """``hf_model``: the policy (its config and ``save_pretrained`` write the directory). ``pause_mode``:
        generation is paused around the reload (see ``NcclSync``) so it does not wait for in-flight requests;
        None: not paused. ``dtype``: the served weights' dtype (the directory's tensors and its config.json);
        None: as the learner keeps them."""
        self.engine, self.hf_model, self.staging_dir = engine, hf_model, staging_dir
        self.version, self.pause_mode, self.dtype = version, pause_mode, dtype
        self._served: str | None = None
        self.repushes = 0  # fleet servers found lagging and pushed the current weights again

    async def _reload(self, path: str, version: int) -> None:
        if self.pause_mode is None:
            await self.engine.update_weights_from_disk(path, weight_version=str(version))
            return
        await self.engine.pause_generation(self.pause_mode)
        try:
            await self.engine.update_weights_from_disk(path, weight_version=str(version))
        finally:
            await self.engine.continue_generation()

    def push(self, weights: dict[str, torch.Tensor], version: int) -> None:
        from paravt_core.checkpoint import save_hf

        path = os.path.join(self.staging_dir, f"v{version:08d}")
        shutil.rmtree(path, ignore_errors=True)
        save_hf(self.hf_model, path, weights, self.dtype)
        asyncio.run(_closing(self.engine, self._reload(path, version)))
        if self._served is not None and self._served != path:
            shutil.rmtree(self._served, ignore_errors=True)  # the server reads the new one now
        self._served, self.version = path, version
        self.verify()

    def verify(self) -> None:
        """A rollout fleet (``engines.fleet``): every live server answers the pushed version (its
        ``/model_info``). A server that lags (e.g. restarted on the old checkpoint) gets the current directory
        once more; if it still lags, ``FleetVersionError``. Run after each push and before each step's
        rollouts; nothing to check before the first push or for one server."""
        if getattr(self.engine, "check_versions", None) is None or self._served is None:
            return
        asyncio.run(_closing(self.engine, self._verify(self._served, str(self.version))))

    async def _verify(self, path: str, version: str) -> None:
        from paravt_core.engines.fleet import FleetVersionError

        try:
            await self.engine.check_versions(version)
        except FleetVersionError as err:
            self.repushes += len(err.lagging)
            await self.engine.repush(sorted(err.lagging), path, weight_version=version)
            await self.engine.check_versions(version)


def _cause(err: BaseException) -> str:
    """``err`` and, when the cleanup after a cut push raised it (e.g. ``/end_weight_update`` timing out on the
    stuck server), the error that cut the push first."""
    first = err
    while first.__context__ is not None and first.__context__ is not first:
        first = first.__context__
    said = f"{type(err).__name__}: {err}"
    return said if first is err else f"{type(first).__name__}: {first} (then {said})"


class PushFailed(EngineError):
    """A weight push cut short: the server may be left unable to take another (see ``NcclSync.failed``)."""


def sent_bytes(tensor: torch.Tensor, dtype: torch.dtype | None = None) -> int:
    """Bytes of ``tensor`` on the wire: floating tensors are sent in ``dtype`` when given."""
    size = dtype.itemsize if dtype is not None and tensor.is_floating_point() else tensor.element_size()
    return tensor.numel() * size


def buckets(
    named: Sequence[tuple[str, torch.Tensor]], max_bytes: int, dtype: torch.dtype | None = None
) -> list[list[tuple[str, torch.Tensor]]]:
    """``named`` cut, in order, into runs of at most ``max_bytes`` as sent (floating tensors in ``dtype`` when
    given; a larger tensor goes alone): each run is one ``/update_weights_from_distributed`` request, so the
    server holds at most one bucket beside its weights."""
    if max_bytes < 1:
        raise ValueError(f"bucket size must be positive, got {max_bytes}")
    out: list[list[tuple[str, torch.Tensor]]] = []
    size = 0
    for name, tensor in named:
        nbytes = sent_bytes(tensor, dtype)
        if not out or (size + nbytes > max_bytes and out[-1]):
            out.append([])
            size = 0
        out[-1].append((name, tensor))
        size += nbytes
    return out


Bucket = list[tuple[str, torch.Tensor]]
# ``stream(max_bytes, dtype, skip) -> (number of buckets, the buckets)``: the weights bucket by bucket, each
# made only when it is sent (``Learner.weight_buckets``: gathered and cast on the device, collective)
BucketStream = Callable[[int, torch.dtype | None, set[str]], tuple[int, Iterator[Bucket]]]
Weights = dict[str, torch.Tensor] | BucketStream


def dict_stream(weights: dict[str, torch.Tensor]) -> BucketStream:
    """A state dict as a :data:`BucketStream` (each bucket cast to ``dtype`` when it is sent)."""

    def stream(max_bytes: int, dtype: torch.dtype | None, skip: set[str]) -> tuple[int, Iterator[Bucket]]:
        plan = buckets([(n, t) for n, t in weights.items() if n not in skip], max_bytes, dtype)
        cast = lambda t: t.to(dtype) if dtype is not None and t.is_floating_point() else t  # noqa: E731
        return len(plan), ([(n, cast(t)) for n, t in b] for b in plan)

    return stream


def unique_group_name() -> str:
    """A weight-update group name no earlier run or attempt used: host, process and a random part."""
    return f"paravt-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"


@dataclasses.dataclass(eq=False)
class NcclSync:
    """Our rank 0 is rank 0 of a group whose ranks 1.. are the server's GPUs (``backend="nccl"``; gloo on
    CPU). The server side is the engine's (``engines.base.UpdatesOverGroup``: SGLang's routes, or vLLM's
    weight-transfer routes mapped onto them by ``VllmEngine``). One push, in SGLang 0.5.23's protocol (``scheduler_components/weight_updater.py``,
    ``tokenizer_control_mixin.py``):

    1. ``/pause_generation`` (``pause_mode``, default ``retract``: running requests go back to the waiting
       queue and resume after the push, so the push does not wait for in-flight requests - unpaused, the
       update would take the model-update lock's writer side and wait for every one of them);
    2. ``/begin_weight_update`` (SGLang answers 400 to an update outside a begin/end session);
    3. per bucket of at most ``bucket_bytes``: ``/update_weights_from_distributed`` announcing its names,
       dtypes and shapes while rank 0 broadcasts the tensors in that order; the last bucket carries
       ``flush_cache`` (the KV cache of the old weights is dropped once all weights are in) and the weight
       version;
    4. ``/end_weight_update``; 5. ``/continue_generation`` (also after a failure: the server never stays
       paused by us).

    Reconnecting (a retried pod against a long-lived server): SGLang keeps every group it joined under its
    name, and torch refuses a second group of the same name ("The specified group name has already been
    created"), so each ``NcclSync`` (each run and attempt) joins under a name of its own
    (``unique_group_name``). A learner killed mid-push leaves the server paused with its update session
    open (a new ``begin`` is refused: "already open"): ``connect`` first ends any open session and resumes
    generation, best effort. ``close`` asks the server to destroy the group (and destroys ours).
    """

    engine: UpdatesOverGroup
    _: dataclasses.KW_ONLY
    master_address: str
    master_port: int
    server_ranks: int
    version: int = 0
    backend: str = "nccl"
    bucket_bytes: int = 1 << 30
    pause_mode: str = "retract"
    timeout_s: float = 600.0
    # floating tensors are sent in it (the server's weight dtype, e.g. bf16 when the learner keeps fp32
    # masters), converted one bucket at a time
    dtype: torch.dtype | None = None
    group_name: str | None = None  # None: unique_group_name()
    # names of tensors that never change (the frozen vision tower): sent by a sync's first push only
    static: set[str] = dataclasses.field(default_factory=set)
    # the state of one group and its pushes (renewed() starts them afresh)
    group: Any = dataclasses.field(default=None, init=False)
    pushed_buckets: list[list[str]] = dataclasses.field(default_factory=list, init=False)  # per bucket
    # why a push was cut short: the server may hold receives that never complete (NCCL: queued on its
    # stream; SGLang 0.5.23 has no abort), so this sync refuses to push again and close() does not wait
    failed: str | None = dataclasses.field(default=None, init=False)
    _pushed: bool = dataclasses.field(default=False, init=False)

    def __post_init__(self) -> None:
        self.group_name = self.group_name or unique_group_name()

    def renewed(self) -> NcclSync:
        """This sync's settings (``static`` and ``version`` too) under a new group name, not joined and not
        failed: the sync for a restarted server, whose first push is in full."""
        return dataclasses.replace(self, group_name=None)

    @property
    def device(self) -> torch.device:
        return (
            torch.device("cuda", torch.cuda.current_device())
            if self.backend == "nccl"
            else torch.device("cpu")
        )

    def _join(self) -> None:
        # torch has no public call for a process group outside torchrun's world; this is the construction the
        # SGLang server uses for its side (utils.common.init_custom_process_group: rendezvous at
        # tcp://address:port, a store prefixed with the group name), so both ends meet in the same store keys.
        from datetime import timedelta

        from torch.distributed import distributed_c10d as c10d

        from paravt_core.train.dist import server_nccl_env

        server_nccl_env()  # NCCL as the server runs it (before the group's communicator is made)
        world = 1 + self.server_ranks
        timeout = timedelta(seconds=self.timeout_s)
        rendezvous = c10d.rendezvous(
            f"tcp://{self.master_address}:{self.master_port}", 0, world, timeout=timeout
        )
        store, rank, world = next(rendezvous)
        store.set_timeout(timeout)
        group, _ = c10d._new_process_group_helper(
            world,
            rank,
            [],
            c10d.Backend(self.backend),
            c10d.PrefixStore(self.group_name, store),
            group_name=self.group_name,
            timeout=timeout,
        )
        c10d._world.pg_group_ranks[group] = {i: i for i in range(world)}
        self.group = group

    async def _connect(self) -> None:
        # a push cut short (a killed learner) left the session open and generation paused: end both; each
        # call fails harmlessly when there is nothing to end ("no weight-update session is open")
        with contextlib.suppress(EngineError):
            await self.engine.end_weight_update()
        with contextlib.suppress(EngineError):
            await self.engine.continue_generation()
        await self.engine.init_weights_update_group(
            self.master_address,
            self.master_port,
            rank_offset=1,
            world_size=1 + self.server_ranks,
            group_name=self.group_name,
            backend=self.backend,
            trainer_join=self._join,
        )

    def connect(self) -> None:
        asyncio.run(_closing(self.engine, self._connect()))

    def _broadcast(self, tensor: torch.Tensor) -> None:
        if self.group is None:
            raise EngineError("NCCL weight sync: connect() first")
        import torch.distributed as dist

        # group_src: rank 0 *of this group* (the trainer), whatever its rank in torchrun's world
        # a tensor already on the group's device is sent from where it lies (a device buffer, no copy)
        here = tensor if tensor.device == self.device else tensor.to(self.device)
        dist.broadcast(here.contiguous(), group=self.group, group_src=0)

    def close(self) -> None:
        """The server leaves the group (best effort: it may be gone), then we do. After a failed push neither
        side's group is destroyed (both would wait on the interrupted transfer): ours is aborted (NCCL) or
        dropped, and the server is left for its owner to restart."""
        if self.group is None:
            return
        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d

        group, self.group = self.group, None
        if self.failed is not None:
            if self.backend == "nccl":
                with contextlib.suppress(Exception):
                    c10d._abort_process_group(group)
            return
        with contextlib.suppress(EngineError):
            asyncio.run(_closing(self.engine, self.engine.destroy_weights_update_group(self.group_name)))
        dist.destroy_process_group(group)

    async def _push(self, count: int, stream: Iterator[Bucket], version: int) -> None:
        engine = self.engine
        names: list[list[str]] = []
        await engine.pause_generation(self.pause_mode)
        try:
            await engine.begin_weight_update()
            try:
                for i, bucket in enumerate(stream):  # each bucket made (gathered, cast) only now
                    last = i == count - 1
                    await engine.update_weights_from_distributed(
                        bucket,
                        self._broadcast,
                        group_name=self.group_name,
                        weight_version=str(version) if last else None,
                        flush_cache=last,
                    )
                    names.append([n for n, _ in bucket])
                    del bucket  # one bucket alive at a time, not two while the next is gathered
            finally:
                await engine.end_weight_update()
        finally:
            await engine.continue_generation()
        self.pushed_buckets = names
        self._pushed = True

    def push(self, weights: Weights, version: int) -> None:
        """Push ``weights`` (a state dict, or a :data:`BucketStream` such as ``Learner.weight_buckets``) as
        ``version``; after the first push the ``static`` names are left out. A push cut short raises
        :class:`PushFailed` and leaves this sync (and the server's side of its group) unusable: the caller
        restarts the server or pushes from disk. The stream's remaining buckets are still made (its gathers are
        collective on the learner's ranks, which go on with them)."""
        stream = dict_stream(weights) if isinstance(weights, dict) else weights
        count, buckets_ = stream(self.bucket_bytes, self.dtype, self.static if self._pushed else set())
        if self.failed is not None:
            for _ in buckets_:  # the other ranks' gathers
                pass
            raise PushFailed(f"NCCL weight sync: an earlier push failed ({self.failed}); restart the server")
        try:
            if self.group is None:  # a server held by a cut push answers no join either: failed the same way
                self.connect()
            asyncio.run(_closing(self.engine, self._push(count, buckets_, version)))
        except BaseException as err:  # an interrupt leaves the server's side just as stuck
            self.failed = _cause(err)
            if not isinstance(err, Exception):
                raise  # Ctrl-C / exit: the caller stops, no recovery attempted
            for _ in buckets_:  # the other ranks' gathers of the buckets not sent
                pass
            raise PushFailed(f"NCCL weight push of version {version} failed: {self.failed}") from err
        self.version = version


def server_label(engine: Any) -> str:
    """What the server of ``engine`` is called in messages ("SGLang server", "vLLM server")."""
    return getattr(engine, "server_label", "server")


# A server cut mid-transfer has its workers (and vLLM's engine core with them) inside a receive that SIGTERM does
# not interrupt: the usual 30 s of grace would pass in full (measured: 30.1 s of a 61 s restart), and there is
# nothing left to flush.
WEDGED_STOP_S = 5.0


def restart(sync: NcclSync, err: PushFailed) -> NcclSync:
    """After ``err`` cut a push short: restart the server ``sync``'s engine owns (its ``launch``) and
    return the sync that joins it under a new group (its first push is in full: the new server has only the
    checkpoint it was launched on). Raises :class:`PushFailed` with one line naming what to restart when the
    server is not ours (``engine.base_url``)."""
    sync.close()  # does not wait on the interrupted transfer
    engine = sync.engine
    server = getattr(engine, "server", None)
    if server is None:
        raise PushFailed(
            f"{err}. Restart the {server_label(engine)} at {engine.base_url} (an interrupted weight push leaves it unable "
            "to take another), then rerun this stage: it resumes from its last checkpoint"
        ) from err
    server.stop(timeout_s=WEDGED_STOP_S)
    server.start()
    return sync.renewed()


def restarted(err: PushFailed, version: int, label: str = "server") -> str:
    """What ``restart`` and the full push after it did, for the log (``label``: what the server is called)."""
    return f"{err}; restarted the {label} this stage owns and pushed version {version} to it"


def recover(sync: NcclSync, weights: Weights, version: int, err: PushFailed) -> tuple[NcclSync, str]:
    """``restart``, then push ``weights`` as ``version`` again, in full, over the new sync (one process: the
    stage's ranks do it step by step, ``_Run.push_buckets``). Returns the new sync and what was done."""
    fresh = restart(sync, err)
    fresh.push(weights, version)
    return fresh, restarted(err, version, server_label(sync.engine))
