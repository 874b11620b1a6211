"""Pushing the learner's weights to the rollout engine after every step (policy version + 1).

- ``InProcessSync``: the in-process ``TransformersEngine`` loads the state dict directly.
- ``DiskSync``: an SGLang server reloads a Hugging Face directory written by rank 0 into a staging
  directory the server can read (``/update_weights_from_disk``); the previous version's directory is
  deleted once the server has moved on.
- ``NcclSync``: the tensors go straight from rank 0's GPU to the server's over an NCCL group that the
  server joins (``/init_weights_update_group`` once, then ``/update_weights_from_distributed`` per step);
  GPU only.

Every sync keeps ``version`` (the policy version the engine serves, an int) for the samples' bookkeeping.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from typing import Any

import torch

from paravt_core.engines.base import EngineError


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
    def __init__(self, engine: Any, hf_model: Any, staging_dir: str, version: int = 0):
        """``hf_model``: the policy (its config and ``save_pretrained`` write the directory)."""
        self.engine, self.hf_model, self.staging_dir = engine, hf_model, staging_dir
        self.version = version
        self._served: str | None = None

    def push(self, weights: dict[str, torch.Tensor], version: int) -> None:
        from transformers.utils import logging as hf_logging

        path = os.path.join(self.staging_dir, f"v{version:08d}")
        shutil.rmtree(path, ignore_errors=True)
        hf_logging.disable_progress_bar()
        self.hf_model.save_pretrained(path, state_dict=weights)
        asyncio.run(
            _closing(self.engine, self.engine.update_weights_from_disk(path, weight_version=str(version)))
        )
        if self._served is not None and self._served != path:
            shutil.rmtree(self._served, ignore_errors=True)  # the server reads the new one now
        self._served, self.version = path, version


class NcclSync:
    """GPU only: our rank 0 is rank 0 of a group whose ranks 1.. are the server's GPUs."""

    GROUP = "weight_update_group"

    def __init__(
        self, engine: Any, *, master_address: str, master_port: int, server_ranks: int, version: int = 0
    ):
        self.engine, self.version = engine, version
        self.master_address, self.master_port, self.server_ranks = master_address, master_port, server_ranks
        self.group: Any = None

    def _join(self) -> None:
        # torch has no public call for a process group outside torchrun's world; this is the construction the
        # SGLang server uses for its side (rendezvous at tcp://address:port, a store prefixed with the group
        # name), so both ends meet in the same store keys.
        from datetime import timedelta

        from torch.distributed import distributed_c10d as c10d

        world = 1 + self.server_ranks
        timeout = timedelta(minutes=10)
        rendezvous = c10d.rendezvous(
            f"tcp://{self.master_address}:{self.master_port}", 0, world, timeout=timeout
        )
        store, rank, world = next(rendezvous)
        store.set_timeout(timeout)
        group, _ = c10d._new_process_group_helper(
            world,
            rank,
            [],
            c10d.Backend("nccl"),
            c10d.PrefixStore(self.GROUP, store),
            group_name=self.GROUP,
            timeout=timeout,
        )
        c10d._world.pg_group_ranks[group] = {i: i for i in range(world)}
        self.group = group

    def connect(self) -> None:
        asyncio.run(
            _closing(
                self.engine,
                self.engine.init_weights_update_group(
                    self.master_address,
                    self.master_port,
                    rank_offset=1,
                    world_size=1 + self.server_ranks,
                    group_name=self.GROUP,
                    trainer_join=self._join,
                ),
            )
        )

    def _broadcast(self, tensor: torch.Tensor) -> None:
        if self.group is None:
            raise EngineError("NCCL weight sync: connect() first")
        self.group.broadcast([tensor.cuda()], 0).wait()

    def push(self, weights: dict[str, torch.Tensor], version: int) -> None:
        if self.group is None:
            self.connect()
        named = list(weights.items())
        asyncio.run(
            _closing(
                self.engine,
                self.engine.update_weights_from_distributed(
                    named, self._broadcast, group_name=self.GROUP, weight_version=str(version)
                ),
            )
        )
        self.version = version
