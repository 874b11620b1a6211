"""Fault injection for resilience tests: make a stage fail midway, the way a preempted pod would.

``PARAVT_FAULT=<stage>:<step>`` makes ``check(stage, step)`` raise ``InjectedFault`` once the stage has
finished (and checkpointed) that step. With ``PARAVT_FAULT_ONCE=<path>`` the fault fires only once:
firing creates the file, and an existing file disarms it, so the retry of the task (same environment)
runs through and resumes from the checkpoint. Unset: ``check`` is a no-op.
"""

from __future__ import annotations

import os
from pathlib import Path


class InjectedFault(RuntimeError):
    """The failure ``PARAVT_FAULT`` asked for."""


def _armed(stage: str, step: int) -> bool:
    spec = os.environ.get("PARAVT_FAULT", "")
    if not spec:
        return False
    name, _, at = spec.partition(":")
    if not name or not at.strip().isdigit():
        raise ValueError(f"PARAVT_FAULT={spec!r}: expected <stage>:<step>, e.g. sft:3")
    if name != stage or int(at) != step:
        return False
    once = os.environ.get("PARAVT_FAULT_ONCE", "")
    return not (once and Path(once).exists())


def check(stage: str, step: int) -> None:
    """Raise ``InjectedFault`` if ``PARAVT_FAULT`` names this stage and step (and is not disarmed)."""
    if not _armed(stage, step):
        return
    once = os.environ.get("PARAVT_FAULT_ONCE", "")
    if once:
        Path(once).parent.mkdir(parents=True, exist_ok=True)
        Path(once).write_text(f"{stage}:{step}\n")
    raise InjectedFault(f"injected fault: {stage} after step {step} (PARAVT_FAULT)")
