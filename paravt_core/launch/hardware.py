"""A stage that would leave its GPUs idle is refused before it starts, with one line naming the setting.

The train pipeline reserves 8 GPUs per stage (or nodes x gpus_per_node for a multi-node job) whatever its
config says; ``RlConfig()`` is the CPU demo (``device: cpu``, ``dtype: float32``). A run submitted without
the recipe's YAML would hold 8-16 H100s for days and train on CPU. ``float32`` at 8B is refused too: the
weights served and pushed in float32 (32 GB for 8B) crowd the KV cache out, and a float32 SFT of 8B does
not fit the recipe's memory plan. Small models (the tiny test model) may use float32 on GPUs.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from paravt_core.config_base import ConfigError

LARGE_PARAMS = 1_000_000_000  # from here on float32 is refused on GPUs


def model_params(uri: str) -> int | None:
    """Parameters of the Qwen3-VL checkpoint at ``uri`` (local directory, ``s3://`` prefix or hub id), from
    its ``config.json`` alone (the model built on the meta device: no weights read); None when unreadable."""
    try:
        from paravt_core import storage
        from paravt_core.plan.report import load_model_config, param_parts

        if uri.startswith("s3://") or Path(uri).is_dir():
            with tempfile.TemporaryDirectory() as tmp:
                config = Path(tmp) / "config.json"
                config.write_bytes(storage.read_bytes(storage.join(uri, "config.json")))
                json.loads(config.read_text())  # a readable config, or None below
                return param_parts(load_model_config(str(config)))["total"]
        return param_parts(load_model_config(uri))["total"]
    except Exception:  # noqa: BLE001 (unknown size: only device: cpu is refused then)
        return None


def check_uses_gpus(
    stage: str, *, gpus: int, device: str, float32: bool, model: str, parameter: str, example: str
) -> None:
    """Refuse ``device: cpu``, or float32 weights of a model of 1B parameters or more, when the stage has
    ``gpus`` GPUs; ``parameter`` is the pipeline parameter that carries the stage's config."""
    if gpus <= 0:
        return
    if device == "cpu":
        raise ConfigError(
            f"{stage}: device: cpu with {gpus} GPU(s) reserved: set device: cuda (and bfloat16) in the pipeline "
            f"parameter {parameter} (e.g. {example}), or compile with --{stage}-config {example}"
        )
    if float32 and (params := model_params(model)) is not None and params >= LARGE_PARAMS:
        raise ConfigError(
            f"{stage}: float32 weights for a {params / 1e9:.1f}B model on {gpus} GPU(s): set bfloat16 in the "
            f"pipeline parameter {parameter} (e.g. {example}), or compile with --{stage}-config {example}"
        )
