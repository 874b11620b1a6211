"""Shared by several test modules (from tests/unit/test_agent_cli.py, where it was first written)."""

from __future__ import annotations

from tests.support.agent_support import MAX_PIXELS

FAST = ["--overview-frames", "8", "--max-pixels", str(MAX_PIXELS), "--temperature", "0", "--max-new-tokens", "12",
        "--set", "subagent.max_new_tokens=8", "--set", "subagent.temperature=0", "--set", "crop.max_frames=4"]  # fmt: skip
