"""Process groups for the trainers: one plain process, or ``torchrun`` ranks (NCCL on GPUs, gloo on CPUs)."""

from __future__ import annotations

import datetime
import os
import pickle
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

DEFAULT_TIMEOUT_S = 1800.0


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    sharded: bool = False  # launched by torchrun: FSDP2 + collectives
    timeout_s: float = DEFAULT_TIMEOUT_S

    def barrier(self) -> None:
        if self.sharded:
            dist.barrier()

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over ranks."""
        if not self.sharded:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.tolist()

    def to_device(self, values: list[float], dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """``values`` as a tensor on the device, copied asynchronously (pinned host memory on CUDA)."""
        host = torch.tensor(values, dtype=dtype)
        if self.device.type == "cuda":
            host = host.pin_memory()
        return host.to(self.device, non_blocking=True)

    def sum_tensor(self, t: torch.Tensor) -> torch.Tensor:
        """Element-wise sum over ranks of a device tensor, left on the device (no read-back)."""
        if self.sharded:
            dist.all_reduce(t)
        return t

    def gather(self, obj: Any) -> list[Any]:
        if not self.sharded:
            return [obj]
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out


# The NCCL settings SGLang 0.5.23 gives its own process when one node serves with its defaults
# (entrypoints/engine.py, _set_envs_and_config: cuMem-backed buffers and NVLink SHARP off unless set). Both
# ends of the weight-update group must agree, or NCCL fails with invalid-argument CUDA errors: the learner
# takes the same, and a value already in the environment wins, as it does there. The contract test reads
# them from SGLang's code (tests/contract/test_sglang_contract.py).
SERVER_NCCL_ENV = {"NCCL_CUMEM_ENABLE": "0", "NCCL_NVLS_ENABLE": "0"}


def server_nccl_env() -> dict[str, str]:
    """Give this process the rollout server's NCCL settings (``SERVER_NCCL_ENV``) where they are unset, before
    any NCCL communicator is made; returns the ones set."""
    added = {k: v for k, v in SERVER_NCCL_ENV.items() if k not in os.environ}
    os.environ.update(added)
    return added


def setup_distributed(timeout_s: float = DEFAULT_TIMEOUT_S) -> Dist:
    """A process group when started by torchrun (``RANK``/``WORLD_SIZE`` set), else one plain process.

    ``timeout_s``: the collectives' timeout (NCCL's watchdog aborts a collective that waits longer). Either
    way the process gets the rollout server's NCCL settings (``server_nccl_env``)."""
    server_nccl_env()
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
        return Dist(device=device, timeout_s=timeout_s)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    return Dist(dist.get_rank(), dist.get_world_size(), local_rank, device, sharded=True, timeout_s=timeout_s)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class LeadHandoff:
    """Rank 0 hands each step's payload to the other ranks without making them sit in a collective.

    Why: a follower inside ``broadcast`` through rank 0's whole rollout and weight push is aborted by NCCL's
    watchdog (``timeout_s``). Here the followers wait on the process group's key-value store (TCP, outside
    every communicator) for rank 0's "ready" key, with its own stated timeout ``wait_s``; the key holds the
    payload's size, and only then does everyone enter one broadcast of that many bytes (the store itself is
    not made for large values: the TCP store resets connections for values of tens of MB)."""

    def __init__(self, d: Dist, wait_s: float, prefix: str = "paravt/handoff"):
        self.d, self.wait_s, self.prefix = d, wait_s, prefix
        # The default group's store: the one torchrun's rendezvous made (no second port to open).
        self.store = dist.distributed_c10d._get_default_store() if d.sharded else None
        self.bytes_sent = 0  # of the last handoff: payload size x receiving ranks

    def share(self, step: int, obj: Any) -> Any:
        """Rank 0: publish ``obj`` for ``step`` and return it; other ranks: wait (``wait_s``) and return it."""
        if not self.d.sharded:
            self.bytes_sent = 0
            return obj
        key = f"{self.prefix}/{step}"
        if self.d.rank == 0:
            data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
            self.store.set(key, str(len(data)))
            if step > 0:  # every rank read the previous key before the previous step's collectives
                self.store.delete_key(f"{self.prefix}/{step - 1}")
            buf = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(self.d.device)
        else:
            self.store.wait([key], datetime.timedelta(seconds=self.wait_s))
            size = int(self.store.get(key))
            buf = torch.empty(size, dtype=torch.uint8, device=self.d.device)
        dist.broadcast(buf, src=0)
        self.bytes_sent = int(buf.numel()) * (self.d.world - 1)
        return obj if self.d.rank == 0 else pickle.loads(buf.cpu().numpy().tobytes())
