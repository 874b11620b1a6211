"""KFP component: the RL stage (PARA-GRPO), from the SFT checkpoint on the data stage's RL prompts.

Thin by design, like ``components/data.py``: the body imports paravt_core and runs the stage through
``paravt_core.rl.launch`` (SGLang server(s) on ``engine.gpus``, the learner under ``torchrun`` on the other
GPUs; one process on a CPU machine with the in-process engine). The data URI (the data step's output), the starting model (the SFT step's final
checkpoint) and the output URI are set on top of the YAML config and the dotted overrides.

The SFT checkpoint arrives as its URI (text), not as an ``Input[Model]``: KFP 2.17's launcher copies every
input artifact's whole prefix into the pod before the step starts (backend/src/v2/component/launcher_v2.go,
downloadArtifacts), into an emptyDir on the node's disk (compiler/argocompiler/container.go, s3-scratch),
and KFP has no ephemeral-storage request to reserve that disk. That would be ~16 GB (8B, bf16) on every
attempt, never read: the stage loads the checkpoint from S3 itself. ML Metadata still links the data.
A retried task resumes from the newest complete checkpoint under ``output``. Returns the URI of the final HF checkpoint.
"""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from components.images import RL_IMAGE


@dsl.component(base_image=RL_IMAGE, install_kfp_package=False)
def rl_op(
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
    """Run ``paravt rl`` on ``data`` (the data step's ``Dataset``, recorded as this step's input) from
    ``model`` (the URI of the SFT step's final checkpoint: read from S3 by the stage, not downloaded);
    return the URI of the trained model (``<output>/final``), also the ``trained`` artifact (no copy). ``output`` empty: ``<run root>/rl``
    (components/locations.py); ``tensorboard``: its TensorBoard logs (``<output>/tensorboard``)."""
    from paravt_core.launch.caches import settle_caches

    settle_caches()  # the download caches' volume, or ~/.cache: before anything reads HF_HOME
    import os
    import tempfile

    from components.locations import location, run_root
    from components.publish import publish_rl, publish_tensorboard
    from paravt_core import storage
    from paravt_core.config import load_config
    from paravt_core.rl.config import RlConfig
    from paravt_core.rl.launch import launch

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(config_yaml)
    cfg = load_config(RlConfig, f.name, [str(o) for o in overrides])
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
