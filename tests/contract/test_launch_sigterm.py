"""SIGTERM in a multi-node step (paravt_core/launch/trainjob.py), against the API emulator
(tests/support/k8s_emulator.py) with the real ``kubernetes`` client.

The rules followed (Argo v4.0.5, the version KFP 2.17.0 pins; KFP 2.15.0 pins Argo v3.7.3, same rules):
- Argo stops a step (a terminated run: KFP 2.17.0 sets the Workflow's activeDeadlineSeconds to 0,
  backend/src/apiserver/resource/resource_manager.go TerminateWorkflow; or a deadline) by signalling its
  containers and leaves the pod object alone (workflow/controller/exec_control.go, pod/queue.go
  terminateContainers); ``processNodeRetries`` (workflow/controller/operator.go) reruns nothing while the
  Workflow shuts down or is past its deadline.
- The emissary, the container's PID 1, passes the signal to the command's process group
  (cmd/argoexec/commands/emissary.go; workflow/executor/osspecific Kill, Setpgid), so KFP's launcher dies
  at once (no handler); its ``Wait`` reaps with ``Wait4(-1, WNOHANG)`` and sleeps 1 s between tries, then
  the emissary exits and the kernel kills what is left in the PID namespace: the step has until that
  poll to send its DELETE.
- ``processNodeRetries`` reruns a node by its phase: ``Always`` Failed and Error, ``OnFailure`` Failed,
  ``OnError`` Error; ``RetryPolicyActual`` (pkg/apis/workflow/v1alpha1/workflow_types.go) is ``OnFailure``
  for a retryStrategy without a policy (what KFP's compiler writes; KFP 2.17.0's manifests make it
  ``OnError`` through ``workflowDefaults``, KFP 2.15.0's have none); no more reruns once the retry node
  has more children than ``limit``.
- A pod the kubelet terminates keeps its object, phase Failed with a message: ``inferFailedReason`` makes
  the node Failed. A deleted pod's node is Error ("pod deleted", ``podReconciliation``) when the
  controller no longer finds the pod, Failed when it reads the pod's last status first (sure with the
  ``ARGO_POD_STATUS_CAPTURE_FINALIZER`` finalizer, docs/environment-variables.md).
- Argo gives each init container the step's template with its merged retryStrategy (workflowpod.go,
  ARGO_TEMPLATE; operator.go mergedTemplateDefaultsInto) and names attempt n "<node>(n)" (executeTemplate,
  the pod's ``workflows.argoproj.io/node-name`` annotation); it makes the Workflow every pod's controller
  (workflowpod.go, NewControllerRef).
- The cluster marks a pod it removes before the SIGTERM: ``deletionTimestamp`` and ``DisruptionTarget``
  (Kubernetes >= 1.26; reason ``EvictionByEvictionAPI`` for a drain, ``TerminationByKubelet`` for the
  kubelet's own kills, with phase Failed and the eviction message).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from paravt_core.launch.trainjob import (
    ArgoRetry,
    NodeSpec,
    argo_retry,
    job_name,
    keep_job,
    launch_stage,
    sigterm_cause,
    workflow_owner,
)
from tests.support.k8s_emulator import Emulator
from tests.support.paths import ROOT
from tests.support.trainjob_support import _complete, _controller, _kubeconfig, crd

NS = "team-a"
RUN = "9d3e7c1a-5b2f-4e0a-8c6d-2a1b3c4d5e6f"
STEP_POD = "paravt-train-abcde-system-container-impl-123"
WORKFLOW = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "paravt-train-abcde",
            "uid": "0d6f3f7e-1111-2222-3333-444455556666", "controller": True, "blockOwnerDeletion": True}  # fmt: skip
NODE = "paravt-train-abcde.root.sft.executor"  # the retry node of KFP's executor template
DRAIN = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
         "message": "Eviction API: evicting"}  # fmt: skip
PRESSURE = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 42Mi."
KUBELET = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "TerminationByKubelet",
    "message": PRESSURE,
}


def step_pod(retry: dict | None = None, attempt: int = 0, **extra_meta: object) -> dict:
    """The step's pod as Argo makes it: owned by the run's Workflow, the template with its merged
    retryStrategy (``retry``; None: no retryStrategy) in the init container's env, attempt ``attempt``."""
    template = {"name": "system-container-impl", "container": {"name": "main", "image": "x"}}
    if retry is not None:
        template["retryStrategy"] = retry
    meta = {"name": STEP_POD, "namespace": NS, "labels": {}, "ownerReferences": [WORKFLOW],
            "annotations": {"workflows.argoproj.io/node-name": f"{NODE}({attempt})"}, **extra_meta}  # fmt: skip
    init = {
        "name": "init",
        "image": "argoexec",
        "env": [{"name": "ARGO_TEMPLATE", "value": json.dumps(template)}],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"initContainers": [init], "containers": [{"name": "main", "image": "x"}]},
            "status": {"phase": "Running"}}  # fmt: skip


# The merged retryStrategy of the step under each install (limit and backoff: the task's own, set_retries).
TASK = {"limit": "3", "backoff": {"duration": "60", "factor": "2"}}
POLICIES = {
    "Always": TASK | {"retryPolicy": "Always"},  # the option in manifests/options/argo-retry-always
    "OnError": TASK | {"retryPolicy": "OnError"},  # KFP 2.17.0 as shipped (workflowDefaults)
    "KFP 2.15.0": TASK,  # no workflowDefaults: no policy, Argo's RetryPolicyActual says OnFailure
}
# The option as shipped: its templateDefaults retryStrategy (Always, and an expression that keeps KFP's DAG
# templates from being rerun) under the task's own limit and backoff (mergedTemplateDefaultsInto).
OPTION = ROOT / "manifests/options/argo-retry-always/workflow-controller-configmap-patch.yaml"
_DEFAULTS = yaml.safe_load(yaml.safe_load(OPTION.read_text())["data"]["workflowDefaults"])
POLICIES["Always option"] = _DEFAULTS["spec"]["templateDefaults"]["retryStrategy"] | TASK


def marked(how: str, pod: dict) -> dict:
    """``pod`` as the cluster leaves it just before the SIGTERM of ``how``."""
    pod = json.loads(json.dumps(pod))
    if how == "drain":  # kubectl drain: an eviction, which deletes the pod
        pod["metadata"]["deletionTimestamp"] = "2026-11-28T10:00:00Z"
        pod["status"]["conditions"] = [DRAIN]
    elif how == "kubelet":  # node-pressure eviction by the kubelet: the object stays, Failed
        pod["status"] = {"phase": "Failed", "reason": "Evicted", "message": PRESSURE, "conditions": [KUBELET]}
    return pod


# Worked out by hand from the rules above: the job is kept only where Argo reruns the step whatever phase
# its node gets. drain: Error or Failed; kubelet: Failed; terminate: never rerun.
KEEP = {
    ("Always", "drain"): True,
    ("Always", "kubelet"): True,
    ("Always", "terminate"): False,
    ("Always option", "drain"): True,  # its expression holds for every failed or errored pod node
    ("Always option", "kubelet"): True,
    ("Always option", "terminate"): False,
    ("OnError", "drain"): False,  # Argo may read the deleted pod as Failed, which OnError does not rerun
    ("OnError", "kubelet"): False,  # Failed: not rerun under KFP 2.17's default
    ("OnError", "terminate"): False,
    ("KFP 2.15.0", "drain"): False,  # OnFailure: an Error node is not rerun
    ("KFP 2.15.0", "kubelet"): True,
    ("KFP 2.15.0", "terminate"): False,
}


def _running(emu: Emulator, name: str):
    return lambda: emu.set_status(
        "trainjobs", NS, name, {"jobsStatus": [{"name": "node", "active": 2, "ready": 2}]}
    )


@functools.cache
def _crd() -> dict:
    return crd()


def _launch(emu: Emulator, log: list[str]) -> dict:
    return launch_stage("sft", "output: s3://b/x\n", run_id=RUN, nodes=2, gpus_per_node=8, api="trainjob",
                        spec=NodeSpec(image="registry/paravt-sft:1"), namespace=NS, poll_s=0.05,
                        client=emu.client(), log=log.append, timeout_s=30)  # fmt: skip


def _seen(log: list[str], text: str, timeout: float = 10.0) -> None:
    """Wait until a line of ``log`` holds ``text`` (the step's watch has delivered a change)."""
    end = time.monotonic() + timeout
    while not any(text in line for line in log):
        assert time.monotonic() < end, f"never logged: {text!r}"
        time.sleep(0.01)


@pytest.mark.parametrize(("policy", "how"), sorted(KEEP))
def test_sigterm_keeps_the_job_only_where_argo_reruns_the_step(policy, how, monkeypatch):
    """The step runs; the cluster marks its pod (seen through the step's watch, no read at the signal);
    SIGTERM: the job is kept or deleted as ``KEEP`` says, the step exits 143, and its own pod was read
    once, when it started."""
    name = job_name(RUN, "sft")
    monkeypatch.setenv("KFP_POD_NAME", STEP_POD)
    before = signal.getsignal(signal.SIGTERM)
    log: list[str] = []
    with Emulator() as emu:
        emu.register_crd(_crd())
        emu.put_pod(step_pod(POLICIES[policy]))

        def mark() -> None:
            if how != "terminate":
                emu.put_pod(marked(how, step_pod(POLICIES[policy])))
                _seen(log, f"pod {STEP_POD}: ")

        _controller(emu, name, [_running(emu, name), mark, lambda: os.kill(os.getpid(), signal.SIGTERM)])
        with pytest.raises(SystemExit) as exited:
            _launch(emu, log)
        assert exited.value.code == 128 + signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) is before
        kept = emu.get("trainjobs", NS, name) is not None
        assert kept == KEEP[(policy, how)], log
        assert emu.count("delete", "trainjobs") == (0 if kept else 1)
        assert emu.count("get", "pods") == 1 and emu.count("watch", "pods") >= 1
        said = "the job keeps running and the step's rerun re-attaches" if kept else "deleted the job"
        assert any(line.startswith(f"TrainJob {name}: SIGTERM (") and said in line for line in log), log


def test_a_kept_job_is_reattached_by_the_rerun(monkeypatch):
    """Under ``Always`` a drained step keeps its job; Argo's rerun (a new pod, attempt 1) re-attaches to it
    (no second create) and sees it complete."""
    name = job_name(RUN, "sft")
    monkeypatch.setenv("KFP_POD_NAME", STEP_POD)
    log: list[str] = []
    with Emulator() as emu:
        emu.register_crd(_crd())
        emu.put_pod(step_pod(POLICIES["Always"]))

        def drain() -> None:
            emu.put_pod(marked("drain", step_pod(POLICIES["Always"])))
            _seen(log, "a SIGTERM now keeps the job")

        _controller(emu, name, [_running(emu, name), drain, lambda: os.kill(os.getpid(), signal.SIGTERM)])
        with pytest.raises(SystemExit):
            _launch(emu, log)
        assert emu.get("trainjobs", NS, name) is not None

        emu.put_pod(step_pod(POLICIES["Always"], attempt=1))  # the rerun's pod
        ctl = _controller(emu, name, [lambda: _complete(emu, NS, name)])
        _launch(emu, log)
        ctl.join(5)
        assert emu.count("create", "trainjobs") == 1
        assert any("re-attaching to the job of an earlier attempt" in line for line in log)
    # The own-pod read is the runner's (get pods); its watch the launcher Role's (list/watch pods).
    docs = [d for d in yaml.safe_load_all((ROOT / "manifests/base/rbac.yaml").read_text()) if d]
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Role"}
    runner, launcher = roles["paravt-pipeline-runner"], roles["paravt-trainjob-launcher"]
    assert any(r["resources"] == ["pods"] and "get" in r["verbs"] for r in runner["rules"])
    assert any(r["resources"] == ["pods"] and "watch" in r["verbs"] for r in launcher["rules"])


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
    """KFP's launcher stand-in (tests/support/launcher_standin.py) pipes the step's output and dies on SIGTERM
    before the step handles its own: the step's stdout is then a closed pipe. The job is deleted anyway
    (before anything is printed), the step exits 143, and the job it created is owned by the run's
    Workflow, so the garbage collector removes it even when the step is killed before its DELETE."""
    name = job_name(RUN, "sft")
    with Emulator() as emu, _subreaper():
        emu.register_crd(_crd())
        emu.put_pod(step_pod(POLICIES["OnError"]))
        kubeconfig = _kubeconfig(emu, tmp_path / "kubeconfig")
        pidfile = tmp_path / "child.pid"
        env = dict(os.environ, PYTHONUNBUFFERED="1", KFP_POD_NAME=STEP_POD, PYTHONPATH=str(ROOT))
        env.pop("KUBERNETES_SERVICE_HOST", None)
        _controller(emu, name, [_running(emu, name)])
        standin = subprocess.Popen(
            [sys.executable, str(ROOT / "tests/support/launcher_standin.py"), str(pidfile), "--",
             sys.executable, "-m", "tests.support.sigterm_step", str(kubeconfig), NS, RUN],
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


@functools.cache
def _pid_namespaces() -> bool:
    """Whether this machine lets us make a PID namespace (root, or user namespaces allowed)."""
    if shutil.which("unshare") is None:
        return False
    probe = [
        "unshare",
        "--pid",
        "--fork",
        "--mount-proc",
        sys.executable,
        "-c",
        "import os; assert os.getpid() == 1",
    ]
    return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0


def _child_of(pid: int) -> int:
    """The one process whose parent is ``pid`` (unshare's fork: the namespace's PID 1, seen from here)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    return int(entry.name)
    raise AssertionError(f"no child of {pid}")


LATENCY_S = 0.1  # per API request: the old GET before the DELETE alone took this long
TRIALS = 8


class Trial:
    """One step in its own PID namespace: the emissary stand-in as PID 1, the launcher stand-in, the step
    (``tests/support/sigterm_step.py``: the real ``launch_stage``), an emulator of its own with ``LATENCY_S``."""

    def __init__(self, stack: contextlib.ExitStack, where: Path, before_poll_s: float) -> None:
        self.before_poll_s = before_poll_s  # how long before an emissary poll the SIGTERM comes
        self.name = job_name(RUN, "sft")
        self.emu = stack.enter_context(Emulator())
        self.emu.register_crd(_crd())
        self.emu.put_pod(step_pod(POLICIES["Always"]))  # even Always never reruns a terminated run
        threading.Thread(target=self._controller, daemon=True).start()
        where.mkdir()
        self.tickfile = where / "tick"
        env = dict(os.environ, PYTHONUNBUFFERED="1", KFP_POD_NAME=STEP_POD, PYTHONPATH=str(ROOT))
        env.pop("KUBERNETES_SERVICE_HOST", None)
        self.proc = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc",
             sys.executable, str(ROOT / "tests/support/emissary_standin.py"), str(self.tickfile), "--",
             sys.executable, str(ROOT / "tests/support/launcher_standin.py"), str(where / "child.pid"), "--",
             sys.executable, "-m", "tests.support.sigterm_step", str(_kubeconfig(self.emu, where / "kubeconfig")), NS,
             RUN, "1.0"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        stack.callback(self.proc.kill)
        self.lines: list[str] = []
        self.running = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _controller(self) -> None:
        """The Trainer's part: the job runs once created (many steps start at once: no short wait)."""
        if self.emu.created.wait(120):
            _running(self.emu, self.name)()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:  # read to the end: the pipe never fills
            self.lines.append(raw.decode(errors="replace"))
            if f"TrainJob {self.name}: Running" in self.lines[-1]:
                self.running.set()

    def next_signal(self, after: float) -> float:
        """The first time after ``after`` that is ``before_poll_s`` before a poll of the emissary."""
        start = float(self.tickfile.read_text())
        polls = max(0, int(after - start + self.before_poll_s) + 1)
        return start + polls - self.before_poll_s


def test_terminate_deletes_the_job_before_the_emissary_ends_the_container(tmp_path):
    """A terminated run's SIGTERM, ``before_poll_s`` before the emissary's next poll, for values spread over
    the whole second: the job is deleted in every trial, because its DELETE is the first request after the
    signal (the step's pod was read once at the start and is watched since). Reading the pod at the signal
    first cost ``LATENCY_S`` and lost the trials signalled less than that before a poll."""
    if not _pid_namespaces():
        pytest.skip("no PID namespaces here (unshare --pid needs root or user namespaces)")
    spread = [0.04 + 0.92 * i / (TRIALS - 1) for i in range(TRIALS)]
    with contextlib.ExitStack() as stack:
        trials = [Trial(stack, tmp_path / str(i), s) for i, s in enumerate(spread)]
        for t in trials:
            assert t.running.wait(120), "".join(t.lines)
            t.emu.latency_s = LATENCY_S  # from now on: the start is not what is measured
        # One SIGTERM at a time, at least 0.1 s apart: the earliest next signal of those left goes first.
        left, last = list(trials), time.monotonic()
        while left:
            when, t = min(((t.next_signal(last + 0.1), t) for t in left), key=lambda x: x[0])
            time.sleep(max(0.0, when - time.monotonic()))
            os.kill(_child_of(t.proc.pid), signal.SIGTERM)  # to PID 1, as kubelet's runtime does
            left.remove(t)
            last = when
        for t in trials:
            assert t.proc.wait(10) == 128 + signal.SIGTERM, "".join(t.lines)  # the launcher's status
        end = time.monotonic() + 3 * LATENCY_S + 2.0  # a DELETE received is applied after its latency
        while any(t.emu.get("trainjobs", NS, t.name) for t in trials) and time.monotonic() < end:
            time.sleep(0.05)
        kept = [round(t.before_poll_s, 3) for t in trials if t.emu.get("trainjobs", NS, t.name) is not None]
        assert kept == [], f"jobs left running, SIGTERM that long (s) before the poll: {kept}"
        for t in trials:  # the decision was made on the pod read at the start
            assert t.emu.count("get", "pods") == 1 and t.emu.count("delete", "trainjobs") == 1


def _pod(
    deleted: bool = False, conditions: tuple = (), owners: tuple = (), phase: str = "Running"
) -> k8s.V1Pod:
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(
            name="p",
            deletion_timestamp="2026-11-28T10:00:00Z" if deleted else None,
            owner_references=list(owners),
        ),
        status=k8s.V1PodStatus(
            phase=phase, conditions=[k8s.V1PodCondition(type=t, status=s, reason=r) for t, s, r in conditions]
        ),
    )


def test_the_sigterm_causes_by_hand():
    """Which removal a pod's state says, case by case."""
    assert sigterm_cause(_pod()) == "stop"  # Argo's terminate or a deadline: pod left alone
    assert sigterm_cause(None) == "stop"  # pod unknown
    assert sigterm_cause(_pod(deleted=True)) == "deleted"
    assert (
        sigterm_cause(_pod(conditions=[("DisruptionTarget", "True", "EvictionByEvictionAPI")])) == "deleted"
    )
    assert (
        sigterm_cause(_pod(conditions=[("DisruptionTarget", "True", "PreemptionByScheduler")])) == "deleted"
    )
    assert (
        sigterm_cause(_pod(conditions=[("DisruptionTarget", "True", "TerminationByKubelet")])) == "terminated"
    )
    assert sigterm_cause(_pod(phase="Failed")) == "terminated"  # e.g. past the pod's activeDeadlineSeconds
    assert (
        sigterm_cause(_pod(conditions=[("DisruptionTarget", "False", None), ("Ready", "True", None)]))
        == "stop"
    )
    wf = k8s.V1OwnerReference(api_version="argoproj.io/v1alpha1", kind="Workflow", name="w", uid="u")
    other = k8s.V1OwnerReference(api_version="v1", kind="Node", name="n", uid="v")
    assert workflow_owner(_pod(owners=[other, wf])) == [
        {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "w", "uid": "u"}
    ]
    assert workflow_owner(_pod(owners=[other])) == [] and workflow_owner(None) == []


def _client_pod(pod: dict) -> k8s.V1Pod:
    """``pod`` as the client deserializes it from the API server's JSON."""

    class Response:
        data = json.dumps(pod)

    return k8s.ApiClient().deserialize(Response(), "V1Pod")


def test_the_retry_rule_read_off_the_pod_by_hand():
    """Policy and retries left from the pod's ARGO_TEMPLATE and node name, against Argo's rules."""
    assert argo_retry(_client_pod(step_pod(POLICIES["Always"]))) == ArgoRetry("Always", 3)
    assert argo_retry(_client_pod(step_pod(POLICIES["OnError"], attempt=2))) == ArgoRetry("OnError", 1)
    assert argo_retry(_client_pod(step_pod(POLICIES["KFP 2.15.0"]))) == ArgoRetry("OnFailure", 3)
    assert argo_retry(_client_pod(step_pod(POLICIES["Always"], attempt=3))).left == 0  # limit 3 used up
    assert argo_retry(_client_pod(step_pod({"retryPolicy": "Always"}))).left > 10**6  # no limit
    assert argo_retry(_client_pod(step_pod(None))) == ArgoRetry()  # no retryStrategy: never rerun
    assert argo_retry(_client_pod(step_pod(TASK | {"expression": "lastRetry.exitCode == 1"}))) == ArgoRetry()
    # The option's expression asks nothing of a step (true for every pod node Argo fails or errors); with
    # no retryPolicy it is Always, as Argo's RetryPolicyActual says for a retryStrategy with an expression.
    assert argo_retry(_client_pod(step_pod(POLICIES["Always option"]))) == ArgoRetry("Always", 3)
    only = {k: v for k, v in POLICIES["Always option"].items() if k != "retryPolicy"}
    assert argo_retry(_client_pod(step_pod(only, attempt=1))) == ArgoRetry("Always", 2)
    offloaded = step_pod(POLICIES["Always"])
    offloaded["spec"]["initContainers"][0]["env"][0]["value"] = "offloaded"  # over 128 KiB: in a ConfigMap
    assert argo_retry(_client_pod(offloaded)) == ArgoRetry() and argo_retry(None) == ArgoRetry()
    no_attempt = step_pod(POLICIES["Always"])
    no_attempt["metadata"]["annotations"] = {}
    assert argo_retry(_client_pod(no_attempt)).left == 0
    # The decision: the last attempt keeps nothing; a stop never; Always keeps a drained step's job.
    drained = _client_pod(marked("drain", step_pod(POLICIES["Always"])))
    assert keep_job(drained, ArgoRetry("Always", 1))[0] and not keep_job(drained, ArgoRetry("Always", 0))[0]
    assert not keep_job(_client_pod(step_pod(POLICIES["Always"])), ArgoRetry("Always", 3))[0]
    assert (
        not keep_job(drained, ArgoRetry("OnTransientError", 3))[0] and not keep_job(drained, ArgoRetry())[0]
    )
