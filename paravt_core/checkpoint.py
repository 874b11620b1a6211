"""Training checkpoints (``torch.distributed.checkpoint``) and the final Hugging Face checkpoint, shared by the
SFT and RL stages.

Layout under the stage output (local directory or ``s3://`` prefix)::

    checkpoints/step_00000010/
        model_optim/         DCP: model + AdamW state, one shard file per saving rank + .metadata
        trainer.json         the stage's own state: step, data position, metrics so far, ... (rank 0)
        scheduler.pt         LR scheduler state (only for a stage that has a scheduler)
        rng/rank_00000.pt    Python / NumPy / torch RNG states of each rank
        _COMPLETE            written last: a checkpoint without it is ignored (killed while saving)
    final/                   save_pretrained() model + processor, then _COMPLETE (paravt_core.models.load)

DCP stores each tensor with its global shape and shard offsets, so a checkpoint written by N ranks loads on
M ranks (or one process) and the optimizer state follows the parameters. Every function is collective under
a process group (every rank calls it) and plain in one process. Local outputs are written in place; for
``s3://`` every rank writes into a local staging directory and uploads the files it wrote, and rank 0 writes
the marker after everyone finished. A SIGKILL at any point leaves either a complete checkpoint or an
incomplete directory that the next run ignores and overwrites. Resuming from ``s3://`` downloads the
checkpoint beside the staging copy and renames it whole, so a copy cut short is fetched again.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)

from paravt_core import storage

CHECKPOINTS = "checkpoints"
FINAL = "final"
_STEP_DIR = re.compile(r"^step_(\d{8})$")
_RANK_FILE = re.compile(r"^__(\d+)_\d+\.distcp$|^rank_(\d+)\.pt$")


def step_dir(output: str, step: int) -> str:
    return storage.join(output, CHECKPOINTS, f"step_{step:08d}")


@contextlib.contextmanager
def _single_process_ok() -> Iterator[None]:
    """DCP warns on every save/load without a process group; one process is a supported layout here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def list_checkpoints(output: str) -> list[tuple[int, str, bool]]:
    """(step, uri, complete) of every checkpoint directory under ``output``, by step."""
    root = storage.join(output, CHECKPOINTS)
    steps: set[int] = set()
    for uri in storage.list_uris(root):
        rel = uri[len(root) :].strip("/")
        match = _STEP_DIR.match(rel.split("/", 1)[0])
        if match:
            steps.add(int(match.group(1)))
    return [(s, step_dir(output, s), storage.is_complete(step_dir(output, s))) for s in sorted(steps)]


def latest_complete(output: str) -> str | None:
    complete = [uri for _, uri, ok in list_checkpoints(output) if ok]
    return complete[-1] if complete else None


def _rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _delete_tree(uri: str) -> None:
    storage.clear_complete(uri)  # marker first: a half-deleted checkpoint must never look complete
    if storage.is_s3(uri):
        for item in storage.list_uris(uri):
            storage.delete(item)
    else:
        shutil.rmtree(uri, ignore_errors=True)


def save(
    output: str,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    trainer_state: dict[str, Any],
    *,
    staging_root: str,
    keep_last: int,
    scheduler: Any | None = None,
) -> str:
    """Write checkpoint ``step`` (collective) and prune old ones. Returns its URI.

    ``trainer_state``: JSON-able, written by rank 0 and handed back by ``load``; ``staging_root``: this
    rank's local scratch directory (used for ``s3://`` outputs)."""
    rank = _rank()
    uri = step_dir(output, step)
    local = os.path.join(staging_root, f"step_{step:08d}") if storage.is_s3(output) else uri
    if rank == 0:  # leftovers of a run killed while writing this very step
        _delete_tree(uri)
        if local != uri:
            shutil.rmtree(local, ignore_errors=True)
    _barrier()
    os.makedirs(os.path.join(local, "rng"), exist_ok=True)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    with _single_process_ok():
        dcp.save(
            {"model": model_sd, "optim": optim_sd},
            checkpoint_id=os.path.join(local, "model_optim"),
            no_dist=not dist.is_initialized(),
        )
    torch.save(_rng_state(), os.path.join(local, "rng", f"rank_{rank:05d}.pt"))
    if rank == 0:
        if scheduler is not None:
            torch.save(scheduler.state_dict(), os.path.join(local, "scheduler.pt"))
        Path(local, "trainer.json").write_text(json.dumps(trainer_state))
    _barrier()
    if local != uri:
        for path in sorted(Path(local).rglob("*")):
            if path.is_file() and _owner(path.name) == rank:
                storage.upload_file(str(path), storage.join(uri, path.relative_to(local).as_posix()))
        _barrier()
    if rank == 0:
        storage.mark_complete(uri, {"step": step})
        prune(output, keep_last)
        if local != uri:
            shutil.rmtree(local, ignore_errors=True)
    _barrier()
    return uri


def _owner(name: str) -> int:
    """Rank that uploads a staged file: shard and RNG files belong to their rank, the rest to rank 0."""
    match = _RANK_FILE.match(name)
    if not match:
        return 0
    return int(match.group(1) or match.group(2))


def prune(output: str, keep_last: int) -> None:
    """Keep the ``keep_last`` newest complete checkpoints; drop older ones and incomplete leftovers."""
    found = list_checkpoints(output)
    complete = [s for s, _, ok in found if ok]
    keep = set(complete[-keep_last:])
    newest = complete[-1] if complete else -1
    for s, uri, ok in found:
        if s not in keep and (ok or s < newest):
            _delete_tree(uri)


def _local_dir(uri: str, staging_root: str) -> str:
    if not storage.is_s3(uri):
        return uri
    local = os.path.join(staging_root, "resume", uri.rstrip("/").rsplit("/", 1)[-1])
    if not os.path.exists(os.path.join(local, storage.COMPLETE_MARKER)):
        shutil.rmtree(local, ignore_errors=True)
        # objects arrive in parallel, the marker often first: fetch beside it, then rename the whole copy
        part = local + ".part"
        shutil.rmtree(part, ignore_errors=True)
        storage.download_dir(uri, part)
        os.replace(part, local)
    return local


def load(
    uri: str,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    staging_root: str,
    scheduler: Any | None = None,
) -> dict[str, Any]:
    """Restore model, optimizer, scheduler (if given) and this rank's RNG from checkpoint ``uri`` (collective).

    Returns the trainer state (``trainer.json``). Works whatever the number of ranks that saved it."""
    local = _local_dir(uri, staging_root)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    with _single_process_ok():
        dcp.load(state, checkpoint_id=os.path.join(local, "model_optim"), no_dist=not dist.is_initialized())
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    if scheduler is not None:
        scheduler.load_state_dict(torch.load(os.path.join(local, "scheduler.pt"), weights_only=False))
    rng = os.path.join(local, "rng", f"rank_{_rank():05d}.pt")
    if os.path.exists(rng):  # a rank that did not exist in the saving run keeps its fresh seed
        _set_rng_state(torch.load(rng, weights_only=False))
    return json.loads(Path(local, "trainer.json").read_text())


def save_hf(hf_model: Any, path: str, state: dict[str, torch.Tensor], dtype: torch.dtype | None) -> None:
    """``hf_model.save_pretrained(path)`` with the weights of ``state``, its floating tensors cast to ``dtype``
    (None: as they are), and a ``config.json`` whose ``dtype`` is the one written. ``save_pretrained`` records
    the dtype of the module's own parameters (fp32 masters, even for a bf16 state dict), and SGLang's
    ``--dtype auto`` reads that field: float32 there makes it serve float16 (``_get_and_verify_dtype``)."""
    import copy

    from paravt_core.models import hf_bars_off

    if dtype is not None:
        state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}
    floating = {v.dtype for v in state.values() if v.is_floating_point()}
    written = dtype or (floating.pop() if len(floating) == 1 else None)
    with hf_bars_off():  # "Writing model shards" bars in every log otherwise
        hf_model.save_pretrained(path, state_dict=state)
    if written is not None:
        config = copy.deepcopy(hf_model.config)  # the live model's config keeps describing the live model
        config.dtype = written
        for key in getattr(config, "sub_configs", {}):
            sub = getattr(config, key, None)
            if sub is not None:
                sub.dtype = written
        config.save_pretrained(path)


def save_final(
    output: str,
    model: torch.nn.Module,
    processor: Any,
    *,
    staging_root: str,
    dtype: torch.dtype | None = None,
    submodule: str = "",
) -> str:
    """Write the Hugging Face checkpoint ``<output>/final`` (collective: gathers the full weights).

    ``model``: the trained module; ``submodule``: the attribute under which it holds the Hugging Face model
    that is saved ("" when ``model`` is that model, e.g. ``"inner"`` for SFT's ``PackedLoss``); ``dtype``: the
    dtype of the saved floating-point weights and of ``config.json`` (default: as trained)."""
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    prefix = f"{submodule}." if submodule else ""
    state = {k.removeprefix(prefix): v for k, v in full.items()}
    hf_model = getattr(model, submodule) if submodule else model
    uri = storage.join(output, FINAL)
    if _rank() == 0:
        local = os.path.join(staging_root, FINAL) if storage.is_s3(output) else uri
        _delete_tree(uri)
        if local != uri:
            shutil.rmtree(local, ignore_errors=True)
        save_hf(hf_model, local, state, dtype)
        processor.save_pretrained(local)
        if local != uri:
            storage.upload_dir(local, uri)
            shutil.rmtree(local, ignore_errors=True)
        storage.mark_complete(uri)
    _barrier()
    return uri
