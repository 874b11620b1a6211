"""What ``rl_op`` (``components/rl.py``) does in its pod. The component is the spec (inputs, outputs,
image, docstring) and its body one call into this module, which the image holds: the compiled pipeline then
carries no launch logic, and the code that runs is the image's own. No kfp import at run time."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output


def rl_step(
    config_yaml: str,
    overrides: list,
    data: Input[Dataset],
    model: str,
    curves: Output[Artifact],
    metrics: Output[Metrics],
    trained: Output[Model],
    tensorboard: Output[Artifact],
    output: str = "",
    run_prefix: str = "",
    run_id: str = "",
) -> str:
    """``rl_op``'s body (its docstring says what each parameter means)."""
    from paravt_core.launch.caches import settle_caches

    settle_caches()  # the download caches' volume, or ~/.cache: before anything reads HF_HOME
    import os

    from components.launchers import stage_config
    from components.locations import location, run_root
    from components.publish import publish_rl, publish_tensorboard
    from paravt_core import storage
    from paravt_core.rl.config import RlConfig
    from paravt_core.rl.launch import launch

    cfg = stage_config(RlConfig, config_yaml, overrides)
    if cfg.launch.nodes > 1:  # the DAG was compiled for one node: say how to get the multi-node step
        raise ValueError(f"launch.nodes={cfg.launch.nodes}: compile with --rl-config <this config>")
    output = output or storage.join(run_root(run_prefix, run_id, trained.uri), "rl")
    cfg.data, cfg.model, cfg.output = location(data), model, output  # S3 directories
    import torch

    from paravt_core.launch.hardware import check_uses_gpus
    from paravt_core.launch.retry import run_with_retries

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    check_uses_gpus("rl", gpus=gpus, device=cfg.device, float32=cfg.dtype == "float32", model=cfg.model,
                    parameter="rl_config_yaml", example="configs/rl/paragrpo_8b.yaml")  # fmt: skip

    os.environ["KFP_RUN_ID"] = run_id  # the trackers' run name (paravt_core/tracking), the launched ranks too
    # python -m torch.distributed.run --nproc-per-node N -m paravt_core.cli rl ...; rerun in the pod after a
    # crash a rerun can fix (launch.retries), from the newest checkpoint
    summary = run_with_retries(
        lambda: launch(cfg), stage="rl", retries=cfg.launch.retries, backoff_s=cfg.launch.retry_backoff_s
    )
    publish_tensorboard(tensorboard, output, run_id)
    return publish_rl(output, summary, curves=curves, metrics=metrics, trained=trained, run_id=run_id)
