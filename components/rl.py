"""KFP component: the RL stage (PARA-GRPO), from the SFT checkpoint on the data stage's RL prompts.

A spec, like ``components/data.py``: the body is one call into ``components/launchers/rl.py``, which runs
the stage through ``paravt_core.rl.launch`` (SGLang server(s) on ``engine.gpus``, the learner under ``torchrun`` on the other
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
    from components.launchers.rl import rl_step

    return rl_step(
        config_yaml=config_yaml,
        overrides=overrides,
        data=data,
        model=model,
        curves=curves,
        metrics=metrics,
        trained=trained,
        tensorboard=tensorboard,
        output=output,
        run_prefix=run_prefix,
        run_id=run_id,
    )
