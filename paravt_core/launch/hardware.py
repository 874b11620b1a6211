"""A stage that would leave its GPUs idle is refused before it starts, with one line naming the setting.

The train pipeline reserves 8 GPUs per stage (or nodes x gpus_per_node for a multi-node job) whatever its
config says; ``RlConfig()`` is the CPU demo (``device: cpu``, ``dtype: float32``). A run submitted without
the recipe's YAML would hold 8-16 H100s for days and train on CPU. ``float32`` at 8B is refused too: the
weights served and pushed in float32 (32 GB for 8B) crowd the KV cache out, and a float32 SFT of 8B does
not fit the recipe's memory plan. Small models (the tiny test model) may use float32 on GPUs. The eval step
reserves a GPU per task: ``EvalConfig()`` is the in-process engine on CPU, and the local recipes point at a
server on ``127.0.0.1`` that nothing starts in a pod (``check_eval_engine``).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

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


EVAL_RECIPE = "configs/eval/cluster.yaml"  # the cluster eval: a vLLM server the stage starts on its GPU
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "0.0.0.0"})


def check_eval_engine(cfg: Any, *, gpus: int, reach: bool = True) -> None:
    """Refuse an eval that would leave its ``gpus`` reserved GPUs idle, or that has no server to talk to:
    the in-process engine on ``cpu`` (eval's default), float32 weights of a model of 1B or more, a launched
    server whose ``engine.python`` the image lacks, or a ``base_url`` no server answers at. ``reach``: ask the
    server (the step's pod); without it (``submit``, on the user's machine) only a loopback ``base_url`` is
    refused: nothing else runs in the eval pod."""
    if gpus <= 0:
        return
    from paravt_core.engines.base import v1_url
    from paravt_core.engines.registry import KINDS

    engine = cfg.engine
    where = (
        f"in the pipeline parameter eval_config_yaml (e.g. {EVAL_RECIPE}), or compile with --eval-config FILE"
    )
    if engine.kind == "transformers":
        if (engine.device or "cpu") == "cpu":
            raise ConfigError(
                f"eval: engine.kind=transformers on device cpu with {gpus} GPU(s) reserved: set engine.kind: vllm "
                f"(the stage starts the server on the pod's GPU) or engine.device: cuda {where}"
            )
        if (
            engine.dtype == "float32"
            and (params := model_params(cfg.model)) is not None
            and params >= LARGE_PARAMS
        ):
            raise ConfigError(
                f"eval: float32 weights for a {params / 1e9:.1f}B model on {gpus} GPU(s): set engine.dtype: "
                f"bfloat16 (or null, the checkpoint's) {where}"
            )
        return
    urls = [engine.base_url] if getattr(engine, "base_url", "") else list(getattr(engine, "worker_urls", []))
    if not urls:
        python = getattr(engine, "python", "")
        if KINDS[engine.kind].launches and reach and python and not os.access(python, os.X_OK):
            raise ConfigError(
                f"eval: engine.python {python} is not in this image, so no {engine.kind} server can start: build "
                "the eval image with its server (Dockerfile.eval, --build-arg VLLM_VERSION) or set engine.python"
            )
        return
    for url in urls:
        if not reach:
            if urlsplit(url).hostname in _LOOPBACK:
                raise ConfigError(
                    f"eval: engine.base_url {url} is the eval pod's own loopback, where nothing serves: leave it "
                    f"empty with engine.kind: vllm (the stage starts the server in the pod) {where}"
                )
            continue
        try:  # any HTTP answer will do: the server is there
            httpx.get(v1_url(url) + "/models", timeout=10.0)
        except httpx.HTTPError as err:
            raise ConfigError(
                f"eval: no server answers at engine.base_url {url} from this pod ({type(err).__name__}): start "
                f"it first, or leave engine.base_url empty with engine.kind: vllm (the stage starts one) {where}"
            ) from err
