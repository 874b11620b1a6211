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
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from paravt_core.faults import InjectedFault
from paravt_core.launch.retry import retry_reason, run_with_retries
from paravt_core.launch.trainjob import JobFailed, JobPending, job_name
from tests.k8s_emulator import Emulator
from tests.test_launch_trainjob import _kubeconfig, crd

ROOT = Path(__file__).resolve().parents[1]
RUN = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"


def argo_retries(policy: str, phase: str) -> bool:
    """Argo v4.0.5 processNodeRetries: which policy retries which node phase (OnTransientError aside)."""
    return {"Always": True, "OnFailure": phase == "Failed", "OnError": phase == "Error"}[policy]


def test_kfps_stock_policy_does_not_retry_a_failed_step_but_the_onfailure_option_does():
    """The stock policy as KFP 2.17 ships it, the merge with our tasks' strategy, and the option we ship."""
    stock = {"limit": "2", "retryPolicy": "OnError"}  # KFP 2.17.0 workflow-controller-configmap-patch.yaml
    task = {
        "limit": 3,
        "backoff": {"duration": "60s", "factor": 2},
    }  # what set_retries compiles to (no policy)
    merged = stock | task  # strategic merge: the template's own fields win, the policy comes from the default
    assert merged["retryPolicy"] == "OnError" and merged["limit"] == 3
    assert not argo_retries(merged["retryPolicy"], "Failed") and argo_retries(merged["retryPolicy"], "Error")

    patch = yaml.safe_load(
        (
            ROOT / "manifests/options/argo-retry-on-failure/workflow-controller-configmap-patch.yaml"
        ).read_text()
    )
    defaults = yaml.safe_load(patch["data"]["workflowDefaults"])
    option = defaults["spec"]["templateDefaults"]["retryStrategy"]
    assert option["retryPolicy"] == "OnFailure" and argo_retries(option["retryPolicy"], "Failed")
    assert patch["metadata"]["name"] == "workflow-controller-configmap"  # the ConfigMap KFP's patch edits
    # KFP's own ttlStrategy stays (a strategic-merge patch of data.workflowDefaults replaces the whole key)
    assert defaults["spec"]["ttlStrategy"]["secondsAfterCompletion"] == 3600


def test_the_docs_retry_table_says_what_each_policy_does():
    """docs/reference.md: for each failure, what Argo does under KFP's stock OnError and under the
    OnFailure option, derived from the node phase with Argo's rule above."""
    text = (ROOT / "docs/reference.md").read_text()
    table = text[text.index("| failure | Argo's node phase |") :].split("\n\n")[0].splitlines()[2:]
    assert len(table) >= 5
    for row in table:
        cells = [c.strip() for c in row.strip("|").split("|")]
        phase, on_error, on_failure = cells[1].split()[0], cells[2], cells[3]
        for policy, cell in (("OnError", on_error), ("OnFailure", on_failure)):
            retried = cell.lower().startswith("retried")
            expected = (
                phase in ("Failed", "Error") and argo_retries(policy, phase) and "used up" not in cells[0]
            )
            assert retried == expected, (row, policy)


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
