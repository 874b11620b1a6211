"""RL checkpoints (``torch.distributed.checkpoint``) and the final Hugging Face model.

Layout under the stage output (local directory or ``s3://`` prefix)::

    checkpoints/step_00000005/
        model_optim/     DCP: policy weights + AdamW state (.distcp shards + .metadata)
        trainer.json     step, policy version, data position, reference-model URI, metrics so far
        rng.pt           Python / torch RNG states
        _COMPLETE        written last: a checkpoint without it is ignored (killed while saving)
    final/               save_pretrained() model + processor, then _COMPLETE (loadable by paravt_core.models)

A SIGKILL at any point leaves either a complete checkpoint or an incomplete directory that the next run
ignores and overwrites. For ``s3://`` outputs the files are written to a local staging directory first and
uploaded, the marker last.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from paravt_core import storage

CHECKPOINTS = "checkpoints"
FINAL = "final"
_STEP_DIR = re.compile(r"^step_(\d{8})$")


def step_dir(output: str, step: int) -> str:
    return storage.join(output, CHECKPOINTS, f"step_{step:08d}")


def list_checkpoints(output: str) -> list[tuple[int, str, bool]]:
    """(step, uri, complete) of every checkpoint directory, oldest first."""
    root = storage.join(output, CHECKPOINTS)
    names: set[str] = set()
    if storage.is_s3(root):
        for uri in storage.list_uris(root):
            rel = uri[len(root.rstrip("/")) + 1 :]
            names.add(rel.split("/", 1)[0])
    elif os.path.isdir(root):
        names = set(os.listdir(root))
    found = []
    for name in names:
        match = _STEP_DIR.match(name)
        if match:
            uri = storage.join(root, name)
            found.append((int(match.group(1)), uri, storage.is_complete(uri)))
    return sorted(found)


def latest_complete(output: str) -> str | None:
    complete = [uri for _, uri, ok in list_checkpoints(output) if ok]
    return complete[-1] if complete else None


def _delete_tree(uri: str) -> None:
    if storage.is_s3(uri):
        for key in storage.list_uris(uri):
            storage.delete(key)
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
) -> str:
    """Write checkpoint ``step`` atomically (marker last) and prune older ones. Returns its URI."""
    uri = step_dir(output, step)
    _delete_tree(uri)  # leftovers of a run killed while writing this very step
    local = os.path.join(staging_root, f"step_{step:08d}") if storage.is_s3(output) else uri
    shutil.rmtree(local, ignore_errors=True)
    os.makedirs(local, exist_ok=True)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=os.path.join(local, "model_optim"))
    torch.save({"python": random.getstate(), "torch": torch.get_rng_state()}, os.path.join(local, "rng.pt"))
    Path(local, "trainer.json").write_text(json.dumps(trainer_state))
    if local != uri:
        storage.upload_dir(local, uri)
        shutil.rmtree(local, ignore_errors=True)
    storage.mark_complete(uri, {"step": step})
    prune(output, keep_last)
    return uri


def prune(output: str, keep_last: int) -> None:
    """Keep the ``keep_last`` newest complete checkpoints; drop older ones and stale incomplete ones."""
    found = list_checkpoints(output)
    complete = [s for s, _, ok in found if ok]
    keep = set(complete[-keep_last:])
    newest = complete[-1] if complete else -1
    for s, uri, ok in found:
        if s not in keep and (ok or s < newest):
            _delete_tree(uri)


def load(uri: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, staging_root: str) -> dict:
    """Restore policy weights, optimizer and RNG from checkpoint ``uri``; returns the trainer state."""
    local = uri
    if storage.is_s3(uri):
        local = os.path.join(staging_root, "resume", uri.rstrip("/").rsplit("/", 1)[-1])
        shutil.rmtree(local, ignore_errors=True)
        storage.download_dir(uri, local)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=os.path.join(local, "model_optim"))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    rng = torch.load(os.path.join(local, "rng.pt"), weights_only=False)
    random.setstate(rng["python"])
    torch.set_rng_state(rng["torch"])
    return json.loads(Path(local, "trainer.json").read_text())


def save_final(output: str, model: Any, processor: Any, *, staging_root: str) -> str:
    """The trained policy as a Hugging Face checkpoint at ``<output>/final`` (marker last)."""
    uri = storage.join(output, FINAL)
    _delete_tree(uri)
    local = os.path.join(staging_root, FINAL) if storage.is_s3(output) else uri
    shutil.rmtree(local, ignore_errors=True)
    model.save_pretrained(local)
    processor.save_pretrained(local)
    if local != uri:
        storage.upload_dir(local, uri)
        shutil.rmtree(local, ignore_errors=True)
    storage.mark_complete(uri, {"kind": "hf"})
    return uri
