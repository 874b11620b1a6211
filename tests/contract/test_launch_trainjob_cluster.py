"""The multi-node job's cluster settings (``launch`` section): fabric devices, IPC_LOCK and NCCL env,
Kueue's queue label, gang scheduling, Pod Security ``restricted`` contexts, and the pending timeout that
ends a step whose nodes never all start. Manifests are validated against the vendored CRD schemas
(Trainer v2.3.0, training-operator v1.9.0); the pending timeout runs against the API emulator."""

from __future__ import annotations

import re
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
from tests.support.k8s_emulator import Emulator
from tests.support.paths import ROOT
from tests.support.trainjob_support import CONFIG, NS, PYTORCHJOB_CRD, RUN, crd, spec

EFA = LaunchConfig(
    fabric_resources={"vpc.amazonaws.com/efa": 32},
    ipc_lock=True,
    node_env={
        "NCCL_NET": "Libfabric",
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1",
        "NCCL_SOCKET_IFNAME": "eth0",
    },
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


# a TrainJob's status once its JobSet completed
DONE = {"conditions": [{"type": "Complete", "status": "True", "reason": "JobSetCompleted", "message": "ok",
                        "lastTransitionTime": "2026-11-28T09:00:00Z"}]}  # fmt: skip


def test_nodes_that_all_start_are_never_timed_out():
    name = job_name(RUN, "sft")
    sel = {"jobset.sigs.k8s.io/jobset-name": name}
    with Emulator() as emu:
        emu.register_crd(crd())
        for i in range(2):
            emu.add_pod(NS, f"{name}-node-0-{i}-x", sel, phase="Running")
        # Completes well after the pending timeout: the check stopped once both nodes ran.
        threading.Timer(1.0, lambda: emu.set_status("trainjobs", NS, name, DONE)).start()
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


def _run_queued(
    emu: Emulator, name: str, **timeouts: float
) -> tuple[list[BaseException | None], list[str], threading.Thread]:
    """The step on a job Kueue holds: created with ``spec.suspend`` as Kueue's webhook leaves it."""
    log: list[str] = []
    out: list[BaseException | None] = []
    launcher = Launcher(emu.client(), NS, poll_s=0.05, log=log.append)
    m = trainjob_manifest(
        name, NS, "sft", spec(), nodes=2, gpus_per_node=8, config_yaml=CONFIG, job_labels={}
    )
    m["spec"]["suspend"] = True
    jsonschema.validate(m, _schema())

    def go() -> None:
        try:
            launcher.run(m, nodes=2, **timeouts)
            out.append(None)
        except BaseException as err:  # noqa: BLE001 - handed to the test
            out.append(err)

    thread = threading.Thread(target=go)
    thread.start()
    return out, log, thread


def test_a_job_queued_by_kueue_is_waited_for_not_timed_out_as_pending():
    """Kueue keeps a job it has not admitted suspended (Kueue v0.15.8, pkg/controller/jobframework/
    reconciler.go, ``job.Suspend()``; with ``manageJobsWithoutQueueName`` every job without a queue label,
    apis/config/v1beta1/configuration_types.go): no pods and no GPUs held, so it is not "pending". It was
    deleted after ``pending_timeout_s``, not retried; the pending clock now starts at its admission."""
    name = job_name(RUN, "sft")
    sel = {"jobset.sigs.k8s.io/jobset-name": name}
    with Emulator() as emu:
        emu.register_crd(crd())
        out, log, thread = _run_queued(emu, name, pending_timeout_s=0.3)
        thread.join(1.2)  # four pending timeouts in the queue
        assert not out and emu.get("trainjobs", NS, name) is not None
        admitted = emu.get("trainjobs", NS, name)
        admitted["spec"]["suspend"] = False  # Kueue admits it; both nodes start
        emu.put("trainjobs", NS, admitted)
        for i in range(2):
            emu.add_pod(NS, f"{name}-node-0-{i}-x", sel, phase="Running")
        thread.join(0.6)
        emu.set_status("trainjobs", NS, name, DONE)
        thread.join(10)
        assert out == [None], out
        assert any("Suspended (spec.suspend: waiting for admission)" in line for line in log)
        assert emu.count("delete", "trainjobs") == 1  # only the delete after completion


def test_a_job_left_in_the_queue_past_queue_timeout_is_deleted_with_the_reason():
    from paravt_core.launch.retry import retry_reason
    from paravt_core.launch.trainjob import JobQueued

    name = job_name(RUN, "sft")
    with Emulator() as emu:
        emu.register_crd(crd())
        out, _, thread = _run_queued(emu, name, pending_timeout_s=0.1, queue_timeout_s=0.5)
        thread.join(10)
        (err,) = out
        assert isinstance(err, JobQueued), err
        assert "still suspended (queued) 0.5s; deleted. spec.suspend: waiting for admission" in str(err)
        assert emu.get("trainjobs", NS, name) is None
        assert retry_reason(err) is None  # a queue that does not admit it: a cluster matter


def test_a_suspended_pytorchjob_reads_suspended_from_its_run_policy():
    """training-operator v1.9.0 suspends through ``runPolicy.suspend`` (pkg/apis/kubeflow.org/v1/common_types.go)."""
    from paravt_core.launch.trainjob import job_state

    assert job_state("pytorchjob", {"spec": {"runPolicy": {"suspend": True}}})[0] == "Suspended"
    assert job_state("pytorchjob", {"spec": {"runPolicy": {"suspend": False}}})[0] == "Created"
    assert job_state("trainjob", {"spec": {"suspend": True}})[0] == "Suspended"


@pytest.mark.parametrize(
    ("level", "refused"), [("baseline", True), ("restricted", True), ("privileged", False), (None, False)]
)
def test_ipc_lock_is_refused_before_the_job_where_the_namespace_pod_security_forbids_it(level, refused):
    """Pod Security ``baseline`` admits only the default capability set (pod-security-admission v0.33.0,
    policy/check_capabilities_baseline.go: AUDIT_WRITE, CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, MKNOD,
    NET_BIND_SERVICE, SETFCAP, SETGID, SETPCAP, SETUID, SYS_CHROOT), not IPC_LOCK; Kubeflow 1.11.0 labels
    every profile namespace ``pod-security.kubernetes.io/enforce: baseline`` (applications/profiles/pss/
    namespace-labels.yaml). The job was created and its pods refused: "no pod of the job exists" 30 min later."""
    from paravt_core.config_base import ConfigError
    from paravt_core.launch.trainjob import launch_stage

    labels_ = {"pod-security.kubernetes.io/enforce": level} if level else {}
    cond = {"type": "Succeeded", "status": "True", "reason": "x", "message": ""}
    name = job_name(RUN, "sft")
    with Emulator() as emu:
        emu.register_crd(crd(PYTORCHJOB_CRD))
        emu.namespaces[NS] = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": NS, "labels": labels_},
        }

        def controller() -> None:
            if emu.created.wait(10):
                emu.set_status("pytorchjobs", NS, name, {"conditions": [cond]})

        threading.Thread(target=controller, daemon=True).start()
        run = dict(run_id=RUN, nodes=2, gpus_per_node=8, api="pytorchjob", namespace=NS, poll_s=0.05,
                   client=emu.client(), log=[].append, spec=with_launch(spec(), LaunchConfig(ipc_lock=True)))  # fmt: skip
        if refused:
            with pytest.raises(ConfigError, match=rf"enforces Pod Security '{level}'.*adds? IPC_LOCK"):
                launch_stage("sft", CONFIG, **run)
            assert emu.count("create", "pytorchjobs") == 0
        else:
            launch_stage("sft", CONFIG, **run)
            assert emu.count("create", "pytorchjobs") == 1


def test_every_fabric_example_forces_its_nccl_network():
    """NCCL takes the first network plugin that initialises, the socket transport last, so a missing
    plugin or device silently means TCP; with ``NCCL_NET`` it initialises only the named one and otherwise
    fails ("Failed to initialize any NET plugin": NCCL v2.30.7, src/plugin/net.cc, ``ncclNetInit``).
    The names: ``IB`` (NCCL's verbs transport, src/transport/net_ib/common.cc) and ``Libfabric``
    (aws-ofi-nccl v1.21.1, src/nccl_ofi_interface_nvidia.cpp). The EFA example needs that plugin, which
    no shipped image has: the example says so."""

    import yaml

    root = ROOT
    readme = (root / "manifests/README.md").read_text()
    fabric = readme[readme.index("- **Fabric.**") : readme.index("- **Gang scheduling.**")]
    envs = {
        m[0]: yaml.safe_load(m[1])
        for m in re.findall(r"- (AWS EFA|InfiniBand)[^\n]*?[\s\S]*?`node_env: (\{[^`]*\})`", fabric)
    }  # noqa: E501
    assert set(envs) == {"AWS EFA", "InfiniBand"}
    assert envs["InfiniBand"]["NCCL_NET"] == "IB"
    assert envs["AWS EFA"]["NCCL_NET"] == "Libfabric" and envs["AWS EFA"]["FI_PROVIDER"] == "efa"
    images = "".join((root / f).read_text() for f in ("Dockerfile.sft", "Dockerfile.rl", "images/install.sh"))
    assert "aws-ofi-nccl" not in images and "libfabric" not in images.lower()
    efa = fabric[fabric.index("- AWS EFA") : fabric.index("- InfiniBand")]
    assert "Needs an image with aws-ofi-nccl and libfabric" in efa and "shipped images have neither" in efa


def test_a_fabric_without_nccl_net_is_refused_at_config_load(tmp_path):
    """The docs' rule, enforced: ``fabric_resources`` without ``node_env.NCCL_NET`` would let NCCL fall back
    to TCP sockets in silence (NCCL v2.30.7 src/plugin/net.cc, ``ncclNetInit``: every initialised plugin is
    tried, the internal "Socket" last, unless ``comm->config.netName``, set from ``NCCL_NET`` in
    src/init.cc, names one; then only that name, matched with strcasecmp, may initialise, and otherwise
    "Failed to initialize any NET plugin" / ncclInvalidUsage). The names: "IB" (src/transport/net_ib/
    common.cc) and, for EFA on NVIDIA GPUs, "Libfabric" (aws-ofi-nccl v1.21.1 src/nccl_ofi_interface_nvidia
    .cpp; "AWS Libfabric" is its Neuron interface). Both manifests/README.md examples still load."""

    import yaml

    from paravt_core.config import ConfigError, SftConfig, load_config

    def load(launch: dict):
        path = tmp_path / "sft.yaml"
        path.write_text(yaml.safe_dump({"launch": {"nodes": 2, **launch}}))
        return load_config(SftConfig, path).launch

    fabric = {"fabric_resources": {"rdma/ib": 4}, "ipc_lock": True}
    for env in ({}, {"NCCL_IB_HCA": "mlx5"}, {"NCCL_NET": " "}):
        with pytest.raises(ConfigError) as refused:
            load({**fabric, "node_env": env})
        (line,) = str(refused.value).splitlines()
        assert "launch.fabric_resources (rdma/ib) needs launch.node_env.NCCL_NET" in line
        assert "IB for InfiniBand" in line and "Libfabric for AWS EFA" in line
    assert load({**fabric, "node_env": {"NCCL_NET": "IB"}}).node_env == {"NCCL_NET": "IB"}
    assert load({"node_env": {}}).fabric_resources == {}  # no fabric: TCP is what was asked for

    readme = (ROOT / "manifests/README.md").read_text()
    section = readme[readme.index("- **Fabric.**") : readme.index("- **Gang scheduling.**")]
    examples = re.findall(r"`fabric_resources: (\{[^`]*\})`[\s\S]*?`node_env: (\{[^`]*\})`", section)
    assert len(examples) == 2
    for resources, env in examples:
        launch = load({"fabric_resources": yaml.safe_load(resources), "node_env": yaml.safe_load(env)})
        assert launch.node_env["NCCL_NET"] in ("IB", "Libfabric")


@pytest.mark.parametrize(
    ("domain", "ok"),
    [("cluster.local", True), ("corp.example.com", True), ("svc.cluster.local", False),
     (".cluster.local", False), ("cluster.local.", False), ("", False), ("Cluster.Local", False)],
)  # fmt: skip
def test_cluster_domain_is_the_domain_alone(domain, ok):
    """The rank-0 name is ``<pod>.<service>.<namespace>.svc.<domain>`` (Kubernetes DNS specification,
    docs: "Records for Services"; kubelet's --cluster-domain); a value with ``svc.`` or a bad label made a
    name no resolver answers, found only when the rollout server could not join the weight push."""
    from paravt_core.launch.trainjob import rank0_address

    if ok:
        address = rank0_address("trainjob", "j", "ns", LaunchConfig(cluster_domain=domain).cluster_domain)
        assert address == f"j-node-0-0.j.ns.svc.{domain}" and ".svc.svc." not in address
    else:
        with pytest.raises(ValueError, match="launch.cluster_domain"):
            LaunchConfig(cluster_domain=domain)
