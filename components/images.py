"""Container images of the three stage families.

Production configs pin images by digest: set ``PARAVT_IMAGE_SFT`` (and ``_RL``, ``_EVAL``) to
``registry/paravt-sft@sha256:...`` before compiling. The defaults are tags for local builds.
Read once at import, because KFP bakes ``base_image`` into the component at decoration time.
"""

from __future__ import annotations

import os

_DEFAULT_TAG = "0.1.0"


def image(family: str) -> str:
    """Image reference for ``sft``, ``rl`` or ``eval`` (env override or the local default tag)."""
    if family not in {"sft", "rl", "eval"}:
        raise ValueError(f"unknown image family {family!r}; expected sft, rl or eval")
    return os.environ.get(f"PARAVT_IMAGE_{family.upper()}", f"paravt-{family}:{_DEFAULT_TAG}")


SFT_IMAGE = image("sft")
RL_IMAGE = image("rl")
EVAL_IMAGE = image("eval")
