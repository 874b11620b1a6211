"""nFrames gating (docs/method.md §5): each prompt's overview frame count K, drawn from {4, 8, 16, 32, 64}.

K depends only on (seed, row id): SHA-256 of ``"<seed>:<row id>"`` picks the choice, so every process,
machine and Python version draws the same K (Python's ``hash()`` is salted per process). All rollouts of a
prompt's group share it; the episode receives it as ``EpisodeRow.nframes``. Gating off: K = 64.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

DEFAULT_CHOICES = (4, 8, 16, 32, 64)
DEFAULT_FRAMES = 64


def draw_nframes(row_id: str, seed: int = 0, choices: Sequence[int] = DEFAULT_CHOICES) -> int:
    """K for one row: uniform over ``choices``, a pure function of (seed, row id)."""
    if not choices:
        raise ValueError("nFrames gating needs at least one frame count")
    digest = hashlib.sha256(f"{seed}:{row_id}".encode()).digest()
    # 64 bits modulo a handful of choices: the bias is below 1e-18, far from measurable.
    return int(choices[int.from_bytes(digest[:8], "big") % len(choices)])


def nframes_for(
    row_id: str,
    *,
    enabled: bool,
    seed: int = 0,
    choices: Sequence[int] = DEFAULT_CHOICES,
    default: int = DEFAULT_FRAMES,
) -> int:
    """The overview frame count of a row's group: gated draw, or ``default`` when gating is off."""
    return draw_nframes(row_id, seed, choices) if enabled else default
