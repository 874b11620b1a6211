"""R_tool: did the episode use the tool, and did it work (docs/method.md §5). Pure; reads call records, never text.

Levels: 0 when the main agent wrote no call block; 0.1 when at least one block parsed into a name and
arguments; 0.3 when at least one call executed and returned a report (or frames). +0.5 when R_acc > 0 on
top of a non-zero level (our reading of "+0.5 if R_acc > 0": the bonus pays for a tool-assisted correct
answer, so a garbage call block next to a right answer earns nothing). Capped at 1.

The records are ``paravt_core.agent.episode.CallRecord`` s (anything with ``parsed`` / ``executed`` /
``ok`` attributes); the release parsed strings and could never reach the 0.3 level.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

LEVEL_PARSED = 0.1
LEVEL_SUCCEEDED = 0.3
CORRECT_BONUS = 0.5
CAP = 1.0


class CallLike(Protocol):
    parsed: bool
    executed: bool
    ok: bool


@dataclass(frozen=True)
class ToolResult:
    score: float
    level: float  # 0, 0.1 or 0.3
    calls: int
    succeeded: int


def tool_reward(calls: Sequence[CallLike], accuracy: float) -> ToolResult:
    """R_tool of one episode from its call records and its R_acc. Never raises."""
    try:
        n = len(calls)
        parsed = sum(bool(getattr(c, "parsed", False)) for c in calls)
        succeeded = sum(bool(getattr(c, "executed", False)) and bool(getattr(c, "ok", False)) for c in calls)
        level = LEVEL_SUCCEEDED if succeeded else LEVEL_PARSED if parsed else 0.0
        bonus = CORRECT_BONUS if level > 0 and float(accuracy) > 0 else 0.0
        return ToolResult(min(CAP, level + bonus), level, n, succeeded)
    except Exception:
        return ToolResult(0.0, 0.0, 0, 0)
