"""The job reaper (paravt_core/launch/reaper.py) against the API emulator (tests/support/k8s_emulator.py), with the
real ``kubernetes`` client and a real Workflow object: Argo v3.7.3's (the Argo of KFP 2.15.0)
workflow/controller/testdata/dag-exhausted-retries-xfail.yaml, trimmed (tests/fixtures/k8s/SOURCE.md). In it
the Workflow is still ``Running`` while the retry node ``retry-with-dags.sub-dag1.fail`` has ended
``Failed`` with "No more retries left" after its attempts ``fail(0)`` and ``fail(1)``.

The jobs are left behind by the real ``launch_stage``: a multi-node step whose follow ends without its
DELETE (here the step's timeout; in a cluster a SIGKILL or a lost node) leaves the job it created, owned by
the step pod's Workflow and naming the step's Workflow node.

Rules followed (quoted in the reaper's docstring): Argo v3.7.3 and v4.0.5 pkg/apis/workflow/v1alpha1/
workflow_phase.go, ``WorkflowPhase.Completed``: Succeeded, Failed, Error; workflow_types.go,
``NodePhase.Fulfilled``: Succeeded, Failed, Error, Skipped, Omitted; workflow/controller/operator.go,
``processNodeRetries``: a retry node takes its last attempt's phase only once no further attempt follows,
and keeps its own phase ("Backoff for ...") while a retry waits; ``executeTemplate`` names attempt n
"<node>(n)"; workflow/common/common.go: pods carry ``workflows.argoproj.io/workflow`` (label) and
``workflows.argoproj.io/node-name`` (annotation). KFP 2.15.0's Argo ConfigMap has no ``workflowDefaults``
(tests/fixtures/k8s/argo-workflow-controller-configmap.kfp-2.15.0.yaml): no Workflow TTL.
"""

from __future__ import annotations

import copy
import functools
import subprocess
import sys

import pytest
import yaml

from paravt_core.launch.reaper import Decision, Reaper
from paravt_core.launch.trainjob import ARGO_NODE_ANNOTATION, NodeSpec, job_name, labels, launch_stage
from tests.support.k8s_emulator import Emulator
from tests.support.paths import ROOT
from tests.support.trainjob_support import crd

FIXTURES = ROOT / "tests/fixtures/k8s"
NS = "team-a"
WF_UID = "5a1c0e3b-7d2f-4c61-9e0a-3b4c5d6e7f80"
NODE = "retry-with-dags.sub-dag1.fail"  # the retry node of the fixture
STEP_POD = "retry-with-dags-fail-2549694399"


@functools.cache
def _crd() -> dict:
    return crd()


def workflow(phase: str | None = None) -> dict:
    """The fixture Workflow in ``NS`` with a uid (the API server's), its status phase ``phase`` if given."""
    wf = yaml.safe_load((FIXTURES / "argo-workflow-dag-exhausted-retries.v3.7.3.trimmed.yaml").read_text())
    wf["metadata"].update(namespace=NS, uid=WF_UID)
    if phase is not None:
        wf["status"]["phase"] = phase
    return wf


def in_backoff(wf: dict) -> dict:
    """``wf`` one attempt earlier: fail(0) Failed and the retry node waiting out its backoff, as
    ``processNodeRetries`` leaves it (its own phase, message "Backoff for ..."), fail(1) not yet made."""
    wf = copy.deepcopy(wf)
    nodes = wf["status"]["nodes"]
    (retry_id,) = [i for i, n in nodes.items() if n["name"] == NODE]
    (second,) = [i for i, n in nodes.items() if n["name"] == NODE + "(1)"]
    del nodes[second]
    nodes[retry_id]["children"] = [c for c in nodes[retry_id]["children"] if c != second]
    nodes[retry_id].update(phase="Running", message="Backoff for 1 minute")
    nodes[retry_id].pop("finishedAt", None)
    return wf


def pod(attempt: int, phase: str) -> dict:
    """A step pod of the fixture's retry node as Argo makes it: owned by the Workflow, its label and node
    name annotation (attempt ``attempt``)."""
    owner = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "retry-with-dags", "uid": WF_UID,
             "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    meta = {"name": f"{STEP_POD}-{attempt}", "namespace": NS, "ownerReferences": [owner],
            "labels": {"workflows.argoproj.io/workflow": "retry-with-dags"},
            "annotations": {"workflows.argoproj.io/node-name": f"{NODE}({attempt})"}}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "main", "image": "x"}]}, "status": {"phase": phase}}  # fmt: skip


def leave_job(emu: Emulator, monkeypatch, run: str, stage: str = "sft", api: str = "trainjob") -> str:
    """Run the real multi-node step in attempt 1's pod until its timeout: it creates the job and ends
    without deleting it (what a killed step leaves). Returns the job's name."""
    emu.put_pod(pod(1, "Running"))
    monkeypatch.setenv("KFP_POD_NAME", f"{STEP_POD}-1")
    with pytest.raises(TimeoutError):
        launch_stage(stage, "output: s3://b/x\n", run_id=run, nodes=2, gpus_per_node=8, api=api,
                     spec=NodeSpec(image="registry/paravt-sft:1"), namespace=NS, poll_s=0.05,
                     client=emu.client(), log=lambda line: None, timeout_s=0.2)  # fmt: skip
    return job_name(run, stage)


def reap(emu: Emulator, *, dry_run: bool = False) -> tuple[list, list[str]]:
    log: list[str] = []
    return Reaper(emu.client(), NS, dry_run=dry_run, log=log.append).run(), log


def test_the_left_job_names_its_workflow_and_node(monkeypatch):
    """The job of a step in attempt 1 is owned by the step pod's Workflow and names the retry node (the pod's
    node name without "(1)"): what the reaper reads."""
    with Emulator() as emu:
        emu.register_crd(_crd())
        name = leave_job(emu, monkeypatch, "run-a")
        meta = emu.get("trainjobs", NS, name)["metadata"]
    assert meta["annotations"] == {ARGO_NODE_ANNOTATION: NODE}
    assert [(r["kind"], r["name"], r["uid"]) for r in meta["ownerReferences"]] == [
        ("Workflow", "retry-with-dags", WF_UID)
    ]


# (Workflow as read, step pod phases, deleted?) worked out from Argo's rules in the module docstring.
CASES = {
    "running workflow, node out of retries, pods done": (workflow(), ("Failed", "Failed"), True),
    "running workflow, retry waits out its backoff": (in_backoff(workflow()), ("Failed",), False),
    "running workflow, node out of retries, a pod still running": (workflow(), ("Failed", "Running"), False),
    "workflow Failed": (workflow("Failed"), ("Failed", "Failed"), True),
    "workflow Succeeded": (workflow("Succeeded"), ("Succeeded",), True),
    "workflow Error": (workflow("Error"), ("Failed",), True),
    "workflow Pending, node unknown": (workflow("Pending"), (), False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_reaper_deletes_only_jobs_no_step_follows_again(case, monkeypatch):
    wf, phases, deleted = copy.deepcopy(CASES[case])
    if case == "workflow Pending, node unknown":
        wf["status"]["nodes"] = {}  # KFP made the Workflow; the controller has not reconciled it yet
    with Emulator() as emu:
        emu.register_crd(_crd())
        emu.put("workflows", NS, wf)
        name = leave_job(emu, monkeypatch, "run-a")
        for attempt, phase in enumerate(phases):
            emu.put_pod(pod(attempt, phase))
        done, log = reap(emu)
        assert (emu.get("trainjobs", NS, name) is None) == deleted, log
        assert [(kind, job, d.delete) for kind, job, d in done] == [("TrainJob", name, deleted)]
        assert len([line for line in log if line.startswith(f"TrainJob {NS}/{name}: ")]) == 1, log
        assert emu.count("delete", "trainjobs") == int(deleted)


def test_a_running_workflow_in_backoff_keeps_the_job_for_the_attempt_that_reattaches(monkeypatch):
    """The retry waits (node Running): kept; Argo then makes attempt 2, whose step re-attaches (no second
    create). Only once the retry node ends does the reaper delete it."""
    with Emulator() as emu:
        emu.register_crd(_crd())
        emu.put("workflows", NS, in_backoff(workflow()))
        name = leave_job(emu, monkeypatch, "run-a")
        emu.put_pod(pod(0, "Failed"))
        emu.put_pod(pod(1, "Failed"))
        ((_, _, decision),) = reap(emu)[0]
        assert decision == Decision(
            False, f"node {NODE} is Running: Argo may still run the step, which re-attaches"
        )
        emu.put("workflows", NS, workflow())  # attempt fail(1) ran and failed: no more retries left
        done, log = reap(emu)
        assert emu.get("trainjobs", NS, name) is None
        assert "No more retries left" in log[-1] and "still Running" in log[-1], log
        assert emu.count("create", "trainjobs") == 1


def nested(wf: dict, outer_phase: str) -> dict:
    """``wf`` where the DAG ``sub-dag1`` has a retryStrategy too (what workflowDefaults' templateDefaults do
    to every template: KFP 2.17, manifests/options/argo-retry-always): its retry node ``sub-dag1`` (phase
    ``outer_phase``) runs attempt ``sub-dag1(0)``, so every node under it is named "sub-dag1(0)....",
    the step's pods "retry-with-dags.sub-dag1(0).fail(n)"."""
    wf = copy.deepcopy(wf)
    nodes = wf["status"]["nodes"]
    for node in nodes.values():
        node["name"] = node["name"].replace(".sub-dag1.", ".sub-dag1(0).")
    (dag_id,) = [i for i, n in nodes.items() if n["name"] == "retry-with-dags.sub-dag1"]
    nodes[dag_id]["name"] = "retry-with-dags.sub-dag1(0)"
    retry = {"id": "retry-with-dags-42", "name": "retry-with-dags.sub-dag1", "displayName": "sub-dag1",
             "type": "Retry", "phase": outer_phase, "children": [dag_id], "boundaryID": "retry-with-dags"}  # fmt: skip
    if outer_phase == "Running":
        retry["message"] = "Backoff for 1 minute"
    else:
        retry["message"] = "No more retries left"
    nodes[retry["id"]] = retry
    for node in nodes.values():
        node["children"] = [
            retry["id"] if c == dag_id and node is not retry else c for c in node.get("children", [])
        ]
    return wf


@pytest.mark.parametrize(
    ("outer", "pod_phase", "deleted"),
    [("Running", "Failed", False), ("Failed", "Failed", True), ("Failed", "Running", False)],
)
def test_an_enclosing_retry_keeps_the_job_until_it_ends(outer, pod_phase, deleted, monkeypatch):
    """The step's own retries are over ("sub-dag1(0).fail" Failed, "No more retries left") but the enclosing
    DAG's retry node may still run the DAG again, whose step re-attaches: the job names that outermost node
    and is kept while it is Running; once it has ended too, deleted, unless a pod under it still runs."""
    with Emulator() as emu:
        emu.register_crd(_crd())
        emu.put("workflows", NS, nested(workflow(), outer))
        first = pod(1, "Running")
        first["metadata"]["annotations"]["workflows.argoproj.io/node-name"] = (
            "retry-with-dags.sub-dag1(0).fail(1)"
        )
        emu.pods.clear()
        emu.put_pod(first)
        monkeypatch.setenv("KFP_POD_NAME", first["metadata"]["name"])
        with pytest.raises(TimeoutError):
            launch_stage("sft", "output: s3://b/x\n", run_id="run-n", nodes=2, gpus_per_node=8, api="trainjob",
                         spec=NodeSpec(image="registry/paravt-sft:1"), namespace=NS, poll_s=0.05,
                         client=emu.client(), log=lambda line: None, timeout_s=0.2)  # fmt: skip
        name = job_name("run-n", "sft")
        assert emu.get("trainjobs", NS, name)["metadata"]["annotations"] == {
            ARGO_NODE_ANNOTATION: "retry-with-dags.sub-dag1"
        }
        first["status"]["phase"] = pod_phase
        emu.put_pod(first)
        done, log = reap(emu)
        assert (emu.get("trainjobs", NS, name) is None) == deleted, log


@pytest.mark.parametrize(
    ("node_name", "outermost"),
    [
        ("wf.root.sft.executor(1)", "wf.root.sft.executor"),  # KFP 2.15: only the executor retries
        ("wf.root.sft(0).executor(2)", "wf.root.sft"),  # the task's DAG retries too
        ("wf(0).root(1).sft(0).executor(0)", "wf"),  # every template, the entrypoint too
        ("wf.root.sft.executor", "wf.root.sft.executor"),  # no retryStrategy anywhere: the pod's node
        ("wf.root.for-loop-2(0:0).sft.executor(3)", "wf.root.for-loop-2(0:0).sft.executor"),  # a loop item
    ],
)
def test_the_outermost_node_that_may_rerun_the_step(node_name, outermost):
    """Argo names attempt n "<node>(n)" (operator.go, executeTemplate), a DAG task "<dag node>.<task>"
    (dag.go, taskNodeName) and a loop's item "<node>(i:value)" (operator.go, expansion): hand-worked."""
    from kubernetes import client as k8s

    from paravt_core.launch.trainjob import argo_node

    step = k8s.V1Pod(metadata=k8s.V1ObjectMeta(annotations={"workflows.argoproj.io/node-name": node_name}))
    assert argo_node(step) == outermost
    assert argo_node(None) == ""


def test_a_gone_or_replaced_workflow_deletes_the_job(monkeypatch):
    """The run's Workflow deleted (no Workflow of that name, or one with another uid): the job is deleted
    (the garbage collector would too, where it gets to it)."""
    with Emulator() as emu:
        emu.register_crd(_crd())
        other = workflow()
        other["metadata"]["uid"] = "another-uid"
        emu.put("workflows", NS, other)
        replaced = leave_job(emu, monkeypatch, "run-replaced")
        done, log = reap(emu)
        assert emu.get("trainjobs", NS, replaced) is None
        assert log == [f"TrainJob {NS}/{replaced}: deleted: its Workflow retry-with-dags is gone (a Workflow of "
                       "that name with another uid exists)"]  # fmt: skip
        emu.remove("workflows", NS, "retry-with-dags")
        gone = leave_job(emu, monkeypatch, "run-gone")
        done, log = reap(emu)
        assert emu.get("trainjobs", NS, gone) is None
        assert log == [f"TrainJob {NS}/{gone}: deleted: its Workflow retry-with-dags is gone"]


def test_another_tools_job_and_an_ownerless_job_are_left_alone(monkeypatch):
    """The listing asks the API server for our labels only, so a job without them is never read; a job of
    ours without a Workflow owner (made outside a pipeline step) is kept."""
    with Emulator() as emu:
        emu.register_crd(_crd())
        emu.put("workflows", NS, workflow("Failed"))
        ours = leave_job(emu, monkeypatch, "run-a")
        theirs = copy.deepcopy(emu.get("trainjobs", NS, ours))
        theirs["metadata"].update(
            name="someone-elses", uid="u2", labels={"app.kubernetes.io/managed-by": "other"}
        )
        emu.put("trainjobs", NS, theirs)
        ownerless = copy.deepcopy(theirs)
        ownerless["metadata"].update(name="paravt-rl-000000000000", uid="u3", labels=labels("run-b", "rl"))
        del ownerless["metadata"]["ownerReferences"]
        emu.put("trainjobs", NS, ownerless)
        done, log = reap(emu)
        assert emu.get("trainjobs", NS, ours) is None
        assert emu.get("trainjobs", NS, "someone-elses") is not None
        assert emu.get("trainjobs", NS, "paravt-rl-000000000000") is not None
        assert sorted((job, d.delete) for _, job, d in done) == [
            ("paravt-rl-000000000000", False),
            (ours, True),
        ]
        assert (
            "trainjobs",
            "app.kubernetes.io/managed-by=paravt,paravt.io/run,paravt.io/stage",
        ) in emu.selectors


def test_dry_run_decides_and_deletes_nothing(monkeypatch):
    with Emulator() as emu:
        emu.register_crd(_crd())
        emu.put("workflows", NS, workflow("Failed"))
        name = leave_job(emu, monkeypatch, "run-a")
        done, log = reap(emu, dry_run=True)
        assert emu.get("trainjobs", NS, name) is not None and emu.count("delete", "trainjobs") == 0
        assert log == [
            f"TrainJob {NS}/{name}: would delete (dry run): its Workflow retry-with-dags has finished (Failed): "
            "no step of it runs again"
        ]
        assert [d.delete for _, _, d in done] == [True]


def test_a_job_recreated_since_the_listing_is_not_deleted(monkeypatch):
    """The delete carries the listed job's uid: a new job of that name (a rerun's) answers 409 and stays."""
    with Emulator() as emu:
        emu.register_crd(_crd())
        name = leave_job(emu, monkeypatch, "run-a")
        listed = emu.get("trainjobs", NS, name)["metadata"]
        emu.objects[("trainjobs", NS, name)]["metadata"]["uid"] = "the-rerun's"
        reaper = Reaper(emu.client(), NS, log=lambda line: None)
        said = reaper._act("trainer.kubeflow.org", "v1alpha1", "trainjobs", listed, Decision(True, "test"))
        assert said.startswith("kept: replaced by a new job") and emu.get("trainjobs", NS, name) is not None


def test_a_kind_not_installed_is_skipped_and_pytorchjobs_are_reaped(monkeypatch):
    """Kubeflow 1.11.0 ships no training operator: listing PyTorchJobs answers 404, one line, and the
    TrainJobs are still reaped; where both exist, both are."""
    with Emulator() as emu:
        emu.register_crd(_crd())
        emu.put("workflows", NS, workflow("Failed"))
        emu.absent.add("pytorchjobs")
        name = leave_job(emu, monkeypatch, "run-a")
        done, log = reap(emu)
        assert "PyTorchJob: no such resource in this cluster (HTTP 404); none to reap" in log
        assert emu.get("trainjobs", NS, name) is None
        emu.absent.clear()
        pt = leave_job(emu, monkeypatch, "run-b", stage="rl", api="pytorchjob")
        done, log = reap(emu)
        assert emu.get("pytorchjobs", NS, pt) is None and [k for k, _, _ in done] == ["PyTorchJob"]


def test_the_reaper_role_grants_exactly_its_calls(monkeypatch):
    """manifests/base/job-reaper.yaml's Role against the calls one pass really makes."""
    with Emulator() as emu:
        emu.register_crd(_crd())
        emu.put("workflows", NS, workflow())
        name = leave_job(emu, monkeypatch, "run-a")
        pt = leave_job(emu, monkeypatch, "run-b", stage="rl", api="pytorchjob")
        emu.put_pod(pod(0, "Failed"))
        emu.put_pod(pod(1, "Failed"))
        start = len(emu.requests)
        reap(emu)
        assert emu.get("trainjobs", NS, name) is None and emu.get("pytorchjobs", NS, pt) is None
        called = set(emu.requests[start:])
    docs = [d for d in yaml.safe_load_all((ROOT / "manifests/base/job-reaper.yaml").read_text()) if d]
    (role,) = [d for d in docs if d["kind"] == "Role"]
    granted = {(verb, res) for rule in role["rules"] for res in rule["resources"] for verb in rule["verbs"]}
    assert called == granted == {
        ("list", "trainjobs"), ("delete", "trainjobs"), ("list", "pytorchjobs"), ("delete", "pytorchjobs"),
        ("get", "workflows"), ("list", "pods"),
    }  # fmt: skip


def test_the_module_runs_and_teaches_its_flags():
    out = subprocess.run([sys.executable, "-m", "paravt_core.launch.reaper", "--help"], capture_output=True,
                         text=True, check=True, cwd=ROOT).stdout  # fmt: skip
    assert "--dry-run" in out and "--namespace" in out
