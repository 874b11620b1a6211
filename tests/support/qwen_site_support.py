"""Shared by several test modules (from tests/contract/test_eval_release_frames.py, where it was first written)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.paths import ROOT


def qwen_site() -> Path:
    site = Path(os.environ.get("PARAVT_QWEN_VL_UTILS_SITE", ROOT / ".venv-bench" / "site"))
    if not (site / "qwen_vl_utils-0.0.14.dist-info").is_dir() or not (site / "decord").is_dir():
        message = f"qwen-vl-utils 0.0.14 and decord are not set up in {site} (scripts/setup.sh makes them)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return site
