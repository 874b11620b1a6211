"""Every option of the multi-node job lands where the controllers read it, on an API server that refuses
unknown fields, and the launcher's smaller rules with values worked out by hand.

A custom resource's field that its CRD's structural schema does not declare is pruned by the API server
(kubernetes/apiextensions-apiserver, pkg/apiserver/schema/pruning/algorithm.go): a misspelled key (``"XXenvXX"``,
``"runasnonroot"``, an owner reference's ``"NAME"``) would run the job without its env, security context or
owner, silently. The launcher creates with ``fieldValidation=Strict`` (k8s.io/apimachinery
pkg/apis/meta/v1/types.go, ``CreateOptions.FieldValidation``: "Strict: This will fail the request with a
BadRequest error if any unknown fields would be dropped from the object"; GA since Kubernetes 1.27), which
the emulator implements (tests/support/k8s_emulator.py, ``unknown_fields``; sources and commits in its docstring).
"""

from __future__ import annotations

import io
import json
import socket
import sys
import threading

import pytest
from kubernetes import client as k8s
from kubernetes.client import CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from paravt_core.config import LaunchConfig
from paravt_core.config_base import ConfigError
from paravt_core.launch.trainjob import (
    JobPending,
    Launcher,
    NodeSpec,
    check_rl_multinode,
    in_cluster_namespace,
    job_name,
    job_state,
    labels,
    launch_stage,
    own_pod,
    pytorchjob_manifest,
    rank0_address,
    say,
    trainjob_manifest,
    with_launch,
    workflow_owner,
)
from tests.support.k8s_emulator import Emulator, unknown_fields
from tests.support.ports import free_port
from tests.support.trainjob_support import CONFIG, NS, PYTORCHJOB_CRD, RUN, crd

NAME = "paravt-sft-40851abdfdb2"  # "paravt-sft-" + the first 12 hex digits of sha256(RUN)
UID = "6a1c2f0e-5d4b-4e8a-9c7f-0b1d2e3f4a5b"
IMAGE = "registry/paravt-sft@sha256:" + "b" * 64


def full_spec() -> NodeSpec:
    """Every NodeSpec option on, through the ``launch`` section where the cluster settings come from."""
    base = NodeSpec(
        image=IMAGE,
        cpu="16",
        memory="256Gi",
        node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        env={"HF_HUB_OFFLINE": "1"},
        secret_env={"AWS_SECRET_ACCESS_KEY": ("paravt-s3", "secret-key")},
        config_map_env={"AWS_ENDPOINT_URL": ("paravt-s3-config", "endpoint")},
        pvc="paravt-media",
        pvc_mount="/data/media",
        shm="64Gi",
        image_pull_secrets=["regcred"],
        active_deadline_s=172800.0,  # a STRUCT input's number comes back as a float
        service_account="paravt-nodes",
        capabilities=["SYS_NICE"],
    )
    launch = LaunchConfig(
        fabric_resources={"rdma/ib": 4},
        ipc_lock=True,
        node_env={"NCCL_IB_HCA": "mlx5", "NCCL_NET": "IB"},
        queue_name="team-a",
        gang=True,
    )
    return with_launch(base, launch)


def _owner_pod() -> k8s.V1Pod:
    refs = [
        k8s.V1OwnerReference(api_version="apps/v1", kind="ReplicaSet", name="rs", uid="1"),
        k8s.V1OwnerReference(api_version="argoproj.io/v1alpha1", kind="Workflow", name="run-abc", uid=UID),
    ]
    return k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="step", owner_references=refs))


# Hand-written: what every node's container and pod must carry (the same for both kinds).
ENV = [
    {"name": "HF_HUB_OFFLINE", "value": "1"},
    {"name": "NCCL_IB_HCA", "value": "mlx5"},
    {"name": "NCCL_NET", "value": "IB"},
    {"name": "PARAVT_STAGE_CONFIG", "value": CONFIG},
    {
        "name": "AWS_SECRET_ACCESS_KEY",
        "valueFrom": {"secretKeyRef": {"name": "paravt-s3", "key": "secret-key"}},
    },
    {
        "name": "AWS_ENDPOINT_URL",
        "valueFrom": {"configMapKeyRef": {"name": "paravt-s3-config", "key": "endpoint"}},
    },
]
AMOUNTS = {"cpu": "16", "memory": "256Gi", "nvidia.com/gpu": 8, "rdma/ib": 4}
POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 10001,
    "runAsGroup": 10001,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK", "SYS_NICE"]},
}
MOUNTS = [{"name": "media", "mountPath": "/data/media"}, {"name": "dshm", "mountPath": "/dev/shm"}]
VOLUMES = [
    {"name": "media", "persistentVolumeClaim": {"claimName": "paravt-media"}},
    {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
]
LABELS = {
    "app.kubernetes.io/managed-by": "paravt",
    "paravt.io/stage": "sft",
    "paravt.io/run": "40851abdfdb2",
    "kueue.x-k8s.io/queue-name": "team-a",
}
OWNER = [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "run-abc", "uid": UID}]


def _pod_common(pod: dict) -> None:
    assert pod["securityContext"] == POD_SECURITY
    assert pod["volumes"] == VOLUMES
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["serviceAccountName"] == "paravt-nodes"


def _create(api: str, manifest: dict, path=None) -> dict:
    """Create ``manifest`` through the launcher on a strict emulator with the kind's CRD; the stored object."""
    plural = "trainjobs" if api == "trainjob" else "pytorchjobs"
    with Emulator() as emu:
        emu.register_crd(crd(path) if path else crd())
        assert Launcher(emu.client(), NS, api, poll_s=0.01, log=lambda _: None).start(manifest) == "created"
        assert emu.field_validation == ["Strict"]
        return emu.get(plural, NS, NAME)


def _metadata(obj: dict) -> None:
    assert obj["metadata"]["name"] == NAME and obj["metadata"]["namespace"] == NS
    assert obj["metadata"]["labels"] == LABELS
    assert obj["metadata"]["ownerReferences"] == OWNER


def test_a_trainjob_with_every_option_is_accepted_and_each_is_in_its_place():
    """TrainJob (trainer v2.3.0): image, command, env, nodes, processes and resources in ``spec.trainer``; the
    pod's settings in the runtime patch of the "node" replicated job; gang: a namespaced TrainingRuntime."""
    m = trainjob_manifest(
        NAME,
        NS,
        "sft",
        full_spec(),
        nodes=2,
        gpus_per_node=8,
        config_yaml=CONFIG,
        job_labels=labels(RUN, "sft"),
    )
    m["metadata"]["ownerReferences"] = workflow_owner(_owner_pod())
    obj = _create("trainjob", m)
    assert obj["apiVersion"] == "trainer.kubeflow.org/v1alpha1" and obj["kind"] == "TrainJob"
    _metadata(obj)
    spec = obj["spec"]
    assert spec["runtimeRef"] == {
        "name": "torch-distributed",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "TrainingRuntime",
    }
    assert spec["activeDeadlineSeconds"] == 172800 and type(spec["activeDeadlineSeconds"]) is int
    trainer = spec["trainer"]
    assert trainer["image"] == IMAGE and (trainer["numNodes"], trainer["numProcPerNode"]) == (2, 8)
    assert trainer["env"] == ENV
    assert trainer["resourcesPerNode"] == {"requests": AMOUNTS, "limits": AMOUNTS}
    (patch,) = spec["runtimePatches"]
    assert patch["manager"] == "paravt.io/launcher"
    (job,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert job["name"] == "node"
    template = job["template"]["spec"]["template"]
    assert template["metadata"] == {"annotations": {"sidecar.istio.io/inject": "false"}}
    _pod_common(template["spec"])
    (container,) = template["spec"]["containers"]
    assert container == {"name": "node", "securityContext": CONTAINER_SECURITY, "volumeMounts": MOUNTS}


@pytest.mark.parametrize("nodes", [2, 3])
def test_a_pytorchjob_with_every_option_is_accepted_and_each_is_in_its_place(nodes):
    """PyTorchJob (training-operator v1.9.0): one Master and ``nodes - 1`` Workers of one pod template; run
    policy: no retries by the operator, the deadline, gang ``minAvailable`` = all nodes."""
    m = pytorchjob_manifest(
        NAME, NS, "sft", full_spec(), nodes=nodes, gpus_per_node=8, config_yaml=CONFIG,
        job_labels=labels(RUN, "sft"),
    )  # fmt: skip
    m["metadata"]["ownerReferences"] = workflow_owner(_owner_pod())
    obj = _create("pytorchjob", m, PYTORCHJOB_CRD)
    assert obj["apiVersion"] == "kubeflow.org/v1" and obj["kind"] == "PyTorchJob"
    _metadata(obj)
    spec = obj["spec"]
    assert spec["runPolicy"] == {
        "backoffLimit": 0,
        "activeDeadlineSeconds": 172800,
        "schedulingPolicy": {"minAvailable": nodes},
    }
    replicas = spec["pytorchReplicaSpecs"]
    assert {k: v["replicas"] for k, v in replicas.items()} == {"Master": 1, "Worker": nodes - 1}
    for replica in replicas.values():
        assert replica["restartPolicy"] == "Never"
        template = replica["template"]
        assert template["metadata"] == {"annotations": {"sidecar.istio.io/inject": "false"}}
        _pod_common(template["spec"])
        (container,) = template["spec"]["containers"]
        assert container["name"] == "pytorch" and container["image"] == IMAGE
        assert container["env"] == ENV
        assert container["resources"] == {"requests": AMOUNTS, "limits": AMOUNTS}
        assert container["securityContext"] == CONTAINER_SECURITY
        assert container["volumeMounts"] == MOUNTS
        assert f"--nnodes={nodes} --nproc-per-node=8" in container["command"][2]


def test_the_strict_server_refuses_misspelled_keys_and_names_each():
    """The check can fail: three misspelled keys, one in ObjectMeta, one in an owner reference, one deep in
    the pod template, all named in one 400 (the API server lists every unknown field)."""
    m = pytorchjob_manifest(
        NAME,
        NS,
        "sft",
        full_spec(),
        nodes=2,
        gpus_per_node=8,
        config_yaml=CONFIG,
        job_labels=labels(RUN, "sft"),
    )
    m["metadata"]["XXnamespaceXX"] = m["metadata"].pop("namespace")
    m["metadata"]["ownerReferences"] = [{**OWNER[0], "NAME": "run-abc"}]
    container = m["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["XXenvXX"] = container.pop("env")
    with Emulator() as emu:
        emu.register_crd(crd(PYTORCHJOB_CRD))
        launcher = Launcher(emu.client(), NS, "pytorchjob", poll_s=0.01, log=lambda _: None)
        with pytest.raises(ApiException) as err:
            launcher.start(m)
        assert err.value.status == 400 and emu.get("pytorchjobs", NS, NAME) is None
        status = json.loads(err.value.body)
        assert (status["code"], status["reason"]) == (400, "BadRequest")
        pod = "spec.pytorchReplicaSpecs.{}.template.spec.containers[0].XXenvXX"  # one template, both replicas
        assert status["message"] == (
            'PyTorchJob in version "v1" cannot be handled as a PyTorchJob: strict decoding error: '
            'unknown field "metadata.XXnamespaceXX", unknown field "metadata.ownerReferences[0].NAME", '
            f'unknown field "{pod.format("Master")}", unknown field "{pod.format("Worker")}"'
        )
        # Without Strict the server takes it (and would prune the three fields).
        CustomObjectsApi(emu.client()).create_namespaced_custom_object(
            "kubeflow.org", "v1", NS, "pytorchjobs", m
        )
        assert emu.field_validation == ["Strict", ""]


def test_unknown_fields_follows_the_pruning_rules():
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "sel": {"type": "object", "additionalProperties": {"type": "string"}},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                             "properties": {"known": {"type": "object", "properties": {"a": {"type": "string"}}}}},
                    "list": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
                    "bare": {"type": "object"},
                },
            }
        },
    }  # fmt: skip
    obj = {
        "apiVersion": "x/v1",
        "kind": "X",
        "metadata": {"name": "n", "labels": {"any/key": "v"}, "lables": {}},
        "spec": {
            "sel": {"any.key/x": "v"},
            "free": {"whatever": {"deep": 1}, "known": {"a": "1", "b": "2"}},
            "list": [{"k": "1"}, {"k": "2", "j": "3"}],
            "bare": {"x": 1},
            "extra": 1,
        },
        "status": {},
    }
    assert sorted(unknown_fields(obj, schema, root=True)) == [
        "metadata.lables",
        "spec.bare.x",
        "spec.extra",
        "spec.free.known.b",
        "spec.list[1].j",
        "status",
    ]


# --- values worked out by hand ------------------------------------------------------------------------
def test_job_names_keep_12_hex_digits_and_only_letters_and_digits_of_the_stage():
    assert job_name(RUN, "sft") == NAME
    assert job_name(RUN, "S_F-t.") == NAME  # lowercased, "_", "-" and "." dropped


def test_a_suspended_trainjob_reads_suspended_with_its_message():
    obj = {
        "status": {"conditions": [{"type": "Suspended", "status": "True", "message": "queue team-a is full"}]}
    }
    assert job_state("trainjob", obj) == ("Suspended", "queue team-a is full")


def test_rank0_addresses_of_both_kinds():
    assert rank0_address("trainjob", "j", "ns") == "j-node-0-0.j.ns.svc.cluster.local"
    assert rank0_address("pytorchjob", "j", "ns") == "j-master-0.ns.svc.cluster.local"


def test_rl_on_several_nodes_with_sglang_needs_a_base_url():
    with pytest.raises(ConfigError, match="needs engine.base_url"):
        check_rl_multinode("sglang", "")
    check_rl_multinode("sglang", "http://router:30000")
    check_rl_multinode("inprocess", "")


def test_node_spec_takes_whole_float_seconds_and_refuses_fractions():
    spec = NodeSpec(image="i", active_deadline_s=172800.0)
    assert spec.active_deadline_s == 172800 and type(spec.active_deadline_s) is int
    with pytest.raises(ValueError, match=r"active_deadline_s=1\.5: whole seconds expected"):
        NodeSpec(image="i", active_deadline_s=1.5)


def test_an_unknown_api_is_refused_with_the_choices():
    with pytest.raises(
        ValueError, match=r"launch.api 'mpijob': expected one of \['pytorchjob', 'trainjob'\]"
    ):
        Launcher(k8s.ApiClient(), NS, "mpijob")


def test_launch_stage_refuses_one_node():
    with pytest.raises(ValueError, match="launch_stage is the multi-node path"):
        launch_stage(
            "sft", CONFIG, run_id=RUN, nodes=1, gpus_per_node=8, api="trainjob", spec=NodeSpec(image="i")
        )


def test_launch_stage_passes_its_pending_timeout_on():
    """No pod of the job ever appears: the pending timeout (0.3 s) ends the step long before its 20 s."""
    with Emulator() as emu:
        emu.register_crd(crd())
        with pytest.raises(JobPending, match="no pod of the job exists"):
            launch_stage(
                "sft", CONFIG, run_id=RUN, nodes=2, gpus_per_node=8, api="trainjob", spec=NodeSpec(image="i"),
                namespace=NS, poll_s=0.05, client=emu.client(), log=lambda _: None, timeout_s=20,
                pending_timeout_s=0.3,
            )  # fmt: skip
        assert emu.get("trainjobs", NS, NAME) is None  # deleted


def _launcher(emu: Emulator, log: list[str] | None = None, poll_s: float = 0.01) -> Launcher:
    return Launcher(
        emu.client(), NS, "trainjob", poll_s=poll_s, log=(log.append if log is not None else print)
    )


def _pod(name: str, phase: str, created: str | None = None, **status) -> dict:
    labels_ = {
        "jobset.sigs.k8s.io/jobset-name": NAME,
        "jobset.sigs.k8s.io/replicatedjob-name": "node",
        "batch.kubernetes.io/job-completion-index": "0",
    }
    meta = {"name": name, "namespace": NS, "labels": labels_, "creationTimestamp": created}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "status": {"phase": phase, **status}}


def test_pods_started_counts_finished_pods_and_names_every_waiting_ones_reason():
    unschedulable = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
    }
    with Emulator() as emu:
        launcher = _launcher(emu)
        emu.put_pod(_pod("a", "Running"))
        emu.put_pod(_pod("b", "Succeeded"))
        assert launcher._pods_started(NAME, 2) == (True, "")
        emu.put_pod(_pod("c", "Pending", conditions=[unschedulable]))
        statuses = [
            {"name": "sidecar", "image": "s", "imageID": "", "ready": True, "restartCount": 0,
             "state": {"running": {}}},
            {"name": "node", "image": "i", "imageID": "", "ready": False, "restartCount": 0,
             "state": {"waiting": {"reason": "ErrImagePull"}}},
        ]  # fmt: skip
        emu.put_pod(_pod("d", "Pending", containerStatuses=statuses))
        emu.put_pod(_pod("e", "Pending"))
        assert launcher._pods_started(NAME, 5) == (
            False,
            "pod c: Unschedulable: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu.; "
            "pod d: ErrImagePull; pod e: Pending",
        )


def test_the_newest_rank0_pod_is_followed():
    """A node restarted by its Job has two rank-0 pods: the newer one's log is the live one."""
    with Emulator() as emu:
        emu.put_pod(_pod("new", "Running", "2026-11-28T10:05:00Z"))
        emu.put_pod(_pod("old", "Failed", "2026-11-28T10:00:00Z"))
        emu.put_pod(_pod("waiting", "Pending", "2026-11-28T10:09:00Z"))
        assert _launcher(emu)._rank0_pod(NAME) == "new"


def test_a_log_with_bytes_that_are_not_utf8_is_printed_with_replacement_characters():
    with Emulator() as emu:
        emu.put_pod(_pod("p", "Running", "2026-11-28T10:05:00Z"))
        emu.append_log(NS, "p", b"step 1 \xff ok\nlast")
        log: list[str] = []
        stop = threading.Event()
        stop.set()  # the job has finished: one last read
        _launcher(emu, log)._stream_rank0(NAME, stop)
        assert log == ["[p] step 1 \ufffd ok", "[p] last"]


def test_start_says_re_attached_and_recreated():
    m = trainjob_manifest(
        NAME, NS, "sft", NodeSpec(image="i"), nodes=2, gpus_per_node=8, config_yaml=CONFIG,
        job_labels=labels(RUN, "sft"),
    )  # fmt: skip
    with Emulator() as emu:
        emu.register_crd(crd())
        launcher = _launcher(emu, [])
        assert launcher.start(m) == "created"
        emu.set_status("trainjobs", NS, NAME, {"jobsStatus": [{"name": "node", "active": 2}]})
        assert launcher.start(m) == "re-attached"
        emu.set_status("trainjobs", NS, NAME, {"conditions": [{"type": "Failed", "status": "True"}]})
        assert launcher.start(m) == "recreated"
        assert emu.count("create", "trainjobs") == 2


def test_reads_are_retried_with_doubling_waits():
    with Emulator() as emu:
        emu.register_crd(crd())
        log: list[str] = []
        emu.failures = [503, 503]
        assert _launcher(emu, log, poll_s=0.2).get(NAME) is None  # then 404: no such job
        assert log == [
            f"TrainJob {NAME}: API read failed (HTTP 503); retrying in 0.2s",
            f"TrainJob {NAME}: API read failed (HTTP 503); retrying in 0.4s",
        ]


def test_a_server_that_cannot_be_reached_is_tried_attempts_times():
    port = free_port()  # a port nobody listens on
    cfg = k8s.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    cfg.retries = False
    log: list[str] = []
    launcher = Launcher(k8s.ApiClient(cfg), NS, "trainjob", poll_s=0.01, log=log.append)
    import urllib3

    with pytest.raises(urllib3.exceptions.HTTPError):
        launcher.get(NAME, attempts=3)
    assert len(log) == 2 and all("API read failed (" in line for line in log)


def test_follow_past_its_timeout_says_which_job_and_state():
    m = trainjob_manifest(
        NAME, NS, "sft", NodeSpec(image="i"), nodes=2, gpus_per_node=8, config_yaml=CONFIG,
        job_labels=labels(RUN, "sft"),
    )  # fmt: skip
    with Emulator() as emu:
        emu.register_crd(crd())
        launcher = _launcher(emu, [])
        launcher.start(m)
        with pytest.raises(TimeoutError) as err:
            launcher.follow(NAME, timeout_s=0.2)
        assert str(err.value) == f"TrainJob {NAME} did not finish in 0s (state Created)"


def test_the_log_is_streamed_while_the_job_runs():
    """A line the rank-0 pod writes while the job runs is printed before the job completes (the controller
    here completes the job only once it saw the line printed, or after 10 s)."""
    m = trainjob_manifest(
        NAME, NS, "sft", NodeSpec(image="i"), nodes=2, gpus_per_node=8, config_yaml=CONFIG,
        job_labels=labels(RUN, "sft"),
    )  # fmt: skip
    log: list[str] = []

    def printed(line: str, within_s: float) -> None:
        for _ in range(int(within_s / 0.01)):
            if line in log:
                return
            threading.Event().wait(0.01)

    with Emulator() as emu:
        emu.register_crd(crd())
        launcher = _launcher(emu, log, poll_s=0.05)
        launcher.start(m)
        emu.set_status("trainjobs", NS, NAME, {"jobsStatus": [{"name": "node", "active": 2}]})
        emu.put_pod(_pod("p", "Running", "2026-11-28T10:05:00Z"))
        emu.append_log(NS, "p", "a\n")

        def controller() -> None:
            printed("[p] a", 30.0)
            emu.append_log(NS, "p", "b\n")
            printed("[p] b", 10.0)
            emu.set_status("trainjobs", NS, NAME, {"conditions": [{"type": "Complete", "status": "True"}]})

        thread = threading.Thread(target=controller)
        thread.start()
        launcher.follow(NAME, timeout_s=60)
        thread.join()
    assert log.index("[p] b") < log.index(f"TrainJob {NAME}: Complete")


def test_the_namespace_is_read_from_the_service_account_mount(monkeypatch):
    """The kubelet mounts the pod's namespace at /var/run/secrets/kubernetes.io/serviceaccount/namespace
    (Kubernetes docs, "Accessing the Kubernetes API from a Pod"); no pod here, so ``open`` serves that one
    path (a fake only where the real mount cannot exist)."""
    content = {"/var/run/secrets/kubernetes.io/serviceaccount/namespace": "team-a\n"}

    def fake_open(path, *args, **kwargs):
        if path not in content:
            raise FileNotFoundError(path)
        return io.StringIO(content[path])

    monkeypatch.setattr("paravt_core.launch.trainjob.open", fake_open, raising=False)
    assert in_cluster_namespace() == "team-a"
    content["/var/run/secrets/kubernetes.io/serviceaccount/namespace"] = "\n"
    assert in_cluster_namespace("kubeflow") == "kubeflow"
    content.clear()
    assert in_cluster_namespace("kubeflow") == "kubeflow"


def test_an_api_server_that_never_answers_the_pod_read_gives_none(monkeypatch):
    """The read of the step's own pod (in the SIGTERM handler, before the job's deletion) is one short
    request: a server that accepts the connection and never answers yields None, not a hang."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)  # the kernel completes the connection; nobody reads the request
        cfg = k8s.Configuration()
        cfg.host = f"http://127.0.0.1:{server.getsockname()[1]}"
        cfg.retries = False
        monkeypatch.setenv("KFP_POD_NAME", "step-pod")
        assert own_pod(k8s.CoreV1Api(k8s.ApiClient(cfg)), NS) is None


def test_say_flushes_every_line(monkeypatch):
    """KFP's launcher reads the step's stdout through a pipe (block-buffered): each line must go out now."""
    calls: list[str] = []

    class Stream(io.StringIO):
        def write(self, text: str) -> int:
            calls.append(f"write {text!r}")
            return len(text)

        def flush(self) -> None:
            calls.append("flush")

    monkeypatch.setattr(sys, "stdout", Stream())
    say("TrainJob j: Running")
    assert calls == ["write 'TrainJob j: Running'", "write '\\n'", "flush"]
