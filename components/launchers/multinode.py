"""What the components of ``components/multinode.py`` (``sft_trainjob_op``, ``rl_trainjob_op``) do in their pods. Each component
is the spec (inputs, outputs, image, docstring) and its body one call into this module, which the image
holds: the compiled pipeline then carries no launch logic, and the code that runs is the image's own. No
kfp import at run time."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kfp.dsl import HTML, Artifact, Metrics, Model, Output


def sft_trainjob_step(
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
    """``sft_trainjob_op``'s body (its docstring says what each parameter means)."""

    from components.launchers import stage_config
    from components.locations import run_root
    from components.publish import publish_sft, publish_tensorboard, read_summary
    from paravt_core import storage
    from paravt_core.config import SftConfig
    from paravt_core.launch.trainjob import NodeSpec, launch_with_retries

    cfg = stage_config(SftConfig, config_yaml, overrides)
    cfg.data.input = data_uri
    cfg.model.uri = model_uri
    cfg.output = output or storage.join(run_root(run_prefix, run_id, model.uri), "sft")
    cfg.launch.nodes, cfg.launch.gpus_per_node, cfg.launch.api = nodes, gpus_per_node, api
    output = cfg.output
    from paravt_core.launch.hardware import check_uses_gpus

    check_uses_gpus("sft", gpus=nodes * gpus_per_node, device="cuda", float32=not cfg.model.bf16,
                    model=cfg.model.uri, parameter="sft_config_yaml",
                    example="configs/sft/qwen3vl_8b_2node.yaml")  # fmt: skip

    launch_with_retries(
        "sft",
        cfg,
        run_id=run_id,
        runtime=runtime,
        poll_s=poll_s,
        spec=NodeSpec(**{**node_spec, "pvc": media_pvc}),
    )
    summary = read_summary(output)
    publish_tensorboard(tensorboard, output, run_id)
    return publish_sft(output, summary, curve=curve, metrics=metrics, model=model, run_id=run_id)


def rl_trainjob_step(
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
    """``rl_trainjob_op``'s body (its docstring says what each parameter means)."""

    from components.launchers import stage_config
    from components.locations import run_root
    from components.publish import publish_rl, publish_tensorboard, read_summary
    from paravt_core import storage
    from paravt_core.launch.trainjob import (
        NodeSpec,
        api_client,
        check_rl_multinode,
        check_rollout_server,
        in_cluster_namespace,
        job_name,
        launch_with_retries,
        rank0_address,
        wake_rollout_server,
    )
    from paravt_core.rl.config import RlConfig

    cfg = stage_config(RlConfig, config_yaml, overrides)
    output = output or storage.join(run_root(run_prefix, run_id, trained.uri), "rl")
    cfg.data, cfg.model, cfg.output = data, model, output
    cfg.launch.nodes, cfg.launch.gpus_per_node, cfg.launch.api = nodes, gpus_per_node, api
    from paravt_core.launch.hardware import check_uses_gpus

    check_uses_gpus("rl", gpus=nodes * gpus_per_node, device=cfg.device, float32=cfg.dtype == "float32",
                    model=cfg.model, parameter="rl_config_yaml",
                    example="configs/rl/paragrpo_8b_2node.yaml")  # fmt: skip
    check_rl_multinode(cfg.engine.kind, getattr(cfg.engine, "base_url", ""))  # in-process: none
    if base_url := getattr(cfg.engine, "base_url", ""):
        if (
            cfg.launch.rollout_deployment
        ):  # the server idles at 0 replicas (manifests/components/rollout-server)
            wake_rollout_server(api_client(), in_cluster_namespace(), cfg.launch.rollout_deployment)
        # before the job: 16 GPUs would load the learner and fail at the first push
        check_rollout_server(base_url, wait_s=cfg.launch.rollout_wait_s)
    if getattr(cfg.engine, "weight_sync", "") == "distributed" and cfg.engine.nccl_address in (
        "",
        "127.0.0.1",
    ):
        # where the server joins the push: the job's rank-0 pod, by its fully qualified name
        cfg.engine.nccl_address = rank0_address(
            api, job_name(run_id, "rl"), in_cluster_namespace(), cfg.launch.cluster_domain
        )
    launch_with_retries(
        "rl",
        cfg,
        run_id=run_id,
        runtime=runtime,
        poll_s=poll_s,
        spec=NodeSpec(**{**node_spec, "pvc": media_pvc}),
    )
    summary = read_summary(output)
    publish_tensorboard(tensorboard, output, run_id)
    return publish_rl(output, summary, curves=curves, metrics=metrics, trained=trained, run_id=run_id)
