"""Counting the places where training code reads a tensor's value back into Python.

On a GPU every such read (``.item()``, ``float(t)``, ``.tolist()``, ``torch.nonzero``, ``.cpu()``...) of a
device tensor makes the host wait until the GPU has finished everything queued before it: the host cannot
queue the next micro-batch's kernels while the GPU computes. ``torch.cuda.set_sync_debug_mode`` reports
those on CUDA only; :class:`HostReads` counts the same calls on any device (CPU tests included), limited to
calls made from the given source folders (the project's own training code; torch's and transformers'
internals are the GPU profile's business), so the count is the same on CPU and GPU. ``.to(device)`` is not counted: on
a CPU run its target is the host whichever way the copy goes (``.cpu()`` is the read-back spelled out).
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Iterable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

# Tensor methods and functions whose result is a Python value or host data made from the tensor's values.
READS = frozenset(
    {"item", "tolist", "__float__", "__int__", "__bool__", "__index__", "numpy", "cpu", "nonzero"}
)
_PAVT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH = os.path.dirname(os.path.abspath(torch.__file__))
_OPTIM = os.path.join(_TORCH, "optim") + os.sep
_SELF = os.path.abspath(__file__)


class HostReads(TorchFunctionMode):
    """``with HostReads() as r: ...`` -> ``r.total``, ``r.sites`` ({"file.py:line": count}).

    Counts the reads listed in ``READS`` whose first caller outside torch lies under
    one of ``roots`` (default: the ``paravt_core`` package). The mode is thread-local: work done on other
    threads (the background packing of the next step) is not counted, as it never blocks the step."""

    def __init__(self, roots: Iterable[str] = (_PAVT,)):
        super().__init__()
        self.roots = tuple(os.path.abspath(r) + os.sep for r in roots)
        self.sites: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.sites.values())

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in READS:
            site = _caller()
            if site is not None and site[0].startswith(self.roots):
                self.sites[f"{os.path.relpath(site[0], os.path.dirname(_PAVT))}:{site[1]}"] += 1
        return func(*args, **kwargs)


def _caller() -> tuple[str, int] | None:
    frame = sys._getframe()  # this one, HostReads.__torch_function__ (and any wrapper of theirs) skipped
    while frame is not None and _own(frame):
        frame = frame.f_back
    # the frame that called into torch's dispatch
    if frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_OPTIM):
        # torch's optimizers keep their ``step`` counters on the host unless ``capturable`` (the
        # ``_get_value(step)`` reads of torch/optim/optimizer.py): host reads, never a device sync
        return None
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_TORCH):
            return path, frame.f_lineno
        frame = frame.f_back
    return None


def _own(frame: Any) -> bool:
    """A frame of this module, or of a wrapper around its functions (mutmut's trampolines, in
    ``make mutation``): never the caller whose read is counted."""
    path = os.path.abspath(frame.f_code.co_filename)
    return path == _SELF or str(frame.f_globals.get("__name__", "")).startswith("mutmut.")
