"""The stage pod's download caches (models from S3, S3 objects, the Hugging Face hub) on the volume the
pipeline gives them, or under ``~/.cache`` where that volume is not writable.

The pipeline mounts a sized generic ephemeral volume at ``/var/cache/paravt`` (pipelines/platform.py,
``add_cache_volume``) and points ``PARAVT_MODEL_CACHE``, ``PARAVT_CACHE_DIR`` and ``HF_HOME`` into it. A
fresh volume's root belongs to root, mode 755, unless the storage class makes it writable or the pod has an
``fsGroup`` (kubelet changes a volume's group only then; KFP 2.17's compiler sets none, argocompiler/argo.go
``wf.Spec.SecurityContext``): the images' uid 10001 then cannot write there. ``settle_caches`` checks each
directory once, at the start of the stage, and leaves a variable it cannot use unset, so the code's default
under the image user's own ``~/.cache`` (created and owned in the images) applies, with one line that says so.
Called before anything reads ``HF_HOME`` (huggingface_hub reads it at import).
"""

from __future__ import annotations

import os
from collections.abc import Callable

CACHE_ENV = ("PARAVT_MODEL_CACHE", "PARAVT_CACHE_DIR", "HF_HOME")


def settle_caches(log: Callable[[str], None] = print) -> list[str]:
    """Create the directory of each cache variable that is set; unset those that cannot be created or
    written (the default under ``~/.cache`` applies). Returns the variables unset. A variable whose parent
    directory does not exist is unset without a word: no volume there (``kfp.local`` sets the variables
    too, and a local run must not write to ``/var/cache``)."""
    dropped, absent = [], []
    for name in CACHE_ENV:
        path = os.environ.get(name, "")
        if not path:
            continue
        if not os.path.isdir(os.path.dirname(path.rstrip("/"))):
            del os.environ[name]
            absent.append(name)
            continue
        try:
            os.makedirs(path, exist_ok=True)
            usable = os.access(path, os.W_OK | os.X_OK)
        except OSError:
            usable = False
        if not usable:
            del os.environ[name]
            dropped.append(name)
    if dropped:
        log(
            f"caches: {', '.join(dropped)} not writable by uid {os.getuid()} (a volume whose root belongs to "
            "root): using ~/.cache on the node's disk instead; give the cache volume's storage class a "
            "writable root or the pods an fsGroup (docs/reference.md, 'Caches')"
        )
    return absent + dropped
