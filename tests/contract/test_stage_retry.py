"""A stage reruns itself in its pod after a crash a rerun can fix (paravt_core/launch/retry.py).

The backend rule that makes it necessary: KFP 2.17.0's manifests set Argo's
``workflowDefaults.templateDefaults.retryStrategy: {limit: 2, retryPolicy: OnError}``
(manifests/kustomize/third-party/argo/base/workflow-controller-configmap-patch.yaml); KFP's compiler sets
``limit``/``backoff`` on the task's template without a policy, Argo v4.0.5 merges the defaults under the
template's own fields (workflow/controller/operator.go, ``mergedTemplateDefaultsInto``: strategic merge)
and ``processNodeRetries`` with ``OnError`` retries an ``Error`` node only: a step whose process exits
non-zero (a ``Failed`` node) is not retried by Argo on a stock install.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time

import pytest
import yaml

from paravt_core.faults import InjectedFault
from paravt_core.launch.retry import retry_reason, run_with_retries
from paravt_core.launch.trainjob import JobFailed, JobPending, job_name
from tests.support.k8s_emulator import Emulator
from tests.support.paths import ROOT
from tests.support.trainjob_support import _kubeconfig, crd

RUN = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"


def argo_retries(policy: str, phase: str) -> bool:
    """Argo v4.0.5 processNodeRetries: which policy retries which node phase (OnTransientError aside)."""
    return {"Always": True, "OnFailure": phase == "Failed", "OnError": phase == "Error"}[policy]


def effective_policy(configmap: dict, task: dict) -> str:
    """The retry policy Argo applies to a task compiled with ``task`` under the workflow controller's
    ``configmap``: its templateDefaults' retryStrategy merged under the task's own fields (Argo v4.0.5
    operator.go, mergedTemplateDefaultsInto), then RetryPolicyActual (pkg/apis/workflow/v1alpha1/
    workflow_types.go: no policy and no expression is OnFailure)."""
    defaults = yaml.safe_load((configmap.get("data") or {}).get("workflowDefaults") or "{}")
    merged = (defaults.get("spec", {}).get("templateDefaults", {}).get("retryStrategy") or {}) | task
    return merged.get("retryPolicy") or ("Always" if merged.get("expression") else "OnFailure")


CONFIGMAPS = {  # the workflow controller's ConfigMap as each KFP release ships it, and with our option
    "OnFailure": ROOT / "tests/fixtures/k8s/argo-workflow-controller-configmap.kfp-2.15.0.yaml",
    "OnError": ROOT / "tests/fixtures/k8s/argo-workflow-controller-configmap.kfp-2.17.0.yaml",
    "Always": ROOT / "manifests/options/argo-retry-always/workflow-controller-configmap-patch.yaml",
}


@pytest.mark.parametrize("policy", sorted(CONFIGMAPS))
def test_the_effective_policy_of_each_install(policy):
    """KFP 2.15.0 ships no workflowDefaults (Argo's OnFailure), KFP 2.17.0 OnError, our option Always; the
    option keeps KFP 2.17's Workflow TTL (a merge patch replaces the whole workflowDefaults key)."""
    task = {"limit": 3, "backoff": {"duration": "60s", "factor": 2}}  # what set_retries compiles to
    configmap = yaml.safe_load(CONFIGMAPS[policy].read_text())
    assert configmap["metadata"]["name"] == "workflow-controller-configmap"
    assert effective_policy(configmap, task) == policy
    if policy == "Always":
        defaults = yaml.safe_load(configmap["data"]["workflowDefaults"])
        assert defaults["spec"]["ttlStrategy"]["secondsAfterCompletion"] == 3600
        assert argo_retries(policy, "Failed") and argo_retries(policy, "Error")
        kustomization = yaml.safe_load((CONFIGMAPS[policy].parent / "kustomization.yaml").read_text())
        assert kustomization["kind"] == "Component"
        assert kustomization["patches"] == [{"path": CONFIGMAPS[policy].name}]


# The node messages Argo gives a failed or errored attempt, read from its source (v3.7.3 and v4.0.5,
# workflow/controller): a pod whose object is gone (operator.go, podReconciliation: "pod deleted"), a pod
# the kubelet ended (inferFailedReason returns the pod's status message first), a container that exited
# non-zero (inferFailedReason: "<container>: <reason> (exit code N)"), a pod that could not be created
# (markNodeError: the error's text); and a DAG attempt whose task failed (dag.go, executeDAG: markNodePhase
# with the DAG's phase and no message, on a node initialised without one).
ATTEMPTS = {
    "pod deleted": ("Error", "pod deleted", True),
    "kubelet eviction": ("Failed", "The node was low on resource: memory. ", True),
    "past activeDeadlineSeconds": (
        "Failed",
        "Pod was active on the node longer than the specified deadline",
        True,
    ),
    "process exited 1": ("Failed", "main: Error (exit code 1)", True),
    "pod not created": ("Error", 'pods "x" is forbidden: exceeded quota', True),
    "KFP DAG whose task failed": ("Failed", "", False),
}


def test_the_always_option_reruns_steps_and_not_kfp_dag_templates():
    """Argo applies templateDefaults to every template, KFP's DAG templates too (a rerun DAG runs all its
    tasks again: dag.go names them under the attempt, taskNodeName). Since v3.5 it retries only where both
    the policy and ``retryStrategy.expression`` hold (docs/retries.md: "Both must be true to retry";
    operator.go processNodeRetries: "retryStrategy.expression evaluated to false"), with
    ``lastRetry.message`` the last attempt's node message (buildRetryStrategyLocalScope). The option's
    expression is a plain string comparison, which means the same in expr-lang and in Python, so it is
    evaluated here as Python against each attempt; the multi-node step reads the same expression off its
    pod (trainjob.STEP_ONLY_EXPRESSION) and counts it as asking nothing of a step."""
    from types import SimpleNamespace

    from paravt_core.launch.trainjob import STEP_ONLY_EXPRESSION

    configmap = yaml.safe_load(CONFIGMAPS["Always"].read_text())
    strategy = yaml.safe_load(configmap["data"]["workflowDefaults"])["spec"]["templateDefaults"][
        "retryStrategy"
    ]
    assert strategy["retryPolicy"] == "Always" and strategy["limit"] == "2"
    expression = strategy["expression"]
    assert expression == STEP_ONLY_EXPRESSION
    assert re.fullmatch(r'lastRetry\.message != ""', expression)  # nothing but what Python reads alike
    for what, (phase, message, rerun) in ATTEMPTS.items():
        scope = {"lastRetry": SimpleNamespace(message=message, status=phase, exitCode="-1")}
        holds = eval(expression, {"__builtins__": {}}, scope)  # noqa: S307 (a fixed comparison)
        assert (argo_retries("Always", phase) and holds) is rerun, what


def _phases(cell: str) -> set[str]:
    return {p for p in ("Failed", "Error") if p in cell}


def test_the_docs_retry_table_says_what_each_policy_does():
    """docs/reference.md: for each failure and each install, whether Argo retries (from the node phase with
    Argo's rule above; a terminated run and used-up retries never) and whether a multi-node step keeps its
    job (only where every phase its node may get is retried: paravt_core/launch/trainjob.py keep_job)."""
    text = (ROOT / "docs/reference.md").read_text()
    lines = text[text.index("| failure | Argo's node phase |") :].split("\n\n")[0].splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    policies = [re.search(r"`(\w+)`", c).group(1) for c in header[2:]]
    assert sorted(policies) == sorted(CONFIGMAPS)
    rows = lines[2:]
    assert len(rows) >= 6
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        phase, never = cells[1].split()[0], "used up" in cells[0] or "terminated" in cells[0]
        for policy, cell in zip(policies, cells[2:], strict=True):
            expected = phase in ("Failed", "Error") and argo_retries(policy, phase) and not never
            assert cell.lower().startswith("retried") == expected, (row, policy)
            if "multi-node" in cell:
                keeps = not never and all(argo_retries(policy, p) for p in _phases(cells[1]))
                assert ("keeps its job" in cell) == keeps, (row, policy)


def test_retry_reasons_by_hand():
    assert (
        retry_reason(subprocess.CalledProcessError(1, ["torchrun", "-m", "x"]))
        == "torchrun -m x exited with status 1"
    )
    assert retry_reason(subprocess.CalledProcessError(-9, ["torchrun"])) == "torchrun killed by SIGKILL"
    assert retry_reason(subprocess.CalledProcessError(2, ["paravt", "sft"])) is None  # a config error
    assert (
        retry_reason(JobFailed("TrainJob ns/x failed: JobSetFailed: NCCL"))
        == "TrainJob ns/x failed: JobSetFailed: NCCL"
    )
    assert retry_reason(JobPending("TrainJob ns/x: node 1 Pending 1800 s: Unschedulable")) is None
    assert retry_reason(ConnectionResetError("peer")) == "ConnectionResetError: peer"
    assert retry_reason(InjectedFault("sft after step 3")) == "sft after step 3"
    assert retry_reason(ValueError("bad config")) is None and retry_reason(KeyError("x")) is None
    assert retry_reason(SystemExit(143)) is None and retry_reason(KeyboardInterrupt()) is None


def test_a_crashing_child_is_rerun_with_doubling_backoff_and_a_bug_is_not(tmp_path):
    """A real child process that fails twice and then succeeds; three attempts, waits 5 s then 10 s."""
    marker = tmp_path / "failures"
    script = f"import pathlib,sys; p=pathlib.Path({str(marker)!r}); n=len(p.read_text()) if p.exists() else 0; p.write_text('x'*(n+1)); sys.exit(1 if n < 2 else 0)"  # noqa: E501
    waits: list[float] = []
    log: list[str] = []
    run_with_retries(lambda: subprocess.run([sys.executable, "-c", script], check=True), stage="sft",
                     retries=2, backoff_s=5, log=log.append, sleep=waits.append)  # fmt: skip
    assert waits == [5, 10] and marker.read_text() == "xxx"
    assert log[0].startswith("sft: attempt 1 of 3 failed (") and "exited with status 1); rerunning" in log[0]
    with pytest.raises(subprocess.CalledProcessError):  # the third failure is the step's
        marker.unlink()
        run_with_retries(lambda: subprocess.run([sys.executable, "-c", script], check=True), stage="sft",
                         retries=1, backoff_s=5, log=log.append, sleep=waits.append)  # fmt: skip
    calls = []
    with pytest.raises(TypeError):  # not retryable: raised at once
        run_with_retries(lambda: calls.append(1) or (_ for _ in ()).throw(TypeError("bug")), stage="rl",
                         retries=3, backoff_s=5, sleep=waits.append)  # fmt: skip
    assert calls == [1]


def test_a_crashed_sft_step_reruns_in_its_pod_from_its_newest_checkpoint(
    sft_data_output, tiny_model_dir, tmp_path, monkeypatch, capsys
):
    """The one-node SFT step's body (what its pod runs) crashes after step 10 (checkpointed every 10): it
    reruns itself, resumes from step 10 and completes, instead of failing a step Argo will not retry."""
    from kfp.dsl import HTML, Artifact, Dataset, Metrics, Model

    from components.sft import sft_op

    monkeypatch.setenv("PARAVT_FAULT", "sft:10")
    monkeypatch.setenv("PARAVT_FAULT_ONCE", str(tmp_path / "fired"))
    out = tmp_path / "sft"
    curve, metrics, model = HTML(name="c"), Metrics(name="m"), Model(name="o", uri=str(tmp_path / "o"))
    curve.path, metrics.path, model.path = (str(tmp_path / n) for n in ("c.html", "m.json", "o"))
    final = sft_op.python_func(
        config_yaml=(ROOT / "configs/sft/tiny.yaml").read_text(),
        overrides=[
            "trainer.steps=20",
            "data.num_workers=0",
            f"work_dir={tmp_path}/work",
            "launch.retry_backoff_s=0",
        ],
        data=Dataset(name="d", uri=sft_data_output),
        model_uri=tiny_model_dir,
        curve=curve,
        metrics=metrics,
        model=model,
        tensorboard=Artifact(name="tb"),
        output=str(out),
    )
    assert final == str(out / "final")
    assert (tmp_path / "fired").read_text() == "sft:10\n"  # the first attempt did crash
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["resumed_from"].rstrip("/").endswith("10")
    assert "sft: attempt 1 of 3 failed (injected fault: sft after step 10" in capsys.readouterr().out


def test_a_multinode_step_recreates_its_failed_job_and_follows_it_to_completion(
    tmp_path, monkeypatch, capsys
):
    """The job fails (an NCCL error on a node): the step deletes it, creates it again (the stage resumes from
    its checkpoints) and completes, where before the step failed and Argo's OnError left it failed."""
    from kfp.dsl import HTML, Artifact, Metrics, Model

    from components.multinode import sft_trainjob_op

    ns, name = "default", job_name(RUN, "sft")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KFP_POD_NAME", raising=False)
    out = tmp_path / "sft"
    out.mkdir()
    (out / "metrics.json").write_text(json.dumps({"steps": 2, "loss": 1.5}))  # what the job's stage leaves
    (out / "loss_curve.png").write_bytes(b"\x89PNG")
    stamp = "2026-11-28T10:00:00Z"
    with Emulator() as emu:
        emu.register_crd(crd())
        _kubeconfig(emu, tmp_path / "kubeconfig")

        def controller() -> None:
            assert emu.created.wait(10)
            failed = {"type": "Failed", "status": "True", "reason": "JobSetFailed", "lastTransitionTime": stamp,
                      "message": "node-0: NCCL error: unhandled system error"}  # fmt: skip
            emu.set_status("trainjobs", ns, name, {"conditions": [failed]})
            while emu.count("create", "trainjobs") < 2:
                time.sleep(0.02)
            done = {
                "type": "Complete",
                "status": "True",
                "reason": "JobSetCompleted",
                "lastTransitionTime": stamp,
            }
            emu.set_status("trainjobs", ns, name, {"conditions": [done]})

        thread = threading.Thread(target=controller, daemon=True)
        thread.start()
        curve, metrics, model = HTML(name="c"), Metrics(name="m"), Model(name="o", uri=str(tmp_path / "o"))
        curve.path, metrics.path, model.path = (str(tmp_path / n) for n in ("c.html", "m.json", "o"))
        final = sft_trainjob_op.python_func(
            config_yaml=(ROOT / "configs/sft/tiny.yaml").read_text(), overrides=["launch.retry_backoff_s=0"],
            data_uri="s3://bucket/runs/x/data", model_uri="s3://bucket/models/base", nodes=2, gpus_per_node=8,
            api="trainjob", runtime="torch-distributed", poll_s=0.05, node_spec={"image": "registry/paravt-sft:1"},
            media_pvc="", curve=curve, metrics=metrics, model=model, tensorboard=Artifact(name="tb"),
            output=str(out), run_id=RUN,
        )  # fmt: skip
        thread.join(10)
        assert final == str(out / "final")
        assert (emu.count("create", "trainjobs"), emu.count("delete", "trainjobs")) == (2, 2)  # failed, done
    printed = capsys.readouterr().out
    assert "sft: attempt 1 of 3 failed (TrainJob default/" in printed and "NCCL error" in printed
