"""The multi-node job's cluster settings (``launch`` section): fabric devices, IPC_LOCK and NCCL env,
Kueue's queue label, gang scheduling, Pod Security ``restricted`` contexts, and the pending timeout that
ends a step whose nodes never all start. Manifests are validated against the vendored CRD schemas
(Trainer v2.3.0, training-operator v1.9.0); the pending timeout runs against the API emulator."""

from __future__ import annotations

import threading

import jsonschema
import pytest

from paravt_core.config import LaunchConfig
from paravt_core.launch.trainjob import (
    JobPending,
    Launcher,
    NodeSpec,
    job_name,
    labels,
    pytorchjob_manifest,
    trainjob_manifest,
    with_launch,
)
from tests.k8s_emulator import Emulator
from tests.test_launch_trainjob import CONFIG, NS, PYTORCHJOB_CRD, RUN, crd, spec

EFA = LaunchConfig(
    fabric_resources={"vpc.amazonaws.com/efa": 32},
    ipc_lock=True,
    node_env={"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_SOCKET_IFNAME": "eth0"},
    queue_name="h100-team-a",
)


def _schema(path=None) -> dict:
    return (crd(path) if path else crd())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _both(node_spec: NodeSpec, nodes: int = 2) -> tuple[dict, dict]:
    args = dict(nodes=nodes, gpus_per_node=8, config_yaml=CONFIG, job_labels=labels(RUN, "sft"))
    t = trainjob_manifest(job_name(RUN, "sft"), NS, "sft", node_spec, **args)
    p = pytorchjob_manifest(job_name(RUN, "sft"), NS, "sft", node_spec, **args)
    jsonschema.validate(t, _schema())
    jsonschema.validate(p, _schema(PYTORCHJOB_CRD))
    return t, p


def _trainjob_pod(m: dict) -> dict:
    (patch,) = m["spec"]["runtimePatches"]
    (job,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    return job["template"]["spec"]["template"]["spec"]


def test_fabric_devices_ipc_lock_nccl_env_and_queue_reach_every_node():
    """AWS EFA: the device plugin's resource ``vpc.amazonaws.com/efa`` (32 on a p5.48xlarge), libfabric's
    ``FI_PROVIDER=efa``; RDMA registers (pins) memory, which needs IPC_LOCK. Trainer v2.3.0 copies
    ``trainer.resourcesPerNode`` onto the node container (pkg/runtime/framework/plugins/torch); a TrainJob
    patch's container has no ``resources`` field, so the devices go there. Kueue admits a job by its
    ``kueue.x-k8s.io/queue-name`` label (Kueue v0.15.8, pkg/controller/constants/constants.go, QueueLabel)."""
    t, p = _both(with_launch(spec(), EFA))
    assert t["spec"]["trainer"]["resourcesPerNode"] == {
        side: {"cpu": "32", "memory": "512G", "nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32}
        for side in ("requests", "limits")
    }
    env = {e["name"]: e.get("value") for e in t["spec"]["trainer"]["env"]}
    assert env["FI_PROVIDER"] == "efa" and env["NCCL_SOCKET_IFNAME"] == "eth0"
    (node,) = _trainjob_pod(t)["containers"]
    assert node["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    for m in (t, p):
        assert m["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "h100-team-a"
    for replica in p["spec"]["pytorchReplicaSpecs"].values():
        (c,) = replica["template"]["spec"]["containers"]
        assert c["resources"]["limits"]["vpc.amazonaws.com/efa"] == 32
        assert c["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
        assert {e["name"]: e.get("value") for e in c["env"]}["FI_EFA_USE_DEVICE_RDMA"] == "1"
    # Without a fabric section: nothing extra, and no queue label.
    t0, p0 = _both(with_launch(spec(), LaunchConfig()))
    assert set(t0["spec"]["trainer"]["resourcesPerNode"]["limits"]) == {"cpu", "memory", "nvidia.com/gpu"}
    assert "kueue.x-k8s.io/queue-name" not in t0["metadata"]["labels"]


def test_node_pods_meet_pod_security_restricted():
    """Pod Security ``restricted`` (Kubernetes pod-security-admission, policy/check_runAsNonRoot.go,
    check_seccompProfile_restricted.go, check_allowPrivilegeEscalation.go, check_capabilities_restricted.go):
    runAsNonRoot, seccomp RuntimeDefault (pod or container), allowPrivilegeEscalation false, capabilities
    drop ALL. The node pods had no securityContext at all, so such a namespace refused them."""
    t, p = _both(spec())
    pods = [_trainjob_pod(t)] + [r["template"]["spec"] for r in p["spec"]["pytorchReplicaSpecs"].values()]
    for pod in pods:
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        (c,) = pod["containers"]
        assert c["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def test_gang_scheduling_option_for_both_kinds():
    """Trainer v2.3.0 gang-schedules through the runtime's ``podGroupPolicy`` (pkg/apis/trainer/v1alpha1/
    trainingruntime_types.go), which a TrainJob's runtimePatches cannot carry (the CRD's patch has only
    ``template``): ``gang`` makes the job name the namespaced TrainingRuntime ``launch.runtime``. The
    training operator v1.9.0 sizes its PodGroup from ``runPolicy.schedulingPolicy.minAvailable``
    (pkg/controller.v1/common/job.go, with --gang-scheduler-name set)."""
    gang = with_launch(spec(), LaunchConfig(gang=True))
    args = dict(nodes=4, gpus_per_node=8, config_yaml=CONFIG, job_labels={})
    t = trainjob_manifest("x", NS, "sft", gang, runtime="paravt-torch-gang", **args)
    jsonschema.validate(t, _schema())
    assert t["spec"]["runtimeRef"] == {
        "name": "paravt-torch-gang", "apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime"
    }  # fmt: skip
    p = pytorchjob_manifest("x", NS, "sft", gang, **args)
    jsonschema.validate(p, _schema(PYTORCHJOB_CRD))
    assert p["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 4}
    plain = trainjob_manifest("x", NS, "sft", spec(), **args)
    assert plain["spec"]["runtimeRef"]["kind"] == "ClusterTrainingRuntime"


def _run_pending(
    emu: Emulator, name: str, pending_timeout_s: float
) -> tuple[BaseException | None, list[str]]:
    log: list[str] = []
    launcher = Launcher(emu.client(), NS, poll_s=0.05, log=log.append)
    m = trainjob_manifest(
        name, NS, "sft", spec(), nodes=2, gpus_per_node=8, config_yaml=CONFIG, job_labels={}
    )
    try:
        launcher.run(m, nodes=2, pending_timeout_s=pending_timeout_s)
    except BaseException as err:  # noqa: BLE001 - handed to the test
        return err, log
    return None, log


def test_a_node_that_never_schedules_ends_the_step_with_the_reason_and_frees_the_other():
    """A Job counts a Pending pod as active (Kubernetes batch/v1 JobStatus.active: "pending and running
    pods"), and so does the TrainJob's ``jobsStatus``: it looks Running while one node holds its GPUs and
    the other waits for room until the job's deadline. The step reads the pods themselves."""
    name = job_name(RUN, "sft")
    sel = {"jobset.sigs.k8s.io/jobset-name": name}
    unschedulable = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
    }
    with Emulator() as emu:
        emu.register_crd(crd())
        emu.add_pod(NS, f"{name}-node-0-0-aaaaa", sel, phase="Running")
        emu.add_pod(NS, f"{name}-node-0-1-bbbbb", sel, phase="Pending", conditions=[unschedulable])
        err, _ = _run_pending(emu, name, pending_timeout_s=0.5)
        assert isinstance(err, JobPending)
        assert f"pod {name}-node-0-1-bbbbb: Unschedulable: 0/4 nodes are available" in str(err)
        assert "not all 2 nodes running" in str(err)
        assert emu.get("trainjobs", NS, name) is None  # deleted: the scheduled node's GPUs are free
        assert emu.count("delete", "trainjobs") == 1


def test_nodes_that_all_start_are_never_timed_out():
    name = job_name(RUN, "sft")
    sel = {"jobset.sigs.k8s.io/jobset-name": name}
    done = {"conditions": [{"type": "Complete", "status": "True", "reason": "JobSetCompleted", "message": "ok",
                            "lastTransitionTime": "2026-11-28T09:00:00Z"}]}  # fmt: skip
    with Emulator() as emu:
        emu.register_crd(crd())
        for i in range(2):
            emu.add_pod(NS, f"{name}-node-0-{i}-x", sel, phase="Running")
        # Completes well after the pending timeout: the check stopped once both nodes ran.
        threading.Timer(1.0, lambda: emu.set_status("trainjobs", NS, name, done)).start()
        err, log = _run_pending(emu, name, pending_timeout_s=0.3)
        assert err is None, err
        assert any(line.endswith("deleted after completion") for line in log)


def test_launch_settings_are_configurable_per_cluster():
    """One config field per setting, each with a description (so they show in the verb's --help)."""
    fields = LaunchConfig.model_fields
    for key in ("fabric_resources", "ipc_lock", "node_env", "queue_name", "gang", "pending_timeout_s",
                "cluster_domain"):  # fmt: skip
        assert fields[key].description, key
    assert LaunchConfig().pending_timeout_s > 0  # on by default
    with pytest.raises(ValueError):
        LaunchConfig(pending_timeout_s=-1)
