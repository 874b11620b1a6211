"""Per-rank peak memory of one training step, measured by PyTorch's ``FSDPMemTracker`` on fake tensors.

``measure(prepare, world)``: in a fake process group of ``world`` ranks (``fake.fake_world``), build the step
(``steps.prepare_sft`` / ``steps.prepare_rl``), bring the optimizer to its state after step 1 untracked (its
states exist from step 1 on, so step 2 is what every later step looks like), then run the measured step under
``FSDPMemTracker(root, optimizer)``. The tracker's snapshot at the global peak is the breakdown; the bytes
the step holds outside the FSDP root (the RL reference copy) are constant over the step and are added to
every moment, so they add to the peak as they are.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .fake import fake_world

# FSDPMemTracker's categories -> the plan's components
COMPONENTS = {
    "Sharded Param": "params",
    "Unsharded Param": "params_gathered",
    "Buffer": "params",
    "Sharded Grad": "grads",
    "Unsharded Grad": "grads",
    "OptState": "optimizer",
    "Activation": "activations",
    "Temp": "temporaries",
    "All Gather": "temporaries",
    "Reduce Scatter": "temporaries",
    "Inputs": "activations",
    "Reference Param": "reference_params",
}
ORDER = (
    "params",
    "params_gathered",
    "reference_params",
    "grads",
    "optimizer",
    "activations",
    "temporaries",
)


@dataclass
class StepMemory:
    peak_bytes: int
    components: dict[str, int]  # ORDER keys, bytes at the peak
    tracker: dict[str, int]  # the tracker's own categories at the peak
    notes: list[str] = field(default_factory=list)
    tokens: int = 0
    trained_tokens: int = 0
    seconds: float = 0.0

    @property
    def largest(self) -> str:
        return max(self.components, key=lambda k: self.components[k])


def _peak_tracker_class() -> type:
    from copy import deepcopy
    from enum import Enum

    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker, _FSDPRefType
    from torch.distributed._tools.mem_tracker import _RefType

    # The tracker's categories plus one for the reference. Members are str-valued and hash by name, so the
    # tracker's own ``_FSDPRefType`` members index a snapshot keyed by these (how its snapshots are built:
    # ``dict.fromkeys(self._ref_class, 0)``, torch 2.14.1 mem_tracker.py ``_update_snap``).
    plan_ref = Enum(  # type: ignore[misc]
        "PlanRefType",
        {**{m.name: m.value for m in _FSDPRefType}, "REFERENCE": "Reference Param"},
        type=_RefType,
    )

    class PeakTracker(FSDPMemTracker):
        """``FSDPMemTracker`` keeping only the global peak: the per-module peaks walk every tracked module
        on every op (about a third of the run time on the 8B model) and the plan does not use them. Tensors
        held outside the root are given to ``track_reference`` before entering."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._ref_class = plan_ref
            self._reference: list[torch.Tensor] = []

        def track_reference(self, tensors: list[torch.Tensor]) -> None:
            self._reference = tensors

        def __enter__(self) -> Any:
            out = super().__enter__()
            for t in self._reference:  # FSDPMemTracker.track_external is a no-op: register them directly
                self._update_and_maybe_create_winfos(t, plan_ref.REFERENCE)
            # the peak starts from the state on entry, the reference included
            self._peak_mem_snap = self.get_tracker_snapshot()
            self._peak_mem = {dev: snap["Total"] for dev, snap in self._peak_mem_snap.items()}
            return out

        def _update_peak_stats(self, peak_state: Any) -> None:
            for dev, snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < snap["Total"]:
                    self._peak_mem[dev] = snap["Total"]
                    self._peak_mem_snap[dev] = deepcopy(snap)

    return PeakTracker


def measure(prepare: Callable[..., Any], world: int, *args: Any) -> StepMemory:
    """Peak of one step of ``prepare(*args, world=world)`` on rank 0 of ``world`` fake ranks."""
    _PeakTracker = _peak_tracker_class()
    started = time.perf_counter()
    with fake_world(world):
        prepared = prepare(*args, world=world)
        prepared.warmup()
        tracker = _PeakTracker(prepared.root, prepared.optimizer)
        tracker.track_reference(prepared.reference)
        with tracker:
            # The step may run the root several times (micro-batches, no-grad log-prob passes); the tracker's
            # per-module statistics allow one root forward, its global peak does not care: reset the former.
            hook = prepared.root.register_forward_pre_hook(lambda *_: tracker.reset_mod_stats(), prepend=True)
            try:
                prepared.step()
            finally:
                hook.remove()
        snapshot = _peak_snapshot(tracker)
    components = dict.fromkeys(ORDER, 0)
    for name, value in snapshot.items():
        if name != "Total":
            components[COMPONENTS[name]] += value
    return StepMemory(
        peak_bytes=sum(components.values()),
        components=components,
        tracker={k: v for k, v in snapshot.items() if k != "Total"},
        notes=list(prepared.notes),
        tokens=prepared.tokens,
        trained_tokens=prepared.trained_tokens,
        seconds=time.perf_counter() - started,
    )


def _peak_snapshot(tracker: Any) -> dict[str, int]:
    """The tracker's categories at its peak, summed over devices (fake tensors live on one device here)."""
    peak = tracker.get_tracker_snapshot("peak")
    out: dict[str, int] = {}
    for dev_snap in peak.values():
        for key, value in dev_snap.items():
            name = getattr(key, "value", key)
            out[name] = out.get(name, 0) + int(value)
    return out


def real_peak(step: Callable[[], None], root: torch.nn.Module, optimizer: Any) -> int:
    """Peak bytes of ``step`` on real tensors, by ``MemTracker`` (the reference the fake measurement is
    checked against in the tests)."""
    from torch.distributed._tools.mem_tracker import MemTracker

    mt = MemTracker()
    mt.track_external(root, optimizer)
    with mt:
        step()
    return sum(int(s["Total"]) for s in mt.get_tracker_snapshot("peak").values())
