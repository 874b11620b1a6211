"""Runs inside a vLLM server's workers, in vLLM's own environment: the receiving side of a weight push over a
torch process group (gloo on CPU, NCCL on GPUs) through vLLM's weight-transfer routes.

vLLM 0.32's own backends are NCCL through its ``PyNcclCommunicator`` (the trainer must import vLLM to join it)
and CUDA IPC; neither runs on a CPU build, and our learner does not import vLLM. This backend joins a plain
torch group instead, built the way the trainer side builds it (``rl.weight_sync.NcclSync._join``: a rendezvous
at ``tcp://address:port``, a store prefixed with the group name), so the learner's ``torch.distributed``
broadcasts are what the workers receive. Received tensors go through vLLM's layerwise reload (as its NCCL
backend's do), so layers that repack their weights after loading (the CPU build's linear layers) are rebuilt.

Start the server with this file's directory on ``PYTHONPATH`` and
``--worker-extension-cls paravt_weight_transfer.Registered --weight-transfer-config '{"backend": "paravt_torch"}'``
(``engines/vllm_engine.py`` ``transfer_args``): importing the extension in each worker registers the backend
before the worker builds its transfer engine. This file imports nothing of ours.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d
from vllm.distributed.weight_transfer.base import (
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

BACKEND = "paravt_torch"


@dataclass
class TorchGroupInitInfo(WeightTransferInitInfo):
    master_address: str
    master_port: int
    rank_offset: int  # the trainer is rank 0; the server's workers follow it
    world_size: int
    group_name: str
    backend: str = "nccl"  # torch.distributed's: nccl on GPUs, gloo on CPU
    timeout_s: float = 600.0


@dataclass
class TorchGroupUpdateInfo(WeightTransferUpdateInfo):
    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]

    def __post_init__(self) -> None:
        if not len(self.names) == len(self.dtype_names) == len(self.shapes):
            raise ValueError(
                f"names, dtype_names and shapes differ in length: "
                f"{len(self.names)}, {len(self.dtype_names)}, {len(self.shapes)}"
            )


class TorchGroupWeightTransfer(WeightTransferEngine[TorchGroupInitInfo, TorchGroupUpdateInfo]):
    init_info_cls = TorchGroupInitInfo
    update_info_cls = TorchGroupUpdateInfo
    supports_draft_weight_update = False

    def __init__(self, config: Any, vllm_config: Any, device: torch.device, model: torch.nn.Module) -> None:
        super().__init__(config, vllm_config, device, model)
        self.group: Any = None

    def init_transfer_engine(self, init_info: TorchGroupInitInfo) -> None:
        self.shutdown()  # a new trainer (a retried run) replaces the last one's group
        parallel = self.parallel_config
        rank = init_info.rank_offset + parallel.data_parallel_index * parallel.world_size + parallel.rank
        timeout = timedelta(seconds=init_info.timeout_s)
        address = f"tcp://{init_info.master_address}:{init_info.master_port}"
        store, rank, world = next(c10d.rendezvous(address, rank, init_info.world_size, timeout=timeout))
        store.set_timeout(timeout)
        group, _ = c10d._new_process_group_helper(
            world,
            rank,
            [],
            c10d.Backend(init_info.backend),
            c10d.PrefixStore(init_info.group_name, store),
            group_name=init_info.group_name,
            timeout=timeout,
        )
        c10d._world.pg_group_ranks[group] = {i: i for i in range(world)}
        self.group = group

    def start_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        initialize_layerwise_reload(self.model)

    def finish_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        finalize_layerwise_reload(self.model, self.model_config)

    def receive_weights(self, update_info: TorchGroupUpdateInfo) -> None:
        if self.group is None:
            raise RuntimeError("paravt_torch weight transfer: /init_weight_transfer_engine first")
        for name, dtype_name, shape in zip(
            update_info.names, update_info.dtype_names, update_info.shapes, strict=True
        ):
            tensor = torch.empty(shape, dtype=getattr(torch, dtype_name), device=self.device)
            dist.broadcast(tensor, group=self.group, group_src=0)
            self.model.load_weights([(name, tensor)])
            del tensor

    def shutdown(self) -> None:
        group, self.group = self.group, None
        if group is not None:
            with contextlib.suppress(Exception):
                dist.destroy_process_group(group)


class Registered:
    """The worker extension (``--worker-extension-cls``): it adds no method; importing it registers the
    backend in the worker's process."""


with contextlib.suppress(ValueError):  # already registered: this module imported twice
    WeightTransferEngineFactory.register_engine(BACKEND, TorchGroupWeightTransfer)
