"""KFP components: the SFT and RL stages on several nodes (``launch.nodes > 1``).

Specs: each body is one call into ``components/launchers/multinode.py``. The step's own pod is small (no
GPU): it resolves the stage config like ``components/sft.py`` and
``components/rl.py`` do, then ``paravt_core.launch.trainjob.launch_stage`` creates the run's Kubeflow
Trainer ``TrainJob`` (or ``PyTorchJob``) whose every node runs ``torchrun -m paravt_core.cli sft|rl`` on
the stage's image, and follows it to its end (status, rank-0 log, failure reason; a retried step
re-attaches to a job still running). The outputs are those of the one-node components, read from the
stage's output URI once the job completed, so the DAG downstream is the same, the TensorBoard log directory
included; the nodes get the run id as ``KFP_RUN_ID`` (the trackers' run name, paravt_core/tracking).
``node_spec``: the node pods' settings from ``pipelines/platform.py`` (``node_spec``), fixed at compile time.
"""

from kfp import dsl
from kfp.dsl import HTML, Artifact, Metrics, Model, Output

from components.images import RL_IMAGE, SFT_IMAGE


@dsl.component(base_image=SFT_IMAGE, install_kfp_package=False)
def sft_trainjob_op(
    config_yaml: str,
    overrides: list,
    data_uri: str,
    model_uri: str,
    nodes: int,
    gpus_per_node: int,
    api: str,
    runtime: str,
    poll_s: float,
    node_spec: dict,
    media_pvc: str,
    curve: Output[HTML],
    metrics: Output[Metrics],
    model: Output[Model],
    tensorboard: Output[Artifact],
    output: str = "",
    run_prefix: str = "",
    run_id: str = "",
) -> str:
    """``paravt sft`` on ``nodes`` x ``gpus_per_node`` GPUs as one multi-node job; returns the URI of the
    final checkpoint, also the ``model`` artifact; ``tensorboard``: its logs (``<output>/tensorboard``)."""
    from components.launchers.multinode import sft_trainjob_step

    return sft_trainjob_step(
        config_yaml=config_yaml,
        overrides=overrides,
        data_uri=data_uri,
        model_uri=model_uri,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        api=api,
        runtime=runtime,
        poll_s=poll_s,
        node_spec=node_spec,
        media_pvc=media_pvc,
        curve=curve,
        metrics=metrics,
        model=model,
        tensorboard=tensorboard,
        output=output,
        run_prefix=run_prefix,
        run_id=run_id,
    )


@dsl.component(base_image=RL_IMAGE, install_kfp_package=False)
def rl_trainjob_op(
    config_yaml: str,
    overrides: list,
    data: str,
    model: str,
    nodes: int,
    gpus_per_node: int,
    api: str,
    runtime: str,
    poll_s: float,
    node_spec: dict,
    media_pvc: str,
    curves: Output[Artifact],
    metrics: Output[Metrics],
    trained: Output[Model],
    tensorboard: Output[Artifact],
    output: str = "",
    run_prefix: str = "",
    run_id: str = "",
) -> str:
    """``paravt rl`` on ``nodes`` x ``gpus_per_node`` learner GPUs as one multi-node job, rolling out on
    the server(s) at ``engine.base_url``; returns the URI of the trained model, also ``trained``;
    ``tensorboard``: its logs (``<output>/tensorboard``)."""
    from components.launchers.multinode import rl_trainjob_step

    return rl_trainjob_step(
        config_yaml=config_yaml,
        overrides=overrides,
        data=data,
        model=model,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        api=api,
        runtime=runtime,
        poll_s=poll_s,
        node_spec=node_spec,
        media_pvc=media_pvc,
        curves=curves,
        metrics=metrics,
        trained=trained,
        tensorboard=tensorboard,
        output=output,
        run_prefix=run_prefix,
        run_id=run_id,
    )
