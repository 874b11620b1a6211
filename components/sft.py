"""KFP component: the SFT stage (data stage output -> fine-tuned HF checkpoint).

Thin by design, like ``components/data.py``: the body calls ``paravt_core.sft.stage.run``. On a node
with several GPUs it starts the same stage under ``torchrun`` (one process per GPU, FSDP2). The stage
resumes from its newest checkpoint in ``output``, so a rerun continues training: in the pod after a crash
(``launch.retries``, paravt_core/launch/retry.py: Argo does not retry a non-zero exit under KFP's OnError
default), or a KFP retry.
"""

from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Input, Metrics, Model, Output

from components.images import SFT_IMAGE


@dsl.component(base_image=SFT_IMAGE, install_kfp_package=False)
def sft_op(
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
    """Run ``paravt sft`` on ``data`` (the data step's ``Dataset``, or an importer's: KFP records the
    lineage); return the URI of the final Hugging Face checkpoint, also the ``model`` artifact (no
    copy). ``output``: where the stage writes (empty: ``<run root>/sft``, components/locations.py);
    ``tensorboard``: its TensorBoard logs (``<output>/tensorboard``)."""
    from paravt_core.launch.caches import settle_caches

    settle_caches()  # the download caches' volume, or ~/.cache: before anything reads HF_HOME
    import os
    import subprocess
    import sys
    import tempfile

    from components.locations import location, run_root
    from components.publish import publish_sft, publish_tensorboard, read_summary
    from paravt_core import storage
    from paravt_core.config import SftConfig, config_to_yaml, load_config

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(config_yaml)
    cfg = load_config(SftConfig, f.name, [str(o) for o in overrides])
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
