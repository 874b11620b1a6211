"""Cluster settings for pipeline tasks: resources, GPUs, scheduling, volumes, secrets, retries, caching.

One small function per concern (all through kfp / kfp-kubernetes, nothing hand-built in the IR), and
``configure_task`` that applies a stage's ``StagePlatform`` with all of them, so the train DAG and the
nightly eval pipeline configure tasks the same way. Nothing here reads a secret: the S3 credentials
are referenced by Secret name and key, and Kubernetes injects the values into the pod.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

from kfp import dsl, kubernetes
from kfp.dsl.pipeline_channel import PipelineChannel

S3_SECRET_NAME = "paravt-s3"
# Key in the Kubernetes Secret -> env var (manifests/ holds the template). Values never enter the IR.
S3_SECRET_KEYS = {
    "AWS_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY",
}
# The namespace's one S3 configuration (manifests/base/kfp-launcher.yaml): the same ConfigMap feeds
# KFP's launcher config (kustomize copies it there), so stages and KFP's artifacts use one endpoint.
S3_CONFIG_NAME = "paravt-s3-config"
S3_CONFIG_KEYS = {"AWS_ENDPOINT_URL": "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION": "AWS_DEFAULT_REGION"}
# Secrets to pull the images with (comma-separated names), read when the pipeline is compiled; the
# manifests' overlays can instead give them to the service accounts the pods run as.
IMAGE_PULL_SECRETS_ENV = "PARAVT_IMAGE_PULL_SECRETS"
# The multi-node jobs' pods run as this service account (manifests/base/serviceaccounts.yaml: no RBAC,
# no token; the overlays give it the registry's pull secret like the other accounts).
TRAINER_SERVICE_ACCOUNT = "paravt-trainer"
IMAGE_UID = 10001  # the images' USER (Dockerfile.*)
MEDIA_PVC_NAME = "paravt-media"
MEDIA_MOUNT_PATH = "/mnt/media"
# Kernels compiled at first use (Triton's launchers and kernels, SGLang's JIT kernels, flashinfer's): kept on a
# claim so a retried or resumed RL pod loads them instead of compiling again. Each library's own variable
# points it there (Triton: knobs.py TRITON_CACHE_DIR; SGLang 0.5.23: SGLANG_JIT_CACHE_DIR; flashinfer:
# FLASHINFER_WORKSPACE_BASE, under which it keeps .cache/flashinfer). Their cache keys hold the GPU arch
# and toolchain, so pods on other GPU models share the claim without mixing builds. Under the image user's
# home (uid 10001): with the variables set and no claim mounted (docker run), the libraries can still create
# it (flashinfer creates its directory at import and fails where it cannot). The claim, like the media claim,
# must be writable by uid 10001.
KERNEL_CACHE_PVC_NAME = "paravt-kernel-cache"
KERNEL_CACHE_MOUNT_PATH = "/home/paravt/.cache/kernels"
KERNEL_CACHE_ENV = {
    "TRITON_CACHE_DIR": f"{KERNEL_CACHE_MOUNT_PATH}/triton",
    "SGLANG_JIT_CACHE_DIR": f"{KERNEL_CACHE_MOUNT_PATH}/sglang-jit",
    "FLASHINFER_WORKSPACE_BASE": KERNEL_CACHE_MOUNT_PATH,
}
# Download caches (the SFT checkpoint RL reads from S3, ~16 GB at 8B; the hub's files; S3 objects) on a sized
# volume outside $HOME: an emptyDir by default, whose directory kubelet makes mode 0777 (Kubernetes
# pkg/volume/emptydir/empty_dir.go, perm, setupDir), so uid 10001 can write it without an fsGroup, which
# KFP 2.17 never sets; a generic ephemeral volume of $PARAVT_CACHE_STORAGE_CLASS when that is set (a block
# volume's fresh filesystem root is root's, 0755: writable only with a class that says so or the fsGroup
# option of manifests/options/). paravt_core/launch/caches.py falls back to ~/.cache when it is not writable.
CACHE_VOLUME_NAME = "paravt-cache"
CACHE_MOUNT_PATH = "/var/cache/paravt"
CACHE_ENV = {
    "PARAVT_MODEL_CACHE": f"{CACHE_MOUNT_PATH}/models",  # paravt_core/models.py
    "PARAVT_CACHE_DIR": f"{CACHE_MOUNT_PATH}/s3",  # paravt_core/storage.py
    "HF_HOME": f"{CACHE_MOUNT_PATH}/huggingface",  # huggingface_hub constants
}
# The class of the cache volumes, read when the pipeline is compiled (unset: the cluster's default class).
CACHE_STORAGE_CLASS_ENV = "PARAVT_CACHE_STORAGE_CLASS"
GPU_RESOURCE = "nvidia.com/gpu"
# Label set by NVIDIA GPU feature discovery (deployed by the GPU Operator, or the device plugin's chart with
# gfd.enabled); selecting on it picks the GPU model. Clusters without it (GKE: cloud.google.com/gke-accelerator;
# EKS: node.kubernetes.io/instance-type) set $PARAVT_GPU_NODE_SELECTOR when compiling: "key=value[,...]"
# replaces it, "" selects no GPU model (any node with the GPUs).
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_NODE_SELECTOR_ENV = "PARAVT_GPU_NODE_SELECTOR"

IntOrChannel = int | str | PipelineChannel  # a GPU count: a literal, or a STRING pipeline parameter
StrOrChannel = str | PipelineChannel


@dataclass(frozen=True)
class Toleration:
    key: str
    operator: Literal["Equal", "Exists"] = "Exists"
    value: str | None = None
    effect: Literal["NoExecute", "NoSchedule", "PreferNoSchedule"] | None = "NoSchedule"


GPU_TOLERATION = Toleration(key=GPU_RESOURCE)


@dataclass(frozen=True)
class StagePlatform:
    """What one stage needs from the cluster. ``gpus`` is the default count (a pipeline parameter can
    override it); ``gpu_product`` empty = any GPU model; ``shm`` empty = no /dev/shm volume;
    ``kernel_cache``: the compiled-kernel claim (``KERNEL_CACHE_PVC_NAME``) and the caches' variables;
    ``cache_size``: the download caches' ephemeral volume (``CACHE_MOUNT_PATH``; "" = none)."""

    cpu: str = "2"
    memory: str = "8G"
    gpus: int = 0
    gpu_product: str = ""
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    shm: str = ""
    media: bool = True
    kernel_cache: bool = False
    cache_size: str = ""
    timeout_seconds: int = 24 * 3600
    retries: int = 3
    cache: bool = False


H100 = "NVIDIA-H100-80GB-HBM3"
# Per-stage defaults for the published recipe (8 x H100 for training, one GPU per eval shard).
STAGES: dict[str, StagePlatform] = {
    "data": StagePlatform(cpu="4", memory="16G"),
    "sft": StagePlatform(
        cpu="32",
        memory="512G",
        gpus=8,
        gpu_product=H100,
        shm="64Gi",
        cache_size="64Gi",
        timeout_seconds=48 * 3600,
    ),
    "rl": StagePlatform(
        cpu="32",
        memory="512G",
        gpus=8,
        gpu_product=H100,
        shm="64Gi",
        kernel_cache=True,
        cache_size="64Gi",
        timeout_seconds=72 * 3600,
    ),
    "eval": StagePlatform(
        cpu="8",
        memory="64G",
        gpus=1,
        gpu_product=H100,
        shm="16Gi",
        cache_size="64Gi",
        timeout_seconds=12 * 3600,
    ),
    "report": StagePlatform(cpu="1", memory="2G", media=False, timeout_seconds=3600),
}


def gpu_node_selector(product: str) -> dict[str, str]:
    """The node labels that pick GPU model ``product`` ("" = any): ``GPU_PRODUCT_LABEL``, or what
    ``$PARAVT_GPU_NODE_SELECTOR`` says (read when compiling)."""
    raw = os.environ.get(GPU_NODE_SELECTOR_ENV)
    if not product:
        return {}
    if raw is None:
        return {GPU_PRODUCT_LABEL: product}
    pairs = [kv.strip() for kv in raw.split(",") if kv.strip()]
    if any("=" not in kv for kv in pairs):
        raise ValueError(f"${GPU_NODE_SELECTOR_ENV}={raw!r}: expected key=value[,key=value...] or empty")
    return dict(kv.split("=", 1) for kv in pairs)


def set_resources(task: dsl.PipelineTask, cpu: str, memory: str) -> dsl.PipelineTask:
    """Requests equal limits: training pods get the Guaranteed QoS class and are evicted last."""
    return task.set_cpu_request(cpu).set_cpu_limit(cpu).set_memory_request(memory).set_memory_limit(memory)


def request_gpus(task: dsl.PipelineTask, count: IntOrChannel, product: str = "") -> dsl.PipelineTask:
    """``count`` GPUs (a literal or a STRING pipeline parameter: KFP 2.17's driver reads a parameter
    placeholder in ``resourceCount`` with ``GetStringValue()``, so a number would set no limit), on nodes of one GPU model when ``product``
    is set, tolerating the usual taint on GPU nodes."""
    task.set_accelerator_type(GPU_RESOURCE).set_accelerator_limit(count)
    add_node_selector(task, gpu_node_selector(product))
    return add_tolerations(task, [GPU_TOLERATION])


def add_tolerations(task: dsl.PipelineTask, tolerations: list[Toleration] | tuple) -> dsl.PipelineTask:
    for t in tolerations:
        kubernetes.add_toleration(task, key=t.key, operator=t.operator, value=t.value, effect=t.effect)
    return task


def add_node_selector(task: dsl.PipelineTask, labels: dict[str, str]) -> dsl.PipelineTask:
    for key, value in labels.items():
        kubernetes.add_node_selector(task, label_key=key, label_value=value)
    return task


def use_s3_secret(task: dsl.PipelineTask, secret_name: StrOrChannel = S3_SECRET_NAME) -> dsl.PipelineTask:
    """S3 credentials as env vars from a Kubernetes Secret (by name; no value in the IR), and the
    endpoint and region from the ConfigMap that KFP's launcher config is rendered from."""
    kubernetes.use_secret_as_env(task, secret_name=secret_name, secret_key_to_env=S3_SECRET_KEYS)
    return kubernetes.use_config_map_as_env(
        task, config_map_name=S3_CONFIG_NAME, config_map_key_to_env=S3_CONFIG_KEYS
    )


def image_pull_secrets() -> list[str]:
    """Names from ``$PARAVT_IMAGE_PULL_SECRETS`` (comma-separated; unset: none)."""
    return [n.strip() for n in os.environ.get(IMAGE_PULL_SECRETS_ENV, "").split(",") if n.strip()]


def mount_media(
    task: dsl.PipelineTask, pvc_name: StrOrChannel = MEDIA_PVC_NAME, mount_path: str = MEDIA_MOUNT_PATH
) -> dsl.PipelineTask:
    """The media volume (extracted videos) at ``mount_path``; stages read media from there."""
    return kubernetes.mount_pvc(task, pvc_name=pvc_name, mount_path=mount_path)


def mount_kernel_cache(task: dsl.PipelineTask, pvc_name: str = KERNEL_CACHE_PVC_NAME) -> dsl.PipelineTask:
    """The compiled-kernel claim at ``KERNEL_CACHE_MOUNT_PATH``, with Triton's, SGLang's and flashinfer's
    cache variables pointing into it (a server the stage launches inherits them)."""
    kubernetes.mount_pvc(task, pvc_name=pvc_name, mount_path=KERNEL_CACHE_MOUNT_PATH)
    for name, value in KERNEL_CACHE_ENV.items():
        task.set_env_variable(name, value)
    return task


def add_cache_volume(task: dsl.PipelineTask, size: str) -> dsl.PipelineTask:
    """The download caches at ``CACHE_MOUNT_PATH``, the variables pointing into it: a ``size`` emptyDir on the
    node's disk (kubelet evicts the pod beyond it), or with ``$PARAVT_CACHE_STORAGE_CLASS`` a ``size`` generic
    ephemeral volume of that class (ReadWriteOnce)."""
    if storage_class := os.environ.get(CACHE_STORAGE_CLASS_ENV):
        kubernetes.add_ephemeral_volume(
            task,
            volume_name=CACHE_VOLUME_NAME,
            mount_path=CACHE_MOUNT_PATH,
            access_modes=["ReadWriteOnce"],
            size=size,
            storage_class_name=storage_class,
        )
    else:
        kubernetes.empty_dir_mount(
            task, volume_name=CACHE_VOLUME_NAME, mount_path=CACHE_MOUNT_PATH, size_limit=size
        )
    for name, value in CACHE_ENV.items():
        task.set_env_variable(name, value)
    return task


def add_shared_memory(task: dsl.PipelineTask, size: str) -> dsl.PipelineTask:
    """A memory-backed emptyDir at /dev/shm: the container default (64 MiB) is too small for
    DataLoader workers and NCCL. kfp-kubernetes 2.17 has ``empty_dir_mount(medium="Memory")`` for
    this; ``add_ephemeral_volume`` would make a PVC-backed disk, the wrong medium for shared memory."""
    return kubernetes.empty_dir_mount(
        task, volume_name="dshm", mount_path="/dev/shm", medium="Memory", size_limit=size
    )


BACKOFF_SECONDS = 60
# Argo (v4.0.5, util/intstr/parametrizable.go) reads the backoff factor as an integer: 1.5 would fail.
BACKOFF_FACTOR = 2


def retry_window_seconds(retries: int, timeout_seconds: int) -> int:
    """The retry window Argo needs so that every attempt may run its full per-attempt limit.

    Argo (v4.0.5, workflow/controller/operator.go, processNodeRetries) measures ``backoff.maxDuration``
    from the FIRST attempt's start, stops retrying once it has passed, and gives every retry's pod that
    same instant as its deadline (workflowpod.go, getDeadline). A 6 h window would never retry a 72 h
    stage that fails after hour 6, and would kill a retry at hour 6. So the window is all attempts at
    their per-attempt limit (``timeout_seconds``, the pod's activeDeadlineSeconds) plus the waits."""
    waits = sum(BACKOFF_SECONDS * BACKOFF_FACTOR**i for i in range(retries))
    return (retries + 1) * timeout_seconds + waits


def set_retries(task: dsl.PipelineTask, retries: int, timeout_seconds: int) -> dsl.PipelineTask:
    """Retry an attempt after 60 s, doubling; the stage resumes from its newest complete checkpoint.
    KFP 2.17's compiler sets no ``retryPolicy`` (backend/src/v2/compiler/argocompiler/container.go), so the
    cluster's ``workflowDefaults`` decide which attempts Argo retries: KFP 2.17's manifests say ``OnError``
    (a lost pod, not a failed process), KFP 2.15's none (Argo's ``OnFailure``; docs/reference.md, "What is
    retried automatically"), hence the stages' own in-pod reruns (``launch.retries``) and the ``Always``
    option in manifests/options/."""
    return task.set_retry(
        num_retries=retries,
        backoff_duration=f"{BACKOFF_SECONDS}s",
        backoff_factor=float(BACKOFF_FACTOR),
        backoff_max_duration=f"{retry_window_seconds(retries, timeout_seconds)}s",
    )


def set_timeout(task: dsl.PipelineTask, seconds: int) -> dsl.PipelineTask:
    """Per attempt (the pod's activeDeadlineSeconds): a hung collective cannot hold GPUs forever."""
    return kubernetes.set_timeout(task, seconds)


def configure_task(
    task: dsl.PipelineTask,
    stage: str,
    *,
    display_name: str | None = None,
    gpus: IntOrChannel | None = None,
    media_pvc: StrOrChannel = MEDIA_PVC_NAME,
    platform: StagePlatform | None = None,
) -> dsl.PipelineTask:
    """Apply a stage's cluster settings (``STAGES[stage]`` unless ``platform`` is given) to ``task``.

    ``gpus`` overrides the stage's GPU count (e.g. with a pipeline parameter); it only applies to
    stages that use GPUs.
    """
    spec = platform or STAGES[stage]
    task.set_display_name(display_name or stage)
    set_resources(task, spec.cpu, spec.memory)
    if spec.gpus:
        request_gpus(task, spec.gpus if gpus is None else gpus, spec.gpu_product)
    add_node_selector(task, spec.node_selector)
    add_tolerations(task, spec.tolerations)
    if spec.shm:
        add_shared_memory(task, spec.shm)
    if spec.media:
        mount_media(task, media_pvc)
    if spec.kernel_cache:
        mount_kernel_cache(task)
    if spec.cache_size:
        add_cache_volume(task, spec.cache_size)
    use_s3_secret(task)
    if pull_secrets := image_pull_secrets():
        kubernetes.set_image_pull_secrets(task, pull_secrets)
    # The images' user, and no root: Pod Security `restricted` wants runAsNonRoot; KFP 2.17.0's driver puts
    # this on the task's own container (backend/src/v2/driver/k8s.go, kubernetesExecutorConfig.GetSecurityContext).
    kubernetes.set_security_context(task, run_as_user=IMAGE_UID, run_as_group=IMAGE_UID, run_as_non_root=True)
    set_retries(task, spec.retries, spec.timeout_seconds)
    set_timeout(task, spec.timeout_seconds)
    # Stages write to object storage: a cache hit would skip those side effects.
    task.set_caching_options(spec.cache)
    return task


def node_spec(stage: str, image: str) -> dict:
    """What every node of a multi-node ``stage`` job gets (``paravt_core.launch.trainjob.NodeSpec`` as a
    dict, a compile-time input of the step): the stage's CPU, memory, GPU model, tolerations, /dev/shm and
    deadline, the S3 credentials by Secret reference (no value) and endpoint by ConfigMap, the pull
    secrets and the nodes' service account; the media claim is added by the step (a pipeline parameter)."""
    spec = STAGES[stage]
    return {
        "image": image,
        "cpu": spec.cpu,
        "memory": spec.memory,
        "gpu_resource": GPU_RESOURCE,
        "node_selector": {**gpu_node_selector(spec.gpu_product), **spec.node_selector},
        "tolerations": [
            {k: v for k, v in vars(t).items() if v is not None} for t in (GPU_TOLERATION, *spec.tolerations)
        ],
        "secret_env": {env: [S3_SECRET_NAME, key] for env, key in S3_SECRET_KEYS.items()},
        "config_map_env": {env: [S3_CONFIG_NAME, key] for env, key in S3_CONFIG_KEYS.items()},
        "pvc_mount": MEDIA_MOUNT_PATH,
        "shm": spec.shm,
        "image_pull_secrets": image_pull_secrets(),
        "active_deadline_s": spec.timeout_seconds,
        "service_account": TRAINER_SERVICE_ACCOUNT,
    }


def launcher_platform(stage: str) -> StagePlatform:
    """The multi-node step's own pod: no GPU, no media; the stage's deadline and retries (a retry
    re-attaches to the job, so it needs the whole window)."""
    spec = STAGES[stage]
    return StagePlatform(
        cpu="1", memory="2G", media=False, timeout_seconds=spec.timeout_seconds, retries=spec.retries
    )
