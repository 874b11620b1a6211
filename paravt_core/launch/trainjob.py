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
4. SIGTERM to the step: the rule is ``sigterm_cause``. Argo stops a step (a terminated run, the step's
   deadline) by signalling its container and leaves the pod object alone; the cluster removing the pod (a
   drain or eviction, a preemption, ``kubectl delete pod``) marks the pod first: ``deletionTimestamp`` or a
   ``DisruptionTarget`` condition. The first deletes the job before anything is printed (KFP's launcher,
   which reads our stdout through a pipe, dies first: a print can raise ``BrokenPipeError``); the second
   keeps the job, and the step's rerun re-attaches to it. Unreadable pod: treated as a stop.
5. The job is owned by the run's Argo Workflow (the step pod's controller), so the garbage collector
   deletes it with the Workflow (KFP 2.17 deletes a finished one after 1 h) even when the step's pod
   died before its DELETE; the Workflow outlives the step's retries, which must re-attach.

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
from collections.abc import Callable, Iterator
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


def node_command(stage: str, api: str, nodes: int, gpus_per_node: int) -> list[str]:
    """The node's command: write the config from its env var, then ``torchrun``. The Trainer's torch
    plugin sets ``PET_NNODES``/``PET_NPROC_PER_NODE``/``PET_NODE_RANK``/``PET_MASTER_ADDR``/``_PORT``, which
    torchrun reads itself; the training operator sets ``MASTER_ADDR``/``MASTER_PORT`` and the pod's
    ``RANK`` (its replica index), given to torchrun explicitly."""
    if stage not in {"sft", "rl"}:
        raise ValueError(f"unknown stage {stage!r}; expected sft or rl")
    run = "torchrun"
    if api == "pytorchjob":
        run += (
            f" --nnodes={nodes} --nproc-per-node={gpus_per_node} --node-rank=$RANK"
            " --master-addr=$MASTER_ADDR --master-port=$MASTER_PORT"
        )
    script = f'printf "%s" "${CONFIG_ENV}" > {CONFIG_FILE} && exec {run} -m paravt_core.cli {stage} --config {CONFIG_FILE}'
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
) -> dict[str, Any]:
    """A ``trainer.kubeflow.org/v1alpha1`` TrainJob (schema of trainer v2.3.0): the trainer section
    carries image, command, env (secrets by ``secretKeyRef``), nodes, processes and resources; what it
    has no field for (volumes, node selection, pull secrets, service account) goes through
    ``runtimePatches`` onto the "node" pods."""
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
    job_spec["runtimePatches"] = [{"manager": MANAGER, "trainingRuntimeSpec": {"template": {"spec": patch}}}]
    if spec.active_deadline_s:
        job_spec["activeDeadlineSeconds"] = spec.active_deadline_s
    return {
        "apiVersion": f"{TRAINJOB[0]}/{TRAINJOB[1]}",
        "kind": TRAINJOB[3],
        "metadata": {"name": name, "namespace": namespace, "labels": _job_labels(spec, job_labels)},
        "spec": job_spec,
    }


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

    def delete(self, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.custom.delete_namespaced_custom_object(
                self.group, self.version, self.namespace, self.plural, name, propagation_policy="Foreground"
            )
        except ApiException as err:
            if err.status != 404:
                raise

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
        # Strict: a field the CRD does not declare fails the create (HTTP 400) instead of being pruned
        # silently (a misspelled key would run the job without its env, security context or volume).
        self.custom.create_namespaced_custom_object(
            self.group, self.version, self.namespace, self.plural, manifest, field_validation="Strict"
        )
        self.log(f"{self.kind} {name}: created in {self.namespace}")
        return how

    def follow(
        self, name: str, timeout_s: float | None = None, *, nodes: int = 0, pending_timeout_s: float = 0.0
    ) -> dict[str, Any]:
        """Follow the job until it finishes; delete it on success and return its last object. With
        ``pending_timeout_s`` and ``nodes``: until all ``nodes`` pods have run, a job that is suspended or
        has a pod still Pending that long is deleted and ``JobPending`` says why (without it, one node
        could hold its 8 GPUs while the other waits until the job's deadline, days later)."""
        stop = threading.Event()
        streamer = threading.Thread(target=self._stream_rank0, args=(name, stop), daemon=True)
        streamer.start()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        pending_until = time.monotonic() + pending_timeout_s if pending_timeout_s and nodes else None
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
                if pending_until is not None:
                    started, why = self._pods_started(name, nodes)
                    if started:
                        pending_until = None  # every node ran once: no pending check any more
                    elif time.monotonic() > pending_until:
                        why = "; ".join(x for x in (reason if state == "Suspended" else "", why) if x)
                        self.delete(name)
                        raise JobPending(
                            f"{self.kind} {self.namespace}/{name}: not all {nodes} nodes running "
                            f"{pending_timeout_s:.0f}s after the start (state {state}); deleted. "
                            f"{why or 'no pod of the job exists'}"
                        )
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
        pending_timeout_s: float = 0.0,
    ) -> dict[str, Any]:  # fmt: skip
        self.start(manifest)
        name = manifest["metadata"]["name"]
        return self.follow(name, timeout_s=timeout_s, nodes=nodes, pending_timeout_s=pending_timeout_s)

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
    """Why this pod got SIGTERM: "removed" when the cluster is taking the pod away (``deletionTimestamp``
    set, or a ``DisruptionTarget`` condition: drain, eviction, preemption, a lost node's taint), else "stop"
    (Argo v4.0.5 signals the containers of a terminated run or a step past its deadline and does not
    delete the pod: workflow/controller/exec_control.go, pod/queue.go terminateContainers). A pod that
    could not be read counts as "stop": a user's terminate is the usual cause."""
    if pod is None:
        return "stop"
    if pod.metadata is not None and pod.metadata.deletion_timestamp is not None:
        return "removed"
    conditions = (pod.status.conditions if pod.status is not None else None) or []
    if any(c.type == DISRUPTION and c.status == "True" for c in conditions):
        return "removed"
    return "stop"


def workflow_owner(pod: Any | None) -> list[dict[str, Any]]:
    """An owner reference to the Argo Workflow that runs this step (Argo v4.0.5 makes it every pod's
    controller: workflow/controller/workflowpod.go, NewControllerRef); [] outside a KFP pod. Not blocking
    the owner's deletion (that would need update on workflows/finalizers)."""
    refs = (pod.metadata.owner_references if pod is not None and pod.metadata is not None else None) or []
    for ref in refs:
        if ref.kind == "Workflow" and ref.api_version.startswith("argoproj.io/"):
            return [{"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name, "uid": ref.uid}]
    return []


@contextlib.contextmanager
def delete_on_sigterm(launcher: Launcher, name: str) -> Iterator[None]:
    """While the block runs, SIGTERM ends the process with 143 (128 + 15); it deletes job ``name`` first
    unless the cluster is removing this pod (``sigterm_cause``), whose rerun re-attaches to the job.

    Argo (v4.0.5) stops a running step by sending SIGTERM to its main container, then SIGKILL after the
    pod's grace period (workflow/controller/pod/queue.go, terminateContainers), and its emissary passes
    the signal to the step's whole process group (workflow/executor/osspecific, Kill); KFP 2.17 terminates
    a run that way (backend/src/common/util/execution_spec.go sets the workflow's activeDeadlineSeconds to
    0). KFP's launcher, in the same group and reading our stdout through a pipe, dies at once and the
    container ends with it: so the DELETE goes out before any output. Signal handlers exist only in the
    main thread: elsewhere the block runs unguarded."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the delete short
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    except Terminated:
        cause = sigterm_cause(own_pod(launcher.core, launcher.namespace))
        if cause == "stop":
            launcher.delete(name)  # before any output: stdout may be a closed pipe by now
            launcher.log(
                f"{launcher.kind} {name}: SIGTERM; deleted the job to free its nodes "
                "(a retry creates it again and the stage resumes from its checkpoints)"
            )
        else:
            launcher.log(
                f"{launcher.kind} {name}: SIGTERM while this pod is being removed (eviction, drain or "
                "preemption); the job keeps running and the step's rerun re-attaches to it"
            )
        raise SystemExit(128 + signal.SIGTERM) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


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
    if api == "trainjob":
        manifest = trainjob_manifest(name, namespace, stage, spec, runtime=runtime, **common)
    else:
        manifest = pytorchjob_manifest(name, namespace, stage, spec, **common)
    launcher = Launcher(
        client if client is not None else api_client(), namespace, api, poll_s=poll_s, log=log
    )
    if owner := workflow_owner(own_pod(launcher.core, namespace)):
        manifest["metadata"]["ownerReferences"] = owner  # garbage-collected with the run's Workflow
    with delete_on_sigterm(launcher, name):
        return launcher.run(manifest, timeout_s=timeout_s, nodes=nodes, pending_timeout_s=pending_timeout_s)


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
        ),
        stage=stage,
        retries=launch.retries,
        backoff_s=launch.retry_backoff_s,
    )
