"""A training stage on several nodes: a Kubeflow Trainer ``TrainJob`` (or a training-operator
``PyTorchJob``) that runs ``torchrun -m paravt_core.cli sft|rl`` on every node, followed to its end.

What the pipeline's multi-node step does (``components/multinode.py``):

1. ``job_name(run_id, stage)``: one name per run and stage, so a retried step finds the job of its
   first attempt. A job of that name that is still going is re-attached to (never a second create); a
   completed one is read as done (the step only publishes its outputs); a failed one is deleted and
   created again (the stage resumes from its checkpoints).
2. The manifest (pure functions, validated in the tests against the vendored TrainJob CRD schema):
   the stage's image, ``nodes`` x ``gpus_per_node``, the resolved stage config in an env var (written
   to a file by the node's shell, then ``torchrun``), secrets as ``secretKeyRef`` (names and keys,
   never values), the media volume and ``/dev/shm``.
3. ``follow``: reads the job every ``poll_s``, prints each status change, streams the rank-0 pod's log,
   raises ``JobFailed`` with the job's condition message when it fails, ``JobGone`` when it is deleted
   under us, and deletes it once it completed.
4. SIGTERM to the step: the rule is ``keep_job``. The step's pod is read once at the start (its retry
   rule: Argo's ``ARGO_TEMPLATE`` and attempt number) and watched (``PodWatch``), so the DELETE is the first
   request after the signal: the container ends at the emissary's next 1 s poll. Argo stops a step (a
   terminated run, a deadline) by signalling its container, leaves the pod object alone and never reruns
   it; the cluster deleting the pod (drain, preemption) marks it first (``deletionTimestamp``,
   ``DisruptionTarget``); the kubelet's own kills (node pressure, node shutdown) leave it ``Failed``. The job
   is kept only where Argo's retry policy reruns the step whatever node phase it gets (``Always``, with
   retries left); otherwise it is deleted before anything is printed (KFP's launcher, which reads our
   stdout through a pipe, dies first). Unreadable pod: deleted.
5. The job is owned by the run's Argo Workflow (the step pod's controller), so the garbage collector
   deletes it with the Workflow (KFP 2.17 deletes a finished one after 1 h) even when the step's pod
   died before its DELETE; the Workflow outlives the step's retries, which must re-attach. Where the
   install sets no Workflow TTL (KFP 2.15), nothing deletes the Workflow: the reaper
   (``paravt_core/launch/reaper.py``, a CronJob in manifests/base) deletes a job whose Workflow has
   finished or whose step Argo will not start again, which it finds through the Workflow node the job
   names (``ARGO_NODE_ANNOTATION``); until then the job's deadline is what is left of the step pod's own.
6. The installed Trainer decides the job's shape (``trainjob_spec_fields``): ``runtimePatches`` from
   v2.2.0 on, ``podTemplateOverrides`` on v2.1.0 (Kubeflow 1.11.0), see ``trainjob_manifest``.

Why the ``kubernetes`` client's ``CustomObjectsApi`` and not the Kubeflow SDK's ``TrainerClient``
(``kubeflow==0.5.0``): its ``train()`` first reads the cluster-scoped ``ClusterTrainingRuntime``
(``get_runtime``), which needs a ClusterRole where a namespaced Role is enough for us; it does not
cover ``PyTorchJob``; and it would add ``kubeflow-trainer-api`` and ``kubeflow-katib-api`` to every
image. One client for both kinds keeps one code path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Collection, Iterator
from typing import Any

from paravt_core.tracking import KFP_RUN_ID

TRAINJOB = ("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob")
PYTORCHJOB = ("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")
KINDS = {"trainjob": TRAINJOB, "pytorchjob": PYTORCHJOB}
# The torch-distributed runtime's replicated job and container are named "node" (trainer v2.3.0,
# pkg/constants/constants.go, Node); JobSet labels its pods with the job set (= TrainJob) name.
TRAINJOB_RANK0_SELECTOR = (
    "jobset.sigs.k8s.io/jobset-name={name},jobset.sigs.k8s.io/replicatedjob-name=node,"
    "batch.kubernetes.io/job-completion-index=0"
)
PYTORCHJOB_RANK0_SELECTOR = (
    "training.kubeflow.org/job-name={name},training.kubeflow.org/replica-type=master,"
    "training.kubeflow.org/replica-index=0"
)
CONTAINER = {"trainjob": "node", "pytorchjob": "pytorch"}  # the training container of each kind
CONFIG_ENV = "PARAVT_STAGE_CONFIG"
CONFIG_FILE = "${TMPDIR:-/tmp}/paravt-stage.yaml"  # expanded by the node's shell
MANAGER = "paravt.io/launcher"  # owner of our runtimePatches entry
FINISHED = {"Complete", "Failed"}
# Kubeflow profile namespaces inject an istio-proxy sidecar that outlives the training container, so a
# job's pods never finish; KFP turns injection off only on its own pods (KFP 2.17.0,
# backend/src/apiserver/template/v2_template.go). Ours say so themselves.
POD_ANNOTATIONS = {"sidecar.istio.io/inject": "false"}
# Kueue admits a job that names a LocalQueue with this label (Kueue v0.15.8, pkg/controller/constants/
# constants.go, QueueLabel); with manageJobsWithoutQueueName a job without it stays suspended.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Every pod of one job (the pending check): JobSet labels its pods with the job set (= TrainJob) name;
# the training operator (v1.9.0, pkg/controller.v1/common/job_controller.go, GenLabels) with the job name.
JOB_PODS_SELECTOR = {
    "trainjob": "jobset.sigs.k8s.io/jobset-name={name}",
    "pytorchjob": "training.kubeflow.org/job-name={name}",
}
IMAGE_UID = 10001  # the images' USER (Dockerfile.*)
# The installed TrainJob's shape, read off its CRD: Trainer v2.1.0 patches the node pods through
# spec.podTemplateOverrides and has no spec.activeDeadlineSeconds; v2.2.0 replaced the first by
# spec.runtimePatches and added the second (manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml of each).
TRAINJOB_CRD = "trainjobs.trainer.kubeflow.org"


def say(line: str) -> None:
    """Print one line; a closed stdout (KFP's launcher that read it through a pipe has died) makes the
    rest of the step's output go nowhere instead of raising ``BrokenPipeError`` into its cleanup."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        import sys

        devnull = os.open(os.devnull, os.O_WRONLY)  # Python's advice (signal module docs, SIGPIPE)
        os.dup2(devnull, sys.stdout.fileno())


class JobFailed(RuntimeError):
    """The job ended in failure; the message carries its reason."""


class JobPending(JobFailed):
    """Not every node's pod was running ``pending_timeout_s`` after the job started (no room, a queue that
    does not admit it, a missing device or image); the job is deleted so a node that did start frees its GPUs."""


class JobQueued(JobPending):
    """Still suspended (queued: Kueue has not admitted it) ``queue_timeout_s`` after the start; deleted."""


class JobGone(RuntimeError):
    """The job disappeared (deleted by someone) before it finished."""


class Terminated(BaseException):
    """The step's pod got SIGTERM (a terminated run, the pod's deadline, a deleted pod). A BaseException,
    like KeyboardInterrupt, so that no ``except Exception`` on the way (a client's retry) swallows it."""


@dataclasses.dataclass
class NodeSpec:
    """What every node's pod gets besides the command: the pipeline's settings for the stage."""

    image: str
    cpu: str = "32"
    memory: str = "512G"
    gpu_resource: str = "nvidia.com/gpu"
    node_selector: dict[str, str] = dataclasses.field(default_factory=dict)
    tolerations: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    env: dict[str, str] = dataclasses.field(default_factory=dict)  # plain values (no secrets)
    secret_env: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)  # ENV -> (Secret, key)
    config_map_env: dict[str, tuple[str, str]] = dataclasses.field(
        default_factory=dict
    )  # ENV -> (ConfigMap, key)
    pvc: str = ""  # claim mounted at pvc_mount ("" = none)
    pvc_mount: str = "/mnt/media"
    shm: str = ""  # size of a memory-backed /dev/shm ("" = none)
    image_pull_secrets: list[str] = dataclasses.field(default_factory=list)
    active_deadline_s: int = 0  # 0 = none
    # The nodes' service account: it carries the registry's pull secret (manifests/); "" = namespace default.
    service_account: str = ""
    # The cluster's fabric (LaunchConfig): RDMA/EFA devices per node, capabilities (IPC_LOCK), NCCL env.
    extra_resources: dict[str, int] = dataclasses.field(default_factory=dict)
    capabilities: list[str] = dataclasses.field(default_factory=list)
    queue_name: str = ""  # Kueue LocalQueue ("" = no label)
    gang: bool = False  # all nodes scheduled together or none (see trainjob_manifest / pytorchjob_manifest)

    def __post_init__(self) -> None:
        # node_spec reaches the step as a STRUCT input, whose numbers come back as floats (172800.0); the
        # controllers read activeDeadlineSeconds into an int64 (Go's encoding/json refuses 172800.0 there).
        deadline = self.active_deadline_s
        if isinstance(deadline, float):
            if not deadline.is_integer():
                raise ValueError(f"node_spec.active_deadline_s={deadline!r}: whole seconds expected")
            self.active_deadline_s = int(deadline)


def with_launch(spec: NodeSpec, launch: Any) -> NodeSpec:
    """``spec`` with the cluster settings of a stage config's ``launch`` section (``LaunchConfig``): fabric
    devices, IPC_LOCK, NCCL/libfabric env, Kueue queue, gang scheduling."""
    return dataclasses.replace(
        spec,
        extra_resources={**spec.extra_resources, **launch.fabric_resources},
        capabilities=sorted({*spec.capabilities, *(["IPC_LOCK"] if launch.ipc_lock else [])}),
        env={**spec.env, **launch.node_env},
        queue_name=launch.queue_name or spec.queue_name,
        gang=launch.gang or spec.gang,
    )


def with_run_id(spec: NodeSpec, run_id: str) -> NodeSpec:
    """``spec`` whose nodes get the pipeline run id as ``KFP_RUN_ID``: the stage's trackers name their run
    after it (paravt_core/tracking), as the one-node components set it in their own pod."""
    return dataclasses.replace(spec, env={**spec.env, KFP_RUN_ID: run_id}) if run_id else spec


def job_name(run_id: str, stage: str) -> str:
    """``paravt-<stage>-<12 hex of the run id>``: the same for every attempt of the run's step, a valid
    DNS-1035 label well under JobSet's name limit (its pods and services append suffixes)."""
    if not run_id:
        raise ValueError("a run id is needed to name the job (a retry must find it again)")
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:12]
    return f"paravt-{re.sub(r'[^a-z0-9]', '', stage.lower())}-{digest}"


def labels(run_id: str, stage: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/managed-by": "paravt",
        "paravt.io/stage": stage,
        "paravt.io/run": hashlib.sha256(run_id.encode()).hexdigest()[:12],
    }


def node_command(stage: str, api: str, nodes: int, gpus_per_node: int, deadline_epoch: int = 0) -> list[str]:
    """The node's command: write the config from its env var, then ``torchrun``. The Trainer's torch
    plugin sets ``PET_NNODES``/``PET_NPROC_PER_NODE``/``PET_NODE_RANK``/``PET_MASTER_ADDR``/``_PORT``, which
    torchrun reads itself; the training operator sets ``MASTER_ADDR``/``MASTER_PORT`` and the pod's
    ``RANK`` (its replica index), given to torchrun explicitly. ``deadline_epoch`` (Unix seconds, 0 = none):
    the node stops there itself, for a job kind without a deadline field; an absolute time, because the
    Job controller restarts a failed pod (backoffLimit) and a relative timer would start again."""
    if stage not in {"sft", "rl"}:
        raise ValueError(f"unknown stage {stage!r}; expected sft or rl")
    run = "torchrun"
    if api == "pytorchjob":
        run += (
            f" --nnodes={nodes} --nproc-per-node={gpus_per_node} --node-rank=$RANK"
            " --master-addr=$MASTER_ADDR --master-port=$MASTER_PORT"
        )
    script = f'printf "%s" "${CONFIG_ENV}" > {CONFIG_FILE} && exec {run} -m paravt_core.cli {stage} --config {CONFIG_FILE}'
    if deadline_epoch:  # coreutils timeout relays SIGTERM to torchrun; 124 when the time is up
        left = f'left=$(({deadline_epoch} - $(date +%s))); [ "$left" -gt 0 ] || exit 124; '
        script = left + script.replace(f"exec {run}", f'exec timeout -k 60 "$left" {run}')
    return ["/bin/sh", "-c", script]


def _env(spec: NodeSpec, config_yaml: str) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in spec.env.items()]
    env.append({"name": CONFIG_ENV, "value": config_yaml})
    for name, (secret, key) in spec.secret_env.items():
        env.append({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
    for name, (cm, key) in spec.config_map_env.items():
        env.append({"name": name, "valueFrom": {"configMapKeyRef": {"name": cm, "key": key}}})
    return env


def _volumes(spec: NodeSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes, mounts = [], []
    if spec.pvc:
        volumes.append({"name": "media", "persistentVolumeClaim": {"claimName": spec.pvc}})
        mounts.append({"name": "media", "mountPath": spec.pvc_mount})
    if spec.shm:
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm}})
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    return volumes, mounts


def _resources(spec: NodeSpec, gpus: int) -> dict[str, Any]:
    amounts = {"cpu": spec.cpu, "memory": spec.memory, spec.gpu_resource: gpus, **spec.extra_resources}
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _security(spec: NodeSpec) -> tuple[dict[str, Any], dict[str, Any]]:
    """(pod, container) securityContext of Pod Security ``restricted`` (Kubernetes, pod-security-admission
    policy/check_runAsNonRoot.go, check_seccompProfile_restricted.go, check_allowPrivilegeEscalation.go,
    check_capabilities_restricted.go): non-root (the images' uid), RuntimeDefault seccomp, no privilege
    escalation, all capabilities dropped; ``capabilities`` (IPC_LOCK for RDMA) are added back, which only a
    ``privileged`` namespace admits."""
    pod = {
        "runAsNonRoot": True,
        "runAsUser": IMAGE_UID,
        "runAsGroup": IMAGE_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    caps: dict[str, Any] = {"drop": ["ALL"]}
    if spec.capabilities:
        caps["add"] = list(spec.capabilities)
    return pod, {"allowPrivilegeEscalation": False, "capabilities": caps}


def _job_labels(spec: NodeSpec, job_labels: dict[str, str]) -> dict[str, str]:
    return {**job_labels, KUEUE_QUEUE_LABEL: spec.queue_name} if spec.queue_name else dict(job_labels)


def trainjob_manifest(
    name: str,
    namespace: str,
    stage: str,
    spec: NodeSpec,
    *,
    nodes: int,
    gpus_per_node: int,
    config_yaml: str,
    job_labels: dict[str, str],
    runtime: str = "torch-distributed",
    spec_fields: Collection[str] | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """A ``trainer.kubeflow.org/v1alpha1`` TrainJob (schema of trainer v2.3.0): the trainer section
    carries image, command, env (secrets by ``secretKeyRef``), nodes, processes and resources; what it
    has no field for (volumes, node selection, pull secrets, service account) goes through
    ``runtimePatches`` onto the "node" pods.

    ``spec_fields``: the installed CRD's ``spec`` fields (:func:`trainjob_spec_fields`; None = v2.2 or
    later). Without ``runtimePatches`` (v2.1) the pods get ``podTemplateOverrides`` instead, which has no
    ``securityContext`` (the pods run as the images' USER; capabilities cannot be added), and without
    ``activeDeadlineSeconds`` the nodes stop at the deadline themselves (``node_command``, from ``now``)."""
    patches = spec_fields is None or "runtimePatches" in spec_fields
    if not patches and "podTemplateOverrides" not in spec_fields:
        raise ValueError(
            "the installed TrainJob CRD has neither spec.runtimePatches nor podTemplateOverrides"
        )
    if not patches and spec.capabilities:
        from paravt_core.config_base import ConfigError

        raise ConfigError(
            f"capabilities {spec.capabilities} (launch.ipc_lock) need Trainer v2.2 or later: this cluster's "
            "TrainJob has podTemplateOverrides, which has no securityContext; use launch.api: pytorchjob"
        )
    volumes, mounts = _volumes(spec)
    pod_security, container_security = _security(spec)
    container: dict[str, Any] = {"name": CONTAINER["trainjob"], "securityContext": container_security}
    pod: dict[str, Any] = {"securityContext": pod_security, "containers": [container]}
    if mounts:
        container["volumeMounts"] = mounts
        pod["volumes"] = volumes
    if spec.node_selector:
        pod["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod["tolerations"] = list(spec.tolerations)
    if spec.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in spec.image_pull_secrets]
    if spec.service_account:
        pod["serviceAccountName"] = spec.service_account
    template = {"metadata": {"annotations": dict(POD_ANNOTATIONS)}, "spec": pod}
    patch = {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": template}}}]}
    # Gang scheduling is the runtime's podGroupPolicy (trainer v2.3.0, pkg/apis/trainer/v1alpha1/
    # trainingruntime_types.go), which a TrainJob's runtimePatches cannot set: with ``gang`` the job names a
    # namespaced TrainingRuntime that has one (manifests/components/gang-runtime).
    kind = "TrainingRuntime" if spec.gang else "ClusterTrainingRuntime"
    job_spec: dict[str, Any] = {
        "runtimeRef": {"name": runtime, "apiGroup": TRAINJOB[0], "kind": kind},
        "trainer": {
            "image": spec.image,
            "command": node_command(stage, "trainjob", nodes, gpus_per_node),
            "env": _env(spec, config_yaml),
            "numNodes": nodes,
            "numProcPerNode": gpus_per_node,
            "resourcesPerNode": _resources(spec, gpus_per_node),
        },
    }
    if patches:
        job_spec["runtimePatches"] = [
            {"manager": MANAGER, "trainingRuntimeSpec": {"template": {"spec": patch}}}
        ]
    else:
        job_spec["podTemplateOverrides"] = [_pod_override(pod, container, template["metadata"])]
    if spec.active_deadline_s:
        if spec_fields is None or "activeDeadlineSeconds" in spec_fields:
            job_spec["activeDeadlineSeconds"] = spec.active_deadline_s
        else:
            deadline = int(time.time() if now is None else now) + spec.active_deadline_s
            job_spec["trainer"]["command"] = node_command(stage, "trainjob", nodes, gpus_per_node, deadline)
    return {
        "apiVersion": f"{TRAINJOB[0]}/{TRAINJOB[1]}",
        "kind": TRAINJOB[3],
        "metadata": {"name": name, "namespace": namespace, "labels": _job_labels(spec, job_labels)},
        "spec": job_spec,
    }


# What Trainer v2.1.0's podTemplateOverrides[].spec declares of the pod (its CRD; containers: name, env,
# volumeMounts only).
_OVERRIDE_POD = ("volumes", "nodeSelector", "tolerations", "imagePullSecrets", "serviceAccountName")


def _pod_override(pod: dict[str, Any], container: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """The runtime patch's pod as one podTemplateOverrides entry for the "node" job, without what that
    field cannot carry (securityContext)."""
    over: dict[str, Any] = {k: pod[k] for k in _OVERRIDE_POD if k in pod}
    if container.get("volumeMounts"):
        over["containers"] = [{"name": container["name"], "volumeMounts": container["volumeMounts"]}]
    return {"targetJobs": [{"name": "node"}], "metadata": dict(meta), "spec": over}


def trainjob_spec_fields(api_client: Any) -> frozenset[str] | None:
    """The ``spec`` field names of the installed TrainJob CRD's ``v1alpha1`` schema; None when it cannot be
    read (not installed, no right to get it, an API error): the caller then builds for Trainer >= v2.2."""
    import json

    from kubernetes import client

    try:
        resp = client.ApiextensionsV1Api(api_client).read_custom_resource_definition(
            TRAINJOB_CRD, _preload_content=False, _request_timeout=10
        )
        crd = json.loads(resp.data)
    except Exception:  # noqa: BLE001 (the fallback is the current Trainer's shape)
        return None
    return crd_spec_fields(crd, TRAINJOB[1])


def crd_spec_fields(crd: dict[str, Any], version: str) -> frozenset[str] | None:
    """The names under ``spec`` in a CRD's ``openAPIV3Schema`` of ``version``; None if it has no such version."""
    for served in (crd.get("spec") or {}).get("versions") or []:
        if served.get("name") == version:
            schema = (served.get("schema") or {}).get("openAPIV3Schema") or {}
            return frozenset(((schema.get("properties") or {}).get("spec") or {}).get("properties") or ())
    return None


def step_time_left(pod: Any | None, now: float | None = None) -> int | None:
    """Seconds until this step's pod reaches its own deadline (``spec.activeDeadlineSeconds``, counted from
    ``status.startTime``: the kubelet's rule; KFP's task timeout puts it there), None without one."""
    spec = pod.spec if pod is not None else None
    status = pod.status if pod is not None else None
    limit = spec.active_deadline_seconds if spec is not None else None
    started = status.start_time if status is not None else None
    if not limit or started is None:
        return None
    return max(1, int(started.timestamp() + limit - (time.time() if now is None else now)))


def pytorchjob_manifest(
    name: str,
    namespace: str,
    stage: str,
    spec: NodeSpec,
    *,
    nodes: int,
    gpus_per_node: int,
    config_yaml: str,
    job_labels: dict[str, str],
) -> dict[str, Any]:
    """A ``kubeflow.org/v1`` PyTorchJob: one Master and ``nodes - 1`` Workers, same pod template."""
    volumes, mounts = _volumes(spec)
    container: dict[str, Any] = {
        "name": CONTAINER["pytorchjob"],
        "image": spec.image,
        "command": node_command(stage, "pytorchjob", nodes, gpus_per_node),
        "env": _env(spec, config_yaml),
        "resources": _resources(spec, gpus_per_node),
    }
    if mounts:
        container["volumeMounts"] = mounts
    pod_security, container["securityContext"] = _security(spec)
    pod: dict[str, Any] = {"containers": [container], "securityContext": pod_security}
    if volumes:
        pod["volumes"] = volumes
    if spec.node_selector:
        pod["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod["tolerations"] = list(spec.tolerations)
    if spec.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in spec.image_pull_secrets]
    if spec.service_account:
        pod["serviceAccountName"] = spec.service_account

    def replica(count: int) -> dict[str, Any]:
        template = {"metadata": {"annotations": dict(POD_ANNOTATIONS)}, "spec": pod}
        return {"replicas": count, "restartPolicy": "Never", "template": template}

    replicas = {"Master": replica(1)}
    if nodes > 1:
        replicas["Worker"] = replica(nodes - 1)
    job_spec: dict[str, Any] = {"pytorchReplicaSpecs": replicas, "runPolicy": {"backoffLimit": 0}}
    if spec.active_deadline_s:
        job_spec["runPolicy"]["activeDeadlineSeconds"] = spec.active_deadline_s
    if spec.gang:  # the operator's gang scheduler (--gang-scheduler-name) places all replicas or none
        job_spec["runPolicy"]["schedulingPolicy"] = {"minAvailable": nodes}
    return {
        "apiVersion": f"{PYTORCHJOB[0]}/{PYTORCHJOB[1]}",
        "kind": PYTORCHJOB[3],
        "metadata": {"name": name, "namespace": namespace, "labels": _job_labels(spec, job_labels)},
        "spec": job_spec,
    }


def _transient(err: Any) -> bool:
    """An API error a retry may not see: the server's (5xx) or its rate limit (429)."""
    return (err.status or 0) >= 500 or err.status == 429


def _true(conditions: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    return next((c for c in conditions if c.get("type") == kind and c.get("status") == "True"), None)


def job_state(api: str, obj: dict[str, Any]) -> tuple[str, str]:
    """(state, reason) of a job object: Created, Running, Suspended, Complete or Failed.

    TrainJob (v2.3.0) has only Complete/Failed/Suspended conditions; Running is read off
    ``status.jobsStatus`` (active or ready jobs), as the Kubeflow SDK does from the pods. PyTorchJob has
    Created/Running/Restarting/Succeeded/Failed conditions."""
    status = obj.get("status") or {}
    conditions = status.get("conditions") or []
    failed = _true(conditions, "Failed")
    if failed:
        return "Failed", ": ".join(x for x in (failed.get("reason"), failed.get("message")) if x)
    done = _true(conditions, "Complete" if api == "trainjob" else "Succeeded")
    if done:
        return "Complete", done.get("message", "")
    if _true(conditions, "Suspended"):
        return "Suspended", _true(conditions, "Suspended").get("message", "")
    # Kueue holds a job it has not admitted with spec.suspend (Kueue v0.15.8, pkg/controller/jobframework/
    # reconciler.go); the controller's Suspended condition can lag behind the create.
    spec = obj.get("spec") or {}
    if (spec if api == "trainjob" else spec.get("runPolicy") or {}).get("suspend"):
        return "Suspended", "spec.suspend: waiting for admission"
    if api == "trainjob":
        jobs = status.get("jobsStatus") or []
        running = any((j.get("active") or 0) + (j.get("ready") or 0) > 0 for j in jobs)
        return ("Running" if running else "Created"), ""
    if _true(conditions, "Running") or _true(conditions, "Restarting"):
        return "Running", ""
    return "Created", ""


class Launcher:
    """Create or re-attach to one job and follow it to its end, through ``CustomObjectsApi`` and
    ``CoreV1Api`` (pods and their logs) of the official ``kubernetes`` client."""

    def __init__(
        self,
        api_client: Any,
        namespace: str,
        api: str = "trainjob",
        *,
        poll_s: float = 15.0,
        log: Callable[[str], None] = say,
    ) -> None:
        from kubernetes import client

        if api not in KINDS:
            raise ValueError(f"launch.api {api!r}: expected one of {sorted(KINDS)}")
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.namespace, self.api, self.poll_s, self.log = namespace, api, poll_s, log
        self.group, self.version, self.plural, self.kind = KINDS[api]
        # Set by SIGTERM (delete_on_sigterm): the job's DELETE goes before any other request.
        self.terminating = threading.Event()

    # --- API calls -------------------------------------------------------------------------------
    def get(self, name: str, attempts: int = 6) -> dict[str, Any] | None:
        """The job object, None when it does not exist. A flaky API server (5xx, 429, a dropped
        connection) is retried with backoff: a 36 h job must not fail on one bad read."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        for attempt in range(attempts):
            try:
                return self.custom.get_namespaced_custom_object(
                    self.group, self.version, self.namespace, self.plural, name
                )
            except ApiException as err:
                if err.status == 404:
                    return None
                if (err.status or 0) < 500 and err.status != 429 or attempt == attempts - 1:
                    raise
                problem = f"HTTP {err.status}"
            except urllib3.exceptions.HTTPError as err:
                if attempt == attempts - 1:
                    raise
                problem = type(err).__name__
            wait = min(self.poll_s * 2**attempt, 60.0)
            self.log(f"{self.kind} {name}: API read failed ({problem}); retrying in {wait:.1f}s")
            time.sleep(wait)
        raise AssertionError("unreachable")

    def delete(self, name: str, attempts: int = 4) -> None:
        """Delete the job (gone already: done). A 5xx or 429 is retried at once and then after 1 s and 2 s:
        short, because after SIGTERM the grace period is running."""
        from kubernetes.client.exceptions import ApiException

        for attempt in range(attempts):
            try:
                self.custom.delete_namespaced_custom_object(
                    self.group,
                    self.version,
                    self.namespace,
                    self.plural,
                    name,
                    propagation_policy="Foreground",
                )
                return
            except ApiException as err:
                if err.status == 404:  # gone (on a retry: an earlier attempt's delete went through)
                    return
                if not _transient(err) or attempt == attempts - 1:
                    raise
            if attempt:
                time.sleep(min(2.0 ** (attempt - 1), 2.0))

    def _create(self, manifest: dict[str, Any], attempts: int = 4) -> None:
        """Create the job; a 5xx or 429 is retried with backoff. After such an error the object may exist
        (the API server timed out after the write): AlreadyExists on a retry is that create, done."""
        from kubernetes.client.exceptions import ApiException

        name = manifest["metadata"]["name"]
        for attempt in range(attempts):
            try:
                # Strict: a field the CRD does not declare fails the create (HTTP 400) instead of being pruned
                # silently (a misspelled key would run the job without its env, security context or volume).
                self.custom.create_namespaced_custom_object(
                    self.group, self.version, self.namespace, self.plural, manifest, field_validation="Strict"
                )
                return
            except ApiException as err:
                if err.status == 409 and attempt > 0:
                    return
                if not _transient(err) or attempt == attempts - 1:
                    raise
                problem = f"HTTP {err.status}"
            wait = min(self.poll_s * 2**attempt, 60.0)
            self.log(f"{self.kind} {name}: create failed ({problem}); retrying in {wait:.1f}s")
            time.sleep(wait)

    def _wait_gone(self, name: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.get(name) is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.kind} {name} still exists {timeout_s:.0f}s after its deletion")
            time.sleep(min(self.poll_s, 2.0))

    # --- the step --------------------------------------------------------------------------------
    def start(self, manifest: dict[str, Any]) -> str:
        """Create the job, or re-attach to the run's job when it is still going; returns what happened:
        "created", "re-attached", "completed" (an earlier attempt's job completed: ``follow`` finds it
        done) or "recreated" (an earlier attempt's job failed: created again, the stage resumes)."""
        name = manifest["metadata"]["name"]
        existing = self.get(name)
        how = "created"
        if existing is not None and (existing.get("metadata") or {}).get("deletionTimestamp"):
            # Being deleted (an earlier attempt's SIGTERM; foreground deletion waits for the pods):
            # re-attaching would end in JobGone, so wait until it is gone and create it again.
            self.log(f"{self.kind} {name}: the earlier attempt's job is being deleted; waiting for it to go")
            self._wait_gone(name, timeout_s=600.0)
            existing, how = None, "recreated"
        if existing is not None:
            state, reason = job_state(self.api, existing)
            if state not in FINISHED:
                self.log(f"{self.kind} {name}: re-attaching to the job of an earlier attempt ({state})")
                return "re-attached"
            if state == "Complete":  # the stage's outputs are written: no second run of the job
                self.log(f"{self.kind} {name}: the job of an earlier attempt completed; not running it again")
                return "completed"
            self.log(
                f"{self.kind} {name}: the earlier attempt's job ended {state}; deleting it to start again"
            )
            self.delete(name)
            self._wait_gone(name, timeout_s=600.0)
            how = "recreated"
        self._create(manifest)
        self.log(f"{self.kind} {name}: created in {self.namespace}")
        return how

    def follow(
        self, name: str, timeout_s: float | None = None, *, nodes: int = 0, pending_timeout_s: float = 0.0,
        queue_timeout_s: float = 0.0,
    ) -> dict[str, Any]:  # fmt: skip
        """Follow the job until it finishes; delete it on success and return its last object. With
        ``pending_timeout_s`` and ``nodes``: until all ``nodes`` pods have run, a job that has a pod still
        Pending that long is deleted and ``JobPending`` says why (without it, one node could hold its 8 GPUs
        while the other waits until the job's deadline, days later). A suspended job (queued: no pods, no
        GPUs held) is not pending: that clock starts when it is admitted; ``queue_timeout_s`` (0: none)
        bounds the wait in the queue (``JobQueued``)."""
        stop = threading.Event()
        streamer = threading.Thread(target=self._stream_rank0, args=(name, stop), daemon=True)
        streamer.start()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        pending_until = time.monotonic() + pending_timeout_s if pending_timeout_s and nodes else None
        queue_until: float | None = None  # while suspended: when the wait in the queue ends
        last = None
        try:
            while True:
                obj = self.get(name)
                if obj is None:
                    raise JobGone(
                        f"{self.kind} {self.namespace}/{name} was deleted before it finished (last state: {last})"
                    )
                state, reason = job_state(self.api, obj)
                if state != last:
                    self.log(f"{self.kind} {name}: {state}" + (f" ({reason})" if reason else ""))
                    last = state
                if state in FINISHED:
                    break
                if state == "Suspended":  # queued, or preempted back into the queue: no pods, no GPUs held
                    if queue_until is None and queue_timeout_s:
                        queue_until = time.monotonic() + queue_timeout_s
                    if queue_until is not None and time.monotonic() > queue_until:
                        self.delete(name)
                        raise JobQueued(
                            f"{self.kind} {self.namespace}/{name}: still suspended (queued) "
                            f"{queue_timeout_s:g}s; deleted. {reason or 'not admitted'}"
                        )
                    if pending_until is not None:
                        pending_until = time.monotonic() + pending_timeout_s  # counts from the admission
                elif pending_until is not None:
                    started, why = self._pods_started(name, nodes)
                    if started:
                        pending_until = None  # every node ran once: no pending check any more
                    elif time.monotonic() > pending_until:
                        self.delete(name)
                        raise JobPending(
                            f"{self.kind} {self.namespace}/{name}: not all {nodes} nodes running "
                            f"{pending_timeout_s:.0f}s after the start (state {state}); deleted. "
                            f"{why or 'no pod of the job exists'}"
                        )
                if state != "Suspended":
                    queue_until = None  # admitted: a later suspension waits its own queue_timeout_s
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{self.kind} {name} did not finish in {timeout_s:.0f}s (state {state})"
                    )
                time.sleep(self.poll_s)
        except Terminated:
            stop.set()  # no wait for the log streamer (a daemon): the job's deletion comes first
            raise
        finally:
            if not stop.is_set():
                stop.set()
                streamer.join(timeout=max(5.0, 2 * self.poll_s))
        if state == "Failed":
            raise JobFailed(f"{self.kind} {self.namespace}/{name} failed: {reason or 'no reason given'}")
        self.delete(name)
        self.log(f"{self.kind} {name}: deleted after completion")
        return obj

    def run(
        self, manifest: dict[str, Any], timeout_s: float | None = None, *, nodes: int = 0,
        pending_timeout_s: float = 0.0, queue_timeout_s: float = 0.0,
    ) -> dict[str, Any]:  # fmt: skip
        self.start(manifest)
        name = manifest["metadata"]["name"]
        return self.follow(
            name, timeout_s=timeout_s, nodes=nodes, pending_timeout_s=pending_timeout_s,
            queue_timeout_s=queue_timeout_s,
        )  # fmt: skip

    def _pods_started(self, name: str, nodes: int) -> tuple[bool, str]:
        """(all ``nodes`` pods of the job are Running or done, why not: each waiting pod's reason)."""
        selector = JOB_PODS_SELECTOR[self.api].format(name=name)
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
        up = [p for p in pods if p.status and p.status.phase in {"Running", "Succeeded", "Failed"}]
        reasons = []
        for pod in pods:
            if pod in up:
                continue
            status = pod.status
            text = next(
                (f"{c.reason}: {c.message}" for c in (status.conditions or []) if c.type == "PodScheduled"
                 and c.status == "False"),
                "",
            ) if status else ""  # fmt: skip
            waiting = [
                c.state.waiting.reason
                for c in (status.container_statuses or []) if c.state and c.state.waiting
            ] if status else []  # fmt: skip
            reasons.append(f"pod {pod.metadata.name}: " + (text or ", ".join(waiting) or "Pending"))
        return len(up) >= nodes, "; ".join(reasons)

    def _rank0_pod(self, name: str) -> str | None:
        selector = (TRAINJOB_RANK0_SELECTOR if self.api == "trainjob" else PYTORCHJOB_RANK0_SELECTOR).format(
            name=name
        )
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
        started = [p for p in pods if p.status and p.status.phase in {"Running", "Succeeded", "Failed"}]
        started.sort(key=lambda p: (p.metadata.creation_timestamp is not None, p.metadata.creation_timestamp))
        return started[-1].metadata.name if started else None  # the newest (a restarted node has two)

    def _stream_rank0(self, name: str, stop: threading.Event) -> None:
        """Print the rank-0 pod's log as it grows. A follow stream ends when the container stops (or, in
        the emulator, at once); it is reopened and the lines already printed are skipped."""
        printed: dict[str, int] = {}  # pod -> lines printed
        while True:
            if self.terminating.is_set():
                return  # SIGTERM: no request may go before the job's DELETE
            last_round = stop.is_set()  # the job has finished: one more read for the log's last lines
            try:
                pod = self._rank0_pod(name)
                if pod is not None:
                    resp = self.core.read_namespaced_pod_log(
                        pod,
                        self.namespace,
                        container=CONTAINER[self.api],
                        follow=True,
                        _preload_content=False,
                    )
                    seen, rest = 0, ""
                    try:
                        for raw in resp.stream(decode_content=True):  # chunks, not lines
                            *lines, rest = (rest + raw.decode(errors="replace")).split("\n")
                            for line in lines:
                                seen += 1
                                if seen > printed.get(pod, 0):
                                    self.log(f"[{pod}] {line}")
                                    printed[pod] = seen
                        if rest and last_round:  # a last line without its newline
                            self.log(f"[{pod}] {rest}")
                    finally:
                        resp.release_conn()
            except Exception as err:  # logs are best effort: the job's status decides the step
                self.log(f"(rank-0 log unavailable: {type(err).__name__}: {err})")
            if last_round:
                return
            stop.wait(self.poll_s)


# KFP 2.17 gives every task its pod's name (backend/src/v2/compiler/argocompiler/common.go, downward API).
POD_NAME_ENV = "KFP_POD_NAME"
# Conditions the cluster sets on a pod it is about to remove (Kubernetes >= 1.26, PodDisruptionConditions):
# an eviction (drain), a preemption, a node-pressure kill, a taint. Argo's own stop sets none of them.
DISRUPTION = "DisruptionTarget"
# The DisruptionTarget reason of a kill by the kubelet itself (node-pressure eviction, graceful node
# shutdown): the pod object stays, in phase Failed with a message. Every other reason precedes a delete.
BY_KUBELET = "TerminationByKubelet"
# Argo v4.0.5 gives each init container of a step's pod the step's template as JSON, its retryStrategy merged
# with the workflowDefaults' templateDefaults (workflow/controller/workflowpod.go, ARGO_TEMPLATE; operator.go,
# mergedTemplateDefaultsInto), and names attempt n of a retried node "<node>(n)" (operator.go,
# executeTemplate) in the pod's node-name annotation.
ARGO_TEMPLATE_ENV = "ARGO_TEMPLATE"
NODE_NAME_ANNOTATION = "workflows.argoproj.io/node-name"
UNLIMITED = 1 << 30  # retries left under a retryStrategy without a limit
# The retry expression of manifests/options/argo-retry-always. Argo v3.7.3 and v4.0.5 (operator.go,
# processNodeRetries; buildRetryStrategyLocalScope: lastRetry.message is the last attempt's node message)
# retry only where it is true. A failed or errored pod node always has a message ("pod deleted";
# inferFailedReason: the pod's message or its container's reason and exit code; markNodeError: the
# error), and a failed DAG attempt none (dag.go, executeDAG: markNodePhase without one), so it keeps KFP's
# DAG templates from being rerun and asks nothing more of a step: its policy alone decides.
STEP_ONLY_EXPRESSION = 'lastRetry.message != ""'
# The node phases each retry policy reruns (Argo v4.0.5 operator.go, processNodeRetries). OnTransientError
# reruns only messages Argo deems transient, which "pod deleted" and a kubelet's message are not.
RERUN = {
    "Always": {"Failed", "Error"},
    "OnFailure": {"Failed"},
    "OnError": {"Error"},
    "OnTransientError": set(),
}
# The phases Argo may give this step's node, by the SIGTERM's cause (Argo v4.0.5 operator.go): a stop is
# never rerun (processNodeRetries returns while the Workflow shuts down or is past its deadline); a deleted
# pod is Error ("pod deleted", podReconciliation) when the controller no longer finds it, Failed when it
# reads the pod's last status first (inferFailedReason; sure with ARGO_POD_STATUS_CAPTURE_FINALIZER); a pod
# the kubelet terminated stays, Failed with its message (inferFailedReason).
NODE_PHASES: dict[str, frozenset[str]] = {
    "stop": frozenset(),
    "deleted": frozenset({"Error", "Failed"}),
    "terminated": frozenset({"Failed"}),
}
WATCH_S = 300  # each watch of the step's own pod is reopened after this long


def own_pod(core: Any, namespace: str) -> Any | None:
    """This step's pod (``$KFP_POD_NAME``), or None outside a KFP pod or when it cannot be read."""
    name = os.environ.get(POD_NAME_ENV, "")
    if not name:
        return None
    try:
        return core.read_namespaced_pod(name, namespace, _request_timeout=2)  # one short read
    except Exception:  # noqa: BLE001 (no pod: the caller falls back to its default)
        return None


def sigterm_cause(pod: Any | None) -> str:
    """Why this pod gets SIGTERM, from its last known state: "deleted" when the pod object is going
    (``deletionTimestamp``, or a ``DisruptionTarget`` that precedes a delete: drain, preemption, a taint),
    "terminated" when the kubelet killed it and keeps the object (``DisruptionTarget`` by the kubelet, or
    phase ``Failed``: node pressure, node shutdown, the pod's deadline), else "stop" (Argo v4.0.5 signals the
    containers of a terminated run or a step past its deadline and leaves the pod object alone:
    workflow/controller/exec_control.go, pod/queue.go terminateContainers). No pod known counts as "stop"."""
    if pod is None:
        return "stop"
    if pod.metadata is not None and pod.metadata.deletion_timestamp is not None:
        return "deleted"
    status = pod.status
    conditions = (status.conditions if status is not None else None) or []
    target = next((c for c in conditions if c.type == DISRUPTION and c.status == "True"), None)
    if target is not None and target.reason != BY_KUBELET:
        return "deleted"
    if target is not None or (status is not None and status.phase == "Failed"):
        return "terminated"
    return "stop"


@dataclasses.dataclass(frozen=True)
class ArgoRetry:
    """What Argo reruns of this step: its effective retry policy ("" = none known) and the retries left."""

    policy: str = ""
    left: int = 0

    def reruns(self, phases: Collection[str]) -> bool:
        """Whether Argo starts this step again whichever of ``phases`` its node ends in."""
        return self.left > 0 and bool(phases) and set(phases) <= RERUN.get(self.policy, set())

    def __str__(self) -> str:
        if not self.policy:
            return "no retry policy known for this step"
        left = "no limit on retries" if self.left >= UNLIMITED else f"{self.left} retries left"
        return f"retryPolicy {self.policy}, {left}"


def argo_retry(pod: Any | None) -> ArgoRetry:
    """The retry rule Argo applies to this step, read off its pod (``ARGO_TEMPLATE``, the node name); none
    where it cannot be read: no pod, a template offloaded to a ConfigMap (over 128 KiB), no retryStrategy,
    a retry ``expression`` other than ``STEP_ONLY_EXPRESSION`` (only the controller evaluates it), no
    attempt number, a limit not a number."""
    import json

    spec = pod.spec if pod is not None else None
    envs = [e for c in (spec.init_containers if spec is not None else None) or [] for e in c.env or []]
    template = next((e.value for e in envs if e.name == ARGO_TEMPLATE_ENV), None)
    try:
        strategy = json.loads(template or "").get("retryStrategy")
    except (ValueError, AttributeError):
        return ArgoRetry()
    if not isinstance(strategy, dict):
        return ArgoRetry()
    expression = " ".join(str(strategy.get("expression") or "").split())
    if expression and expression != STEP_ONLY_EXPRESSION:
        return ArgoRetry()
    # Argo's RetryPolicyActual: the policy given, else Always with an expression and OnFailure without.
    policy = strategy.get("retryPolicy") or ("Always" if expression else "OnFailure")
    annotations = (pod.metadata.annotations if pod.metadata is not None else None) or {}
    node = annotations.get(NODE_NAME_ANNOTATION, "")
    attempt = re.search(r"\((\d+)\)$", node)
    if attempt is None:
        return ArgoRetry(policy, 0)
    if strategy.get("limit") is None:
        return ArgoRetry(policy, UNLIMITED)
    try:
        limit = int(str(strategy["limit"]))
    except ValueError:
        return ArgoRetry(policy, 0)
    # processNodeRetries stops once the retry node has more children than the limit.
    return ArgoRetry(policy, max(limit - int(attempt.group(1)), 0))


def keep_job(pod: Any | None, retry: ArgoRetry) -> tuple[bool, str]:
    """(keep the job, why) for a SIGTERM with the pod in state ``pod``: kept only when Argo will start this
    step again whatever it makes of the pod (the rerun re-attaches to the job); otherwise the job would train
    unattended, so it is deleted (a later retry creates it again and the stage resumes from its checkpoints)."""
    cause = sigterm_cause(pod)
    what = {
        "stop": "Argo stopped the step (a terminated run or a deadline), which it never reruns",
        "deleted": "this pod is being deleted (a drain, a preemption, kubectl delete)",
        "terminated": "the kubelet terminated this pod (node pressure, node shutdown or the pod's deadline)",
    }[cause]
    return retry.reruns(NODE_PHASES[cause]), f"{what}; {retry}"


# The outermost Workflow node that may rerun this step, on the job: the reaper reads its phase there.
ARGO_NODE_ANNOTATION = "paravt.io/argo-node"


def argo_node(pod: Any | None) -> str:
    """The outermost Workflow node that may start this step again: Argo names attempt n of a retry node
    "<node>(n)" and a DAG task "<dag node>.<task>" (Argo v4.0.5 and v3.7.3 operator.go executeTemplate,
    dag.go), so each "(n)" in the pod's node name follows a retry node; the first one is the outermost
    (KFP's executor template when only it has a retryStrategy; its DAG, or the whole run's, where
    workflowDefaults give every template one). No "(n)": no retries, the pod's own node. "" outside a KFP pod."""
    annotations = (pod.metadata.annotations if pod is not None and pod.metadata is not None else None) or {}
    return re.split(r"\(\d+\)", annotations.get(NODE_NAME_ANNOTATION, ""), maxsplit=1)[0]


def workflow_owner(pod: Any | None) -> list[dict[str, Any]]:
    """An owner reference to the Argo Workflow that runs this step (Argo v4.0.5 makes it every pod's
    controller: workflow/controller/workflowpod.go, NewControllerRef); [] outside a KFP pod. Not blocking
    the owner's deletion (that would need update on workflows/finalizers)."""
    refs = (pod.metadata.owner_references if pod is not None and pod.metadata is not None else None) or []
    for ref in refs:
        if ref.kind == "Workflow" and ref.api_version.startswith("argoproj.io/"):
            return [{"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name, "uid": ref.uid}]
    return []


class PodWatch:
    """This step's pod, read once when the step starts and then kept current by a watch, so that SIGTERM is
    decided on what is already known and the job's DELETE is the first request after it: Argo's emissary
    (the container's PID 1) reaps the dead launcher on a 1 s poll and exits, and the kernel then kills the
    step wherever it is (Argo v4.0.5 workflow/executor/osspecific/signal_darwin.go, Wait, also Linux's)."""

    def __init__(self, core: Any, namespace: str, log: Callable[[str], None] = say) -> None:
        self.core, self.namespace, self.log = core, namespace, log
        self.name = os.environ.get(POD_NAME_ENV, "")
        self.pod = own_pod(core, namespace)  # the one read; the watch starts from its resourceVersion
        self.retry = argo_retry(self.pod)  # fixed for the pod's life: its template and attempt
        self.closed = threading.Event()
        self._cause = sigterm_cause(self.pod)

    def start(self) -> None:
        """Keep ``pod`` current from now on (nothing to watch outside a KFP pod)."""
        if self.pod is not None and not self.closed.is_set():
            threading.Thread(target=self._watch, name="own-pod-watch", daemon=True).start()

    def close(self) -> None:
        """No request from the watch after this (a stream open now ends unread)."""
        self.closed.set()

    def _watch(self) -> None:
        from kubernetes import watch

        version = self.pod.metadata.resource_version if self.pod.metadata is not None else None
        failures = 0
        while not self.closed.is_set():
            try:
                for event in watch.Watch().stream(
                    self.core.list_namespaced_pod, self.namespace, field_selector=f"metadata.name={self.name}",
                    resource_version=version, timeout_seconds=WATCH_S,
                ):  # fmt: skip
                    if self.closed.is_set():
                        return
                    obj = event["object"]
                    if event["type"] in {"ADDED", "MODIFIED"} and obj.metadata is not None:
                        version = obj.metadata.resource_version
                        self._update(obj)
                failures = 0
            except Exception as err:  # noqa: BLE001 (the watch is best effort: the last state known stays)
                if getattr(err, "status", None) == 410:
                    version = None  # expired: the next watch starts from the pod's current state
                elif failures == 0 and not self.closed.is_set():
                    why = f"HTTP {err.status}" if getattr(err, "status", None) else type(err).__name__
                    self.log(
                        f"pod {self.name}: watch failed ({why}); retrying (the state read at the start holds)"
                    )
                failures += 1
                self.closed.wait(min(2.0**failures, 30.0))

    def _update(self, pod: Any) -> None:
        self.pod = pod
        cause = sigterm_cause(pod)
        if cause != self._cause and not self.closed.is_set():
            self._cause = cause
            keep, why = keep_job(pod, self.retry)
            then = "keeps the job" if keep else "deletes the job"
            self.log(f"pod {self.name}: {why}; a SIGTERM now {then}")


@contextlib.contextmanager
def delete_on_sigterm(launcher: Launcher, name: str, pod: PodWatch | None = None) -> Iterator[None]:
    """While the block runs, SIGTERM ends the process with 143 (128 + 15); it deletes job ``name`` first
    unless Argo will rerun the step, which re-attaches to the job (``keep_job`` on the pod's state known when
    the signal came, ``pod``; none known: deleted).

    Argo (v4.0.5) stops a running step by sending SIGTERM to its main container, then SIGKILL after the
    pod's grace period (workflow/controller/pod/queue.go, terminateContainers), and its emissary passes
    the signal to the step's whole process group (workflow/executor/osspecific, Kill); KFP 2.17 terminates
    a run that way (backend/src/common/util/execution_spec.go sets the workflow's activeDeadlineSeconds to
    0). KFP's launcher, in the same group and reading our stdout through a pipe, dies at once, and the
    emissary exits at its next poll, ending the container: so the DELETE is the first request and goes out
    before any output. Signal handlers exist only in the main thread: elsewhere the block runs unguarded."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the delete short
        launcher.terminating.set()  # the log streamer sends nothing more
        if pod is not None:
            pod.close()
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, on_term)
    if pod is not None:
        pod.start()
    try:
        yield
    except Terminated:
        known = (pod.pod, pod.retry) if pod is not None else (None, ArgoRetry())
        keep, why = keep_job(*known)
        if not keep:
            # The first request: stdout may be a closed pipe by now, and the container near its end.
            launcher.delete(name)
            launcher.log(
                f"{launcher.kind} {name}: SIGTERM ({why}); deleted the job to free its nodes "
                "(a retry creates it again and the stage resumes from its checkpoints)"
            )
        else:
            launcher.log(
                f"{launcher.kind} {name}: SIGTERM ({why}); the job keeps running and the step's rerun "
                "re-attaches to it"
            )
        raise SystemExit(128 + signal.SIGTERM) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        if pod is not None:
            pod.close()


def rank0_address(api: str, name: str, namespace: str, cluster_domain: str = "cluster.local") -> str:
    """The fully qualified DNS name of the job's rank-0 pod, resolvable from any namespace (the rollout
    server that joins the weight push may run elsewhere; a short name resolves only through the
    resolver's search list of the asking pod's own namespace). Trainer v2.3.0's torch plugin gives the
    nodes ``<job>-node-0-0.<job>`` (pkg/runtime/framework/plugins/torch/torch.go, PET_MASTER_ADDR): the pod's
    hostname under JobSet's headless Service named after the job; the training operator (v1.9.0,
    pkg/controller.v1/pytorch/envvar.go, replicaName) makes one Service per replica, ``<job>-master-0``."""
    short = f"{name}-node-0-0.{name}" if api == "trainjob" else f"{name}-master-0"
    return f"{short}.{namespace}.svc.{cluster_domain}"


def check_rl_multinode(engine_kind: str, base_url: str) -> None:
    """A multi-node RL job runs the learner only (torchrun on every node): the rollout server must be
    reachable at ``engine.base_url`` (a server or a router in front of a fleet), or the engine in-process.
    The one-node topology (an SGLang server on ``engine.gpus`` of the same pod) has no multi-node form."""
    from paravt_core.config_base import ConfigError

    if engine_kind == "sglang" and not base_url:
        raise ConfigError(
            "launch.nodes > 1 with engine.kind=sglang needs engine.base_url (the rollout server or router the "
            "learner nodes talk to); the server-on-engine.gpus topology is one node only"
        )


# The rollout server (manifests/components/rollout-server) idles at 0 replicas: the RL step scales it up, and
# stamps when it was last wanted; the reaper scales it back to 0 a grace period after no RL job of ours lives.
ROLLOUT_WANTED_ANNOTATION = "paravt.io/rollout-wanted-at"  # Unix seconds


def wake_rollout_server(client: Any, namespace: str, name: str, log: Callable[[str], None] = say) -> int:
    """Scale Deployment ``name`` to 1 replica when it has none (a fleet's count is left alone) and stamp it
    as wanted now; returns the replicas it has after. Missing or not ours to change: ``ConfigError``."""
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    from paravt_core.config_base import ConfigError

    apps = k8s.AppsV1Api(client)
    try:
        for attempt in range(5):
            dep = apps.read_namespaced_deployment(name, namespace, _request_timeout=10)
            replicas = (dep.spec.replicas if dep.spec else None) or 0
            # The version read makes the patch conditional: a scale-down by the reaper since is read again.
            stamp = {ROLLOUT_WANTED_ANNOTATION: str(int(time.time()))}
            patch: dict[str, Any] = {
                "metadata": {"resourceVersion": dep.metadata.resource_version, "annotations": stamp}
            }
            if replicas == 0:
                patch["spec"] = {"replicas": 1}
            try:
                apps.patch_namespaced_deployment(name, namespace, patch, _request_timeout=10)
                break
            except ApiException as err:
                if err.status != 409 or attempt == 4:
                    raise
    except ApiException as err:
        if err.status not in (403, 404):
            raise
        raise ConfigError(
            f"launch.rollout_deployment {name}: {'no such Deployment' if err.status == 404 else 'not allowed'} "
            f'in {namespace} (HTTP {err.status}); add manifests/components/rollout-server or set it to ""'
        ) from None
    if replicas == 0:
        log(f"Deployment {namespace}/{name}: scaled from 0 to 1 replica for the rollouts")
    return max(replicas, 1)


def check_rollout_server(base_url: str, *, wait_s: float = 120.0, poll_s: float = 5.0) -> None:
    """From this (the step's) pod, before 16 GPUs load the learner: the rollout server at ``engine.base_url``
    answers ``GET /health`` with 200 (SGLang's and vLLM's liveness route), within ``wait_s`` (a server that
    is still loading its model). Otherwise one line says so; the step is not retried (a rerun finds the same)."""
    import urllib.error
    import urllib.request

    from paravt_core.config_base import ConfigError
    from paravt_core.engines.base import v1_url

    url = v1_url(base_url).removesuffix("/v1") + "/health"
    until = time.monotonic() + wait_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=min(10.0, max(wait_s, 1.0))) as resp:
                if resp.status == 200:
                    return
                problem = f"HTTP {resp.status}"
        except urllib.error.HTTPError as err:
            problem = f"HTTP {err.code}"
        except (urllib.error.URLError, OSError) as err:
            problem = f"{type(err).__name__}: {getattr(err, 'reason', err)}"
        if time.monotonic() + poll_s > until:
            raise ConfigError(
                f"engine.base_url {base_url}: the rollout server does not answer {url} from this pod after "
                f"{wait_s:g}s ({problem}); start it (manifests/components/rollout-server) or fix the URL"
            )
        time.sleep(poll_s)


# The namespace label Pod Security admission enforces (pod-security-admission v0.33.0, api/constants.go,
# EnforceLevelLabel); Kubeflow 1.11.0 gives every profile namespace "baseline"
# (applications/profiles/pss/namespace-labels.yaml).
PSS_ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
# The capabilities a container may add at each level (pod-security-admission v0.33.0, policy/
# check_capabilities_baseline.go: the default set; check_capabilities_restricted.go: NET_BIND_SERVICE only);
# "privileged" (and an unlabeled namespace under the default admission config) allows any.
PSS_ALLOWED_CAPABILITIES = {
    "baseline": frozenset(
        {
            "AUDIT_WRITE",
            "CHOWN",
            "DAC_OVERRIDE",
            "FOWNER",
            "FSETID",
            "KILL",
            "MKNOD",
            "NET_BIND_SERVICE",
            "SETFCAP",
            "SETGID",
            "SETPCAP",
            "SETUID",
            "SYS_CHROOT",
        }
    ),
    "restricted": frozenset({"NET_BIND_SERVICE"}),
}


def check_pod_security(core: Any, namespace: str, capabilities: list[str]) -> None:
    """Refuse capabilities (``launch.ipc_lock``'s IPC_LOCK) that the namespace's enforced Pod Security level
    forbids: the job would be created and its pods refused, seen only as "no pod of the job exists" at the
    pending timeout. A namespace that cannot be read (no grant) is not checked."""
    if not capabilities:
        return
    try:
        ns = core.read_namespace(namespace, _request_timeout=10)
    except Exception:  # noqa: BLE001 (unreadable: the create goes ahead as before)
        return
    level = ((ns.metadata.labels if ns.metadata is not None else None) or {}).get(PSS_ENFORCE_LABEL, "")
    allowed = PSS_ALLOWED_CAPABILITIES.get(level)
    refused = sorted(set(capabilities) - allowed) if allowed is not None else []
    if refused:
        from paravt_core.config_base import ConfigError

        raise ConfigError(
            f"launch.ipc_lock: namespace {namespace} enforces Pod Security {level!r} ({PSS_ENFORCE_LABEL}), "
            f"which refuses pods that add {', '.join(refused)}; set ipc_lock: false or have an admin label it "
            "privileged"
        )


def in_cluster_namespace(default: str = "default") -> str:
    """The namespace this pod runs in (its service account's), else ``default``."""
    path = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    try:
        with open(path) as f:
            return f.read().strip() or default
    except OSError:
        return default


def api_client() -> Any:
    """A client for the cluster this pod runs in (its service account), else ``~/.kube/config``."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        # $KUBECONFIG read now: the client reads it once, when first imported.
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
    return client.ApiClient()


def launch_stage(
    stage: str,
    config_yaml: str,
    *,
    run_id: str,
    nodes: int,
    gpus_per_node: int,
    api: str,
    spec: NodeSpec,
    runtime: str = "torch-distributed",
    namespace: str = "",
    poll_s: float = 15.0,
    client: Any = None,
    log: Callable[[str], None] = say,
    timeout_s: float | None = None,
    pending_timeout_s: float = 0.0,
    queue_timeout_s: float = 0.0,
) -> dict[str, Any]:
    """Run ``stage`` (its resolved config as YAML text) on ``nodes`` nodes and wait for it; returns the
    finished job object. Raises ``JobFailed`` / ``JobGone`` (the step fails with that message); SIGTERM
    deletes the job and exits 143 (``delete_on_sigterm``)."""
    if nodes < 2:
        raise ValueError("launch_stage is the multi-node path; one node runs torchrun in the pod")
    namespace = namespace or in_cluster_namespace()
    name = job_name(run_id, stage)
    common = dict(
        nodes=nodes, gpus_per_node=gpus_per_node, config_yaml=config_yaml, job_labels=labels(run_id, stage)
    )
    k8s = client if client is not None else api_client()
    launcher = Launcher(k8s, namespace, api, poll_s=poll_s, log=log)
    # Before the job: its pods would be refused, seen only at the pending timeout.
    check_pod_security(launcher.core, namespace, spec.capabilities)
    pod = PodWatch(launcher.core, namespace, log=log)  # read once now, watched while the job runs
    step_pod = pod.pod
    # The garbage collector deletes a dependent only once its owner is gone, and without a Workflow TTL
    # (KFP 2.15's Argo config has no workflowDefaults) nothing deletes the Workflow or the step's pods
    # (no podGC either): no owner ends a job whose step died before its DELETE. The reaper does
    # (paravt_core/launch/reaper.py), and its own deadline at the latest, so the job never outlives the
    # attempt that made it (the step pod's deadline, not a fresh one).
    if (left := step_time_left(step_pod)) is not None:
        spec = dataclasses.replace(spec, active_deadline_s=min(spec.active_deadline_s or left, left))
    if api == "trainjob":
        fields = trainjob_spec_fields(k8s)
        if fields is None:
            log(f"TrainJob CRD {TRAINJOB_CRD} unreadable: building for Trainer v2.2+ (runtimePatches)")
        manifest = trainjob_manifest(
            name, namespace, stage, spec, runtime=runtime, spec_fields=fields, **common
        )
    else:
        manifest = pytorchjob_manifest(name, namespace, stage, spec, **common)
    if owner := workflow_owner(step_pod):
        manifest["metadata"]["ownerReferences"] = owner  # garbage-collected with the run's Workflow
        if node := argo_node(step_pod):  # the reaper's way to the step's fate (KFP 2.15: no Workflow TTL)
            manifest["metadata"]["annotations"] = {ARGO_NODE_ANNOTATION: node}
    with delete_on_sigterm(launcher, name, pod):
        return launcher.run(
            manifest, timeout_s=timeout_s, nodes=nodes, pending_timeout_s=pending_timeout_s,
            queue_timeout_s=queue_timeout_s,
        )  # fmt: skip


def launch_with_retries(
    stage: str, cfg: Any, *, run_id: str, runtime: str, poll_s: float, spec: NodeSpec
) -> None:
    """:func:`launch_stage` for a stage config (``SftConfig``/``RlConfig``) on ``cfg.launch``'s nodes, its cluster
    settings and the run id on every node; a job that failed is deleted and created again
    (``launch.retries``), and the stage resumes from its checkpoints."""
    from paravt_core.config import config_to_yaml
    from paravt_core.launch.retry import run_with_retries

    launch = cfg.launch
    run_with_retries(
        lambda: launch_stage(
            stage,
            config_to_yaml(cfg),
            run_id=run_id,
            nodes=launch.nodes,
            gpus_per_node=launch.gpus_per_node,
            api=launch.api,
            runtime=runtime,
            poll_s=poll_s,
            spec=with_run_id(with_launch(spec, launch), run_id),
            pending_timeout_s=launch.pending_timeout_s,
            queue_timeout_s=launch.queue_timeout_s,
        ),
        stage=stage,
        retries=launch.retries,
        backoff_s=launch.retry_backoff_s,
    )
