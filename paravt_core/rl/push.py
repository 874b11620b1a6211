"""The learner's weights to the rollout engine after every step, on every rank: ``WeightPush``.

Rank 0 holds the engine's weight sync (``weight_sync.py``: in-process, from disk, or over a process group);
the other ranks take part in what is collective (the learner's gathers, the outcome). A push cut short over a
process group restarts the server the stage owns and pushes again in full; an external server, a failed
restart or a failed push after it stop every rank with rank 0's error, which each learns before its next
collective (never at the distributed timeout). The RL stage pushes through it, and so does ``gpu_check``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import torch

from paravt_core.engines.registry import KINDS
from paravt_core.stage import console
from paravt_core.train.dist import Dist

from .weight_sync import (
    DiskSync,
    InProcessSync,
    NcclSync,
    PushFailed,
    recover,
    restart,
    restarted,
    server_label,
)


def streams(engine_cfg: Any) -> bool:
    """The push goes over a process group, bucket by bucket (every rank walks the learner's gathers)."""
    return getattr(engine_cfg, "weight_sync", None) == "distributed"


def make_sync(engine_cfg: Any, engine: Any, hf_model: Any, staging: str, dtype: Any) -> Any:
    """Rank 0's weight sync for ``engine`` as its config says: in-process, over a process group, or from disk
    (``staging``: a directory the server can read; ``dtype``: the served weights')."""
    if KINDS[engine_cfg.kind].in_process:
        return InProcessSync(engine)
    if streams(engine_cfg):
        return NcclSync(
            engine,
            master_address=engine_cfg.nccl_address,
            master_port=engine_cfg.nccl_port,
            server_ranks=engine_cfg.server_ranks,
            bucket_bytes=engine_cfg.bucket_mb << 20,
            pause_mode=engine_cfg.pause_mode,
            dtype=dtype,  # the served weights' dtype, whatever the learner keeps
            backend="nccl" if torch.cuda.is_available() else "gloo",  # a CPU learner: a CPU server's build
        )
    return DiskSync(engine, hf_model, staging, pause_mode=engine_cfg.pause_mode, dtype=dtype)


@dataclasses.dataclass(eq=False)
class WeightPush:
    """One run's pushes. ``sync`` is rank 0's (None on the others); ``streams``: the process-group push,
    known on every rank; ``bucket_bytes``: the other ranks' gather size (rank 0 uses its sync's)."""

    d: Dist
    learner: Any
    sync: Any
    dtype: Any  # the served weights' dtype
    streams: bool = False
    bucket_bytes: int = 1 << 30
    pushed_full: bool = False  # the process-group push: the frozen tower is on the server

    @property
    def lead(self) -> bool:
        return self.d.rank == 0

    @property
    def version(self) -> int:
        """The policy version the engine serves (rank 0)."""
        return int(self.sync.version)

    def push(self, version: int) -> tuple[dict[str, Any] | None, float]:
        """Push the new weights as ``version`` (collective; rank 0 sends); the weights when they were gathered
        whole (a disk or in-process push; None for the process-group push) and the push's seconds."""
        t0 = time.perf_counter()
        if self.streams:
            self.push_buckets(version)
            return None, time.perf_counter() - t0
        weights = self.learner.weights(self.dtype)
        failed: Exception | None = None
        if self.lead:
            try:
                self.push_weights(weights, version)
            except Exception as err:
                failed = err
        self.agree(failed)  # the other ranks stop with rank 0, not at their next collective's timeout
        return weights, time.perf_counter() - t0

    def verify(self) -> None:
        """Rank 0: a fleet's servers all serve the pushed version (``DiskSync.verify``); else nothing."""
        check = getattr(self.sync, "verify", None)
        if check is not None:
            check()

    def push_buckets(self, version: int) -> None:
        """The process-group push straight from the device: every rank walks ``Learner.weight_buckets`` (the
        frozen tower only in a full push: the first one and the one to a restarted server) while rank 0 sends
        each bucket. A cut push restarts the server this stage owns and all ranks push again in full."""

        def stream(max_bytes: int, dtype: Any, skip: set[str]) -> Any:
            return self.learner.weight_buckets(max_bytes, dtype, skip)

        def attempt(skip: set[str]) -> PushFailed | None:  # collective: every rank walks the gathers
            if not self.lead:
                for _ in self.learner.weight_buckets(self.bucket_bytes, self.dtype, skip)[1]:
                    pass
                return None
            try:
                self.sync.push(stream, version)  # on failure it still makes the buckets not sent
            except PushFailed as err:
                return err
            return None

        failure = attempt(self.learner.frozen_names() if self.pushed_full else set())
        if not self.d.gather(failure is not None)[0]:  # rank 0's word: it went through
            self.pushed_full = True
            return
        self.pushed_full = False
        refused: Exception | None = None
        if self.lead:
            assert failure is not None
            try:
                self.sync = restart(self.sync, failure)  # raises the line naming an external server
            except PushFailed as err:
                refused = err
            except Exception as err:  # the launch failed: said as a push failure, the cause kept
                said = f"restarting the {server_label(self.sync.engine)} failed"
                refused = PushFailed(f"{failure}; {said}: {type(err).__name__}: {err}")
                refused.__cause__ = err
        self.agree(refused)  # the others wait here, not in gathers rank 0 would never join
        self.agree(attempt(set()))
        self.pushed_full = True
        if self.lead:
            console.print(
                f"rl: {restarted(failure, version, server_label(self.sync.engine))}", soft_wrap=True
            )

    def agree(self, err: Exception | None) -> None:
        """Rank 0's outcome of a step only it takes (``err``: its error or None; the other ranks' is ignored),
        learnt by every rank at once (collective): when it failed, rank 0 raises ``err`` and every other rank
        :class:`PushFailed` with its message (the same for a ``PushFailed``)."""
        said: str | None = None
        if err is not None and self.lead:
            said = str(err) if isinstance(err, PushFailed) else f"{type(err).__name__}: {err}"
        said = self.d.gather(said)[0]
        if said is None:
            return
        if self.lead and err is not None:
            raise err
        raise PushFailed(said)

    def push_weights(self, weights: dict[str, Any], version: int) -> None:
        """Rank 0's push of a whole state dict; a process-group push cut short restarts the server this stage
        owns (or, for an external server, ends the stage with one line naming what to restart): never a
        rollout on a wedged server."""
        try:
            self.sync.push(weights, version)
        except PushFailed as err:
            if not isinstance(self.sync, NcclSync):
                raise
            self.sync, done = recover(self.sync, weights, version, err)
            console.print(f"rl: {done}", soft_wrap=True)

    def close(self) -> None:
        """Rank 0: the server leaves this run's process group (the process-group push), then a server this run
        launched is stopped."""
        if hasattr(self.sync, "close"):
            self.sync.close()
        server = getattr(getattr(self.sync, "engine", None), "server", None)
        if server is not None:
            server.stop()
