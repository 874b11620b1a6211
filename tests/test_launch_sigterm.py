"""SIGTERM in a multi-node step (paravt_core/launch/trainjob.py), against the API emulator
(tests/k8s_emulator.py) with the real ``kubernetes`` client.

The rules followed:
- Argo v4.0.5 stops a step (a terminated run: KFP 2.17.0 sets the Workflow's activeDeadlineSeconds to 0,
  backend/src/apiserver/resource/resource_manager.go TerminateWorkflow; or the step's deadline) by
  signalling its containers, SIGTERM then SIGKILL after the grace period, and leaves the pod object alone
  (workflow/controller/exec_control.go, pod/queue.go terminateContainers); its emissary passes the signal
  to the step's process group, KFP's launcher included, which reads the step's stdout through a pipe and
  has no handler: it dies first.
- The cluster removing a pod marks it before the SIGTERM: ``deletionTimestamp`` (a delete, a drain's
  eviction) or the ``DisruptionTarget`` condition (Kubernetes >= 1.26: eviction, preemption, node
  pressure). Such a step is rerun (Argo retries an Error node under KFP's OnError default) and must find
  its job still running to re-attach.
- Argo makes the Workflow every pod's controller (workflowpod.go, NewControllerRef); KFP 2.17's manifests
  delete a finished Workflow after 3600 s (third-party/argo/base/workflow-controller-configmap-patch.yaml,
  ttlStrategy), and a retry keeps the same Workflow object (resource_manager.go RetryRun updates it).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from paravt_core.launch.trainjob import NodeSpec, job_name, launch_stage, sigterm_cause, workflow_owner
from tests.k8s_emulator import Emulator
from tests.test_launch_trainjob import _complete, _controller, _kubeconfig, crd

ROOT = Path(__file__).resolve().parents[1]
NS = "team-a"
RUN = "9d3e7c1a-5b2f-4e0a-8c6d-2a1b3c4d5e6f"
STEP_POD = "paravt-train-abcde-system-container-impl-123"
WORKFLOW = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "paravt-train-abcde",
            "uid": "0d6f3f7e-1111-2222-3333-444455556666", "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def step_pod(**extra_meta: object) -> dict:
    """The step's pod as Argo makes it: owned by the run's Workflow."""
    meta = {"name": STEP_POD, "namespace": NS, "labels": {}, "ownerReferences": [WORKFLOW], **extra_meta}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [{"name": "main", "image": "x"}]},
            "status": {"phase": "Running"}}  # fmt: skip


def _running(emu: Emulator, name: str):
    return lambda: emu.set_status(
        "trainjobs", NS, name, {"jobsStatus": [{"name": "node", "active": 2, "ready": 2}]}
    )


@contextlib.contextmanager
def _subreaper():
    """Orphans of this process's children come to it (PR_SET_CHILD_SUBREAPER), so the step's exit status
    can still be read once the launcher stand-in, its parent, has died."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)
    try:
        yield
    finally:
        libc.prctl(36, 0, 0, 0, 0)


def test_sigterm_through_a_piping_launcher_deletes_the_job_and_exits_143(tmp_path):
    """KFP's launcher stand-in (tests/launcher_standin.py) pipes the step's output and dies on SIGTERM
    before the step handles its own: the step's stdout is then a closed pipe. The job is deleted anyway
    (before anything is printed), the step exits 143, and the job it created is owned by the run's
    Workflow, so the garbage collector removes it even when the step is killed before its DELETE."""
    name = job_name(RUN, "sft")
    with Emulator() as emu, _subreaper():
        emu.register_crd(crd())
        emu.put_pod(step_pod())
        kubeconfig = _kubeconfig(emu, tmp_path / "kubeconfig")
        pidfile = tmp_path / "child.pid"
        env = dict(os.environ, PYTHONUNBUFFERED="1", KFP_POD_NAME=STEP_POD, PYTHONPATH=str(ROOT))
        env.pop("KUBERNETES_SERVICE_HOST", None)
        _controller(emu, name, [_running(emu, name)])
        standin = subprocess.Popen(
            [sys.executable, str(ROOT / "tests/launcher_standin.py"), str(pidfile), "--",
             sys.executable, "-m", "tests.sigterm_step", str(kubeconfig), NS, RUN],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        try:
            assert standin.stdout is not None
            relayed = []
            for line in standin.stdout:  # the step's own lines, through the launcher's pipe
                relayed.append(line.decode())
                if f"TrainJob {name}: Running" in relayed[-1]:
                    break
            job = emu.get("trainjobs", NS, name)
            assert job["metadata"]["ownerReferences"] == [
                {k: WORKFLOW[k] for k in ("apiVersion", "kind", "name", "uid")}
            ]
            child = int(pidfile.read_text())
            os.kill(standin.pid, signal.SIGTERM)  # the launcher goes first (no handler) ...
            assert standin.wait(10) == -signal.SIGTERM
            os.kill(child, signal.SIGTERM)  # ... then the step handles the same group signal
            _, status = os.waitpid(child, 0)
        finally:
            standin.kill()
        assert os.waitstatus_to_exitcode(status) == 128 + signal.SIGTERM
        assert emu.get("trainjobs", NS, name) is None  # the GPUs are free
        assert emu.count("delete", "trainjobs") == 1


@pytest.mark.parametrize("how", ["eviction", "deleted"])
def test_sigterm_of_a_pod_the_cluster_removes_keeps_the_job_and_the_rerun_reattaches(how, monkeypatch):
    """A drain's eviction (DisruptionTarget) or a deleted pod (deletionTimestamp): the step exits 143 but
    the job goes on; the rerun of the step re-attaches to it (no second create) and sees it complete."""
    name = job_name(RUN, "sft")
    monkeypatch.setenv("KFP_POD_NAME", STEP_POD)
    before = signal.getsignal(signal.SIGTERM)
    log: list[str] = []

    def launch() -> dict:
        return launch_stage("sft", "output: s3://b/x\n", run_id=RUN, nodes=2, gpus_per_node=8, api="trainjob",
                            spec=NodeSpec(image="registry/paravt-sft:1"), namespace=NS, poll_s=0.05,
                            client=emu.client(), log=log.append, timeout_s=30)  # fmt: skip

    with Emulator() as emu:
        emu.register_crd(crd())
        if how == "eviction":
            condition = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
            emu.put_pod(step_pod() | {"status": {"phase": "Running", "conditions": [condition]}})
        else:
            emu.put_pod(step_pod(deletionTimestamp="2026-11-28T10:00:00Z"))
        _controller(emu, name, [_running(emu, name), lambda: os.kill(os.getpid(), signal.SIGTERM)])
        with pytest.raises(SystemExit) as exited:
            launch()
        assert exited.value.code == 128 + signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) is before
        assert emu.get("trainjobs", NS, name) is not None and emu.count("delete", "trainjobs") == 0
        assert any("the job keeps running and the step's rerun re-attaches" in line for line in log)

        emu.put_pod(step_pod())  # the rerun's pod
        ctl = _controller(emu, name, [lambda: _complete(emu, NS, name)])
        launch()
        ctl.join(5)
        assert emu.count("create", "trainjobs") == 1
        assert any("re-attaching to the job of an earlier attempt" in line for line in log)
        # The own-pod reads are the runner's (manifests/base/rbac.yaml grants it get on pods), not the
        # launcher Role's, whose exact calls test_launch_trainjob checks.
        assert emu.count("get", "pods") == 3  # owner at each start, the cause at the SIGTERM
    docs = [d for d in yaml.safe_load_all((ROOT / "manifests/base/rbac.yaml").read_text()) if d]
    runner = next(
        d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "paravt-pipeline-runner"
    )
    assert any(r["resources"] == ["pods"] and "get" in r["verbs"] for r in runner["rules"])


def _pod(deleted: bool = False, conditions: tuple = (), owners: tuple = ()) -> k8s.V1Pod:
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(
            name="p",
            deletion_timestamp="2026-11-28T10:00:00Z" if deleted else None,
            owner_references=list(owners),
        ),
        status=k8s.V1PodStatus(conditions=[k8s.V1PodCondition(type=t, status=s) for t, s in conditions]),
    )


def test_the_sigterm_rule_by_hand():
    """The rule, case by case: only a pod the cluster is removing keeps its job."""
    assert sigterm_cause(_pod()) == "stop"  # Argo's terminate or the step's deadline: pod left alone
    assert sigterm_cause(None) == "stop"  # pod unreadable: a terminate is the usual cause
    assert sigterm_cause(_pod(deleted=True)) == "removed"
    assert sigterm_cause(_pod(conditions=[("DisruptionTarget", "True")])) == "removed"
    assert sigterm_cause(_pod(conditions=[("DisruptionTarget", "False"), ("Ready", "True")])) == "stop"
    wf = k8s.V1OwnerReference(api_version="argoproj.io/v1alpha1", kind="Workflow", name="w", uid="u")
    other = k8s.V1OwnerReference(api_version="v1", kind="Node", name="n", uid="v")
    assert workflow_owner(_pod(owners=[other, wf])) == [
        {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "w", "uid": "u"}
    ]
    assert workflow_owner(_pod(owners=[other])) == [] and workflow_owner(None) == []
