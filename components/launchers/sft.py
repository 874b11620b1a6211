"""What ``sft_op`` (``components/sft.py``) does in its pod. The component is the spec (inputs, outputs,
image, docstring) and its body one call into this module, which the image holds: the compiled pipeline then
carries no launch logic, and the code that runs is the image's own. No kfp import at run time."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kfp.dsl import HTML, Artifact, Dataset, Input, Metrics, Model, Output


def sft_step(
    config_yaml: str,
    overrides: list,
    data: Input[Dataset],
    model_uri: str,
    curve: Output[HTML],
    metrics: Output[Metrics],
    model: Output[Model],
    tensorboard: Output[Artifact],
    output: str = "",
    run_prefix: str = "",
    run_id: str = "",
) -> str:
    """``sft_op``'s body (its docstring says what each parameter means)."""
    from paravt_core.launch.caches import settle_caches

    settle_caches()  # the download caches' volume, or ~/.cache: before anything reads HF_HOME
    import os
    import subprocess
    import sys
    import tempfile

    from components.launchers import stage_config
    from components.locations import location, run_root
    from components.publish import publish_sft, publish_tensorboard, read_summary
    from paravt_core import storage
    from paravt_core.config import SftConfig, config_to_yaml

    cfg = stage_config(SftConfig, config_yaml, overrides)
    if cfg.launch.nodes > 1:  # the DAG was compiled for one node: say how to get the multi-node step
        raise ValueError(f"launch.nodes={cfg.launch.nodes}: compile with --sft-config <this config>")
    cfg.data.input = location(data)  # the S3 directory the artifact stands for, read by the stage
    cfg.model.uri = model_uri
    cfg.output = output or storage.join(run_root(run_prefix, run_id, model.uri), "sft")
    output = cfg.output
    os.environ["KFP_RUN_ID"] = run_id  # the trackers' run name (paravt_core/tracking), torchrun's ranks too

    import torch

    from paravt_core.launch.retry import run_with_retries

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    from paravt_core.launch.hardware import check_uses_gpus

    check_uses_gpus("sft", gpus=gpus, device="cuda", float32=not cfg.model.bf16, model=cfg.model.uri,
                    parameter="sft_config_yaml", example="configs/sft/qwen3vl_8b.yaml")  # fmt: skip

    def attempt() -> dict:  # resumes from the newest complete checkpoint under output
        if gpus > 1:
            with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
                f.write(config_to_yaml(cfg))
            launcher = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={gpus}"]
            subprocess.run([*launcher, "-m", "paravt_core.cli", "sft", "--config", f.name], check=True)
            return read_summary(output)
        from paravt_core.sft.stage import run

        return run(cfg).metrics

    summary = run_with_retries(
        attempt, stage="sft", retries=cfg.launch.retries, backoff_s=cfg.launch.retry_backoff_s
    )
    publish_tensorboard(tensorboard, output, run_id)
    return publish_sft(output, summary, curve=curve, metrics=metrics, model=model, run_id=run_id)
