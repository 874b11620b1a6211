"""The multi-node launcher (paravt_core/launch/trainjob.py) against a Kubernetes API emulator on loopback
(tests/support/k8s_emulator.py; no cluster runs here): the real ``kubernetes`` client, the TrainJob validated
against Kubeflow Trainer v2.3.0's CRD schema (tests/fixtures/k8s/SOURCE.md), status transitions, failure
with the job's reason, re-attach on retry, a deleted job, and the RBAC those calls need."""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import jsonschema
import pytest
import yaml

from paravt_core.launch.trainjob import (
    CONFIG_ENV,
    JobFailed,
    JobGone,
    Launcher,
    NodeSpec,
    job_name,
    job_state,
    labels,
    launch_stage,
    pytorchjob_manifest,
    trainjob_manifest,
    with_run_id,
)
from tests.support.k8s_emulator import Emulator
from tests.support.paths import ROOT
from tests.support.trainjob_support import (
    CONFIG,
    NS,
    PYTORCHJOB_CRD,
    RUN,
    _complete,
    _controller,
    _kubeconfig,
    crd,
    spec,
)


def manifest(stage: str = "sft") -> dict:
    name = job_name(RUN, stage)
    return trainjob_manifest(
        name, NS, stage, spec(), nodes=2, gpus_per_node=8, config_yaml=CONFIG, job_labels=labels(RUN, stage)
    )


def test_trainjob_validates_against_the_crd_schema_and_says_what_each_node_runs():
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    m = manifest()
    jsonschema.validate(m, schema)  # raises on any violation
    t = m["spec"]["trainer"]
    assert m["apiVersion"] == "trainer.kubeflow.org/v1alpha1" and m["kind"] == "TrainJob"
    assert m["spec"]["runtimeRef"]["name"] == "torch-distributed"
    assert (t["numNodes"], t["numProcPerNode"]) == (2, 8)
    assert t["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == 8
    assert t["command"][:2] == ["/bin/sh", "-c"]
    assert (
        "exec torchrun -m paravt_core.cli sft --config ${TMPDIR:-/tmp}/paravt-stage.yaml" in t["command"][2]
    )
    env = {e["name"]: e for e in t["env"]}
    assert env[CONFIG_ENV]["value"] == CONFIG
    # Secrets by reference only: no value anywhere in the object.
    assert env["AWS_SECRET_ACCESS_KEY"] == {
        "name": "AWS_SECRET_ACCESS_KEY",
        "valueFrom": {"secretKeyRef": {"name": "paravt-s3", "key": "AWS_SECRET_ACCESS_KEY"}},
    }
    pod = m["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    assert pod["name"] == "node"
    pod = pod["template"]["spec"]["template"]["spec"]
    assert {v["name"] for v in pod["volumes"]} == {"media", "dshm"}
    assert pod["containers"][0]["volumeMounts"] == [
        {"name": "media", "mountPath": "/mnt/media"},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    # The schema does bite: a count given as text and an unknown trainer field are both rejected.
    bad = manifest()
    bad["spec"]["trainer"]["numNodes"] = "2"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    bad = manifest()
    del bad["spec"]["runtimeRef"]["name"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def _node_pod(m: dict) -> dict:
    """The pod template a TrainJob's runtime patch puts on its "node" pods."""
    (patch,) = m["spec"]["runtimePatches"]
    (node,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert node["name"] == "node"
    return node["template"]["spec"]["template"]


def test_the_nodes_run_as_the_service_account_that_holds_the_pull_secret():
    """A pod without ``serviceAccountName`` runs as the namespace's ``default`` account and gets that
    account's pull secrets (Kubernetes, plugin/pkg/admission/serviceaccount/admission.go), which the prod
    overlay never gives the registry secret: ImagePullBackOff. The nodes name ``paravt-trainer`` (the
    overlays' account with the secret): on a TrainJob through the runtime patch's pod spec
    (``PodSpecPatch.serviceAccountName``, trainer v2.3.0 pkg/apis/trainer/v1alpha1/trainjob_types.go,
    strategic-merged onto the JobSet by pkg/runtime/core/trainingruntime.go, mergeRuntimePatches), on a
    PyTorchJob in every replica's pod template."""
    from pipelines.platform import TRAINER_SERVICE_ACCOUNT, node_spec

    assert TRAINER_SERVICE_ACCOUNT == "paravt-trainer"
    node = NodeSpec(**node_spec("sft", "registry/paravt-sft:1"))  # what the compiled step gets
    name = job_name(RUN, "sft")
    common = dict(nodes=4, gpus_per_node=8, config_yaml=CONFIG, job_labels=labels(RUN, "sft"))
    m = trainjob_manifest(name, NS, "sft", node, **common)
    jsonschema.validate(m, crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    assert _node_pod(m)["spec"]["serviceAccountName"] == "paravt-trainer"
    p = pytorchjob_manifest(name, NS, "sft", node, **common)
    jsonschema.validate(p, crd(PYTORCHJOB_CRD)["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    reps = p["spec"]["pytorchReplicaSpecs"]
    assert {r: reps[r]["template"]["spec"]["serviceAccountName"] for r in reps} == {
        "Master": "paravt-trainer",
        "Worker": "paravt-trainer",
    }


def test_the_nodes_opt_out_of_the_istio_sidecar():
    """KFP disables Istio injection only on the Argo templates of its own workflow (KFP 2.17.0,
    backend/src/apiserver/template/v2_template.go: ``SetAnnotationsToAllTemplatesIfKeyNotExist(
    AnnotationKeyIstioSidecarInject, AnnotationValueIstioSidecarInjectDisabled)``, i.e.
    ``sidecar.istio.io/inject: "false"``, backend/src/common/util/consts.go), not on the objects a step
    creates. In a profile namespace our node pods would get an istio-proxy that keeps running after
    torchrun exits, and the job would never complete. The annotation goes on the pod template: the
    TrainJob's runtime patch (``PodTemplatePatch.metadata``: labels and annotations, trainer v2.3.0) and
    the PyTorchJob's replica templates."""
    want = {"sidecar.istio.io/inject": "false"}
    m = manifest()
    jsonschema.validate(m, crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    assert _node_pod(m)["metadata"]["annotations"] == want
    bare = trainjob_manifest(  # no volume, selector or secret: the patch is still there, for the annotation
        "x", NS, "sft", NodeSpec(image="i"), nodes=2, gpus_per_node=1, config_yaml="", job_labels={}
    )
    assert _node_pod(bare)["metadata"] == {"annotations": want}
    p = pytorchjob_manifest(
        "x", NS, "sft", spec(), nodes=3, gpus_per_node=8, config_yaml=CONFIG, job_labels=labels(RUN, "sft")
    )
    jsonschema.validate(p, crd(PYTORCHJOB_CRD)["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    for replica in p["spec"]["pytorchReplicaSpecs"].values():
        assert replica["template"]["metadata"]["annotations"] == want


def test_job_name_is_one_per_run_and_stage():
    a, b = job_name(RUN, "sft"), job_name(RUN, "rl")
    assert a == job_name(RUN, "sft") and a != b and job_name("other-run", "sft") != a
    for n in (a, b):
        assert len(n) <= 40 and n[0].isalpha()
        assert all(c.islower() or c.isdigit() or c == "-" for c in n)
    with pytest.raises(ValueError):
        job_name("", "sft")
    # The CRD's own CEL rules on the name (RFC 1035 label, <= 63): the pattern is read from the CRD.
    rules = {
        r["message"]: r["rule"]
        for r in crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"]
    }
    pattern = re.search(
        r"matches\('(.+)'\)", rules["metadata.name must match RFC 1035 DNS label format"]
    ).group(1)
    assert "size(self.metadata.name) <= 63" in rules.values()
    for n in (a, b):
        assert re.fullmatch(pattern, n) and len(n) <= 63
    assert not re.fullmatch(pattern, "1-starts-with-a-digit")


def test_job_state_reads_trainjob_and_pytorchjob_statuses():
    cond = lambda t, **kw: {"type": t, "status": "True", **kw}  # noqa: E731
    assert job_state("trainjob", {}) == ("Created", "")
    assert job_state("trainjob", {"status": {"jobsStatus": [{"name": "node", "active": 2}]}}) == (
        "Running",
        "",
    )
    assert job_state("trainjob", {"status": {"conditions": [cond("Complete")]}})[0] == "Complete"
    failed = {
        "status": {"conditions": [cond("Failed", reason="DeadlineExceeded", message="deadline passed")]}
    }
    assert job_state("trainjob", failed) == ("Failed", "DeadlineExceeded: deadline passed")
    # A condition that is False does not count.
    assert (
        job_state("trainjob", {"status": {"conditions": [{"type": "Failed", "status": "False"}]}})[0]
        == "Created"
    )
    assert (
        job_state("pytorchjob", {"status": {"conditions": [cond("Created"), cond("Running")]}})[0]
        == "Running"
    )
    assert job_state("pytorchjob", {"status": {"conditions": [cond("Succeeded")]}})[0] == "Complete"


def _rank0_pod(emu: Emulator, name: str) -> str:
    pod = f"{name}-node-0-0-abcde"
    emu.add_pod(
        NS,
        pod,
        {
            "jobset.sigs.k8s.io/jobset-name": name,
            "jobset.sigs.k8s.io/replicatedjob-name": "node",
            "batch.kubernetes.io/job-completion-index": "0",
        },
    )
    # A rank-1 pod of the same job: its log must not be streamed.
    emu.add_pod(
        NS,
        f"{name}-node-0-1-fghij",
        {
            "jobset.sigs.k8s.io/jobset-name": name,
            "jobset.sigs.k8s.io/replicatedjob-name": "node",
            "batch.kubernetes.io/job-completion-index": "1",
        },
    )
    emu.append_log(NS, f"{name}-node-0-1-fghij", "rank 1 says hello\n")
    return pod


def _launch(emu: Emulator, log: list, stage: str = "sft", api: str = "trainjob"):
    return launch_stage(
        stage,
        CONFIG,
        run_id=RUN,
        nodes=2,
        gpus_per_node=8,
        api=api,
        spec=spec(),
        namespace=NS,
        poll_s=0.05,
        client=emu.client(),
        log=log.append,
        timeout_s=30,
    )


def test_created_running_complete_streams_rank0_logs_and_deletes_the_job():
    name = job_name(RUN, "sft")
    log: list[str] = []
    with Emulator() as emu:
        emu.register_crd(crd())
        state: dict = {}

        def running() -> None:
            state["pod"] = _rank0_pod(emu, name)
            emu.append_log(NS, state["pod"], "step 1 loss 2.5\n")
            emu.set_status("trainjobs", NS, name, {"jobsStatus": [{"name": "node", "active": 2, "ready": 2}]})

        def more_log() -> None:
            emu.append_log(NS, state["pod"], "step 2 loss 2.1\n")

        def complete() -> None:
            emu.append_log(NS, state["pod"], "saved final\n")  # written as the job ends: still streamed
            emu.set_status(
                "trainjobs",
                NS,
                name,
                {
                    "conditions": [
                        {
                            "type": "Complete",
                            "status": "True",
                            "reason": "JobSetCompleted",
                            "message": "done",
                            "lastTransitionTime": "2026-11-25T09:00:00Z",
                        }
                    ]
                },
            )

        ctl = _controller(emu, name, [lambda: time.sleep(0.2), running, more_log, complete])
        _launch(emu, log)
        ctl.join(5)
        assert emu.get("trainjobs", NS, name) is None  # deleted on success
        assert emu.count("create", "trainjobs") == 1
    states = [
        line.split(": ", 1)[1] for line in log if line.startswith(f"TrainJob {name}: ") and "[" not in line
    ]
    assert states == [f"created in {NS}", "Created", "Running", "Complete (done)", "deleted after completion"]
    streamed = [line for line in log if line.startswith("[")]
    pod = f"[{name}-node-0-0-abcde]"
    assert streamed == [f"{pod} step 1 loss 2.5", f"{pod} step 2 loss 2.1", f"{pod} saved final"]


def test_a_failed_job_fails_the_step_with_its_reason_and_is_kept():
    name = job_name(RUN, "sft")
    with Emulator() as emu:
        emu.register_crd(crd())
        failed = {
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "JobSetFailed",
                    "message": "jobset failed: node-0 exited with code 1 (CUDA out of memory)",
                    "lastTransitionTime": "2026-11-25T09:00:00Z",
                }
            ]
        }
        _controller(emu, name, [lambda: emu.set_status("trainjobs", NS, name, failed)])
        with pytest.raises(
            JobFailed,
            match=r"failed: JobSetFailed: jobset failed: node-0 exited with code 1 \(CUDA out of memory\)",
        ):
            _launch(emu, [])
        assert emu.get("trainjobs", NS, name) is not None  # left for the post-mortem


def test_a_retry_reattaches_to_the_running_job_instead_of_creating_a_second():
    name = job_name(RUN, "sft")
    log: list[str] = []
    with Emulator() as emu:
        emu.register_crd(crd())
        # The first attempt created the job, then its pod died (Argo retries the step).
        Launcher(emu.client(), NS, poll_s=0.05, log=log.append).start(manifest())
        emu.set_status("trainjobs", NS, name, {"jobsStatus": [{"name": "node", "active": 2}]})
        assert emu.count("create", "trainjobs") == 1
        done = {
            "conditions": [
                {
                    "type": "Complete",
                    "status": "True",
                    "reason": "x",
                    "message": "",
                    "lastTransitionTime": "2026-11-25T09:00:00Z",
                }
            ]
        }
        _controller(emu, name, [lambda: time.sleep(0.2), lambda: emu.set_status("trainjobs", NS, name, done)])
        _launch(emu, log)
        assert emu.count("create", "trainjobs") == 1  # no second create
        assert emu.get("trainjobs", NS, name) is None
    assert any("re-attaching to the job of an earlier attempt (Running)" in line for line in log)


def test_a_retry_after_a_failed_job_deletes_it_and_starts_again():
    name = job_name(RUN, "sft")
    log: list[str] = []
    with Emulator() as emu:
        emu.register_crd(crd())
        old = manifest()
        old["status"] = {
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "JobSetFailed",
                    "message": "x",
                    "lastTransitionTime": "2026-11-25T09:00:00Z",
                }
            ]
        }
        emu.put("trainjobs", NS, old)
        _controller(
            emu,
            name,
            [
                lambda: emu.set_status(
                    "trainjobs",
                    NS,
                    name,
                    {
                        "conditions": [
                            {
                                "type": "Complete",
                                "status": "True",
                                "reason": "x",
                                "message": "",
                                "lastTransitionTime": "2026-11-25T09:00:00Z",
                            }
                        ]
                    },
                )
            ],
        )
        _launch(emu, log)
        assert emu.count("delete", "trainjobs") == 2  # the failed one, then the completed one
        assert emu.count("create", "trainjobs") == 1
    assert any("ended Failed; deleting it to start again" in line for line in log)


def test_a_retry_after_a_completed_job_reads_it_as_done():
    """A step that died after its job completed (say while publishing the outputs) is retried: the job
    it finds is ``Complete`` (trainer v2.3.0 pkg/apis/trainer/v1alpha1/trainjob_types.go,
    ``TrainJobComplete``; PyTorchJob ``Succeeded``): the stage's outputs are written, so it is not run
    again (deleting and re-creating it would schedule 2x8 GPUs to find the stage's _COMPLETE marker)."""
    name = job_name(RUN, "sft")
    log: list[str] = []
    with Emulator() as emu:
        emu.register_crd(crd())
        old = manifest()
        old["status"] = {
            "conditions": [
                {"type": "Complete", "status": "True", "reason": "JobSetCompleted", "message": "done",
                 "lastTransitionTime": "2026-11-25T09:00:00Z"}
            ]
        }  # fmt: skip
        emu.put("trainjobs", NS, old)
        assert Launcher(emu.client(), NS, poll_s=0.05, log=log.append).start(manifest()) == "completed"
        _launch(emu, log)
        assert emu.count("create", "trainjobs") == 0  # never created again
        assert emu.count("delete", "trainjobs") == 1 and emu.get("trainjobs", NS, name) is None
    assert f"TrainJob {name}: the job of an earlier attempt completed; not running it again" in log
    assert f"TrainJob {name}: Complete (done)" in log


def test_a_retry_waits_for_a_job_still_being_deleted_then_creates_it():
    """After a SIGTERM the job is deleted with ``propagationPolicy: Foreground``: the API server keeps the
    object, with ``metadata.deletionTimestamp`` set, until its dependents are gone (Kubernetes garbage
    collector, foreground cascading deletion). A retry in that window must not re-attach to it (it would
    vanish under the step: JobGone); it waits for it to go and creates the job again."""
    name = job_name(RUN, "sft")
    log: list[str] = []
    with Emulator() as emu:
        emu.register_crd(crd())
        going = manifest()
        going["metadata"]["deletionTimestamp"] = "2026-11-25T09:00:00Z"
        going["status"] = {"jobsStatus": [{"name": "node", "active": 2}]}  # its pods still stopping
        emu.put("trainjobs", NS, going)
        waiting = f"TrainJob {name}: the earlier attempt's job is being deleted; waiting for it to go"

        def garbage_collector() -> None:  # the pods are gone a while after the step started waiting
            deadline = time.monotonic() + 20
            while waiting not in log and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.2)
            emu.remove("trainjobs", NS, name)

        threading.Thread(target=garbage_collector, daemon=True).start()
        _controller(emu, name, [lambda: _complete(emu, NS, name)])
        _launch(emu, log)
        assert emu.count("create", "trainjobs") == 1 and emu.get("trainjobs", NS, name) is None
    assert waiting in log and not any("re-attaching" in line for line in log)


def test_a_job_deleted_under_us_is_reported():
    name = job_name(RUN, "rl")
    with Emulator() as emu:
        emu.register_crd(crd())
        _controller(
            emu,
            name,
            [
                lambda: emu.set_status(
                    "trainjobs", NS, name, {"jobsStatus": [{"name": "node", "active": 2}]}
                ),
                lambda: time.sleep(0.2),
                lambda: emu.remove("trainjobs", NS, name),
            ],
        )
        with pytest.raises(
            JobGone, match=rf"TrainJob {NS}/{name} was deleted before it finished \(last state: Running\)"
        ):
            _launch(emu, [], stage="rl")


def test_the_emulator_rejects_an_object_the_crd_rejects():
    """The emulator validates creates as the API server does, so the launcher's create is checked too."""
    from kubernetes.client import CustomObjectsApi
    from kubernetes.client.exceptions import ApiException

    with Emulator() as emu:
        emu.register_crd(crd())
        bad = manifest()
        bad["spec"]["trainer"]["numProcPerNode"] = "auto-ish"
        with pytest.raises(ApiException) as err:
            CustomObjectsApi(emu.client()).create_namespaced_custom_object(
                "trainer.kubeflow.org", "v1alpha1", NS, "trainjobs", bad
            )
        assert err.value.status == 422 and "numProcPerNode" in err.value.body


def test_pytorchjob_master_and_workers_and_its_success():
    name = job_name(RUN, "sft")
    m = pytorchjob_manifest(
        name, NS, "sft", spec(), nodes=4, gpus_per_node=8, config_yaml=CONFIG, job_labels=labels(RUN, "sft")
    )
    jsonschema.validate(m, crd(PYTORCHJOB_CRD)["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    reps = m["spec"]["pytorchReplicaSpecs"]
    assert (reps["Master"]["replicas"], reps["Worker"]["replicas"]) == (1, 3)
    c = reps["Worker"]["template"]["spec"]["containers"][0]
    assert c["name"] == "pytorch" and c["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert (
        "torchrun --nnodes=4 --nproc-per-node=8 --node-rank=$RANK --master-addr=$MASTER_ADDR"
        in c["command"][2]
    )
    log: list[str] = []
    with Emulator() as emu:
        emu.register_crd(crd(PYTORCHJOB_CRD))
        cond = lambda t: {"type": t, "status": "True", "reason": t, "message": f"job {t.lower()}"}  # noqa: E731

        def running() -> None:
            emu.add_pod(
                NS,
                f"{name}-master-0",
                {
                    "training.kubeflow.org/job-name": name,
                    "training.kubeflow.org/replica-type": "master",
                    "training.kubeflow.org/replica-index": "0",
                },
                container="pytorch",
            )
            emu.append_log(NS, f"{name}-master-0", "master up\n")
            emu.set_status("pytorchjobs", NS, name, {"conditions": [cond("Created"), cond("Running")]})

        _controller(
            emu,
            name,
            [
                running,
                lambda: time.sleep(0.3),
                lambda: emu.set_status("pytorchjobs", NS, name, {"conditions": [cond("Succeeded")]}),
            ],
            plural="pytorchjobs",
        )
        _launch(emu, log, api="pytorchjob")
        assert emu.count("create", "pytorchjobs") == 1 and emu.get("pytorchjobs", NS, name) is None
    assert f"[{name}-master-0] master up" in log
    assert f"PyTorchJob {name}: Complete (job succeeded)" in log


def test_rbac_grants_exactly_the_calls_the_launcher_made():
    """Run the launcher through its paths (create, rank-0 logs, completion, both kinds; a failed job
    re-created; a completed one read as done; SIGTERM) in the emulator, collect the (verb, resource) pairs
    it really called, and check the Role grants exactly those: nothing missing, nothing more."""
    name = job_name(RUN, "sft")
    used: set[tuple[str, str]] = set()
    done = {
        "conditions": [
            {"type": "Complete", "status": "True", "reason": "x", "message": "",
             "lastTransitionTime": "2026-11-25T09:00:00Z"}
        ]
    }  # fmt: skip
    with Emulator() as emu:  # TrainJob: created, Running with its rank-0 pod's log, Complete, deleted

        def running() -> None:
            _rank0_pod(emu, name)
            emu.set_status("trainjobs", NS, name, {"jobsStatus": [{"name": "node", "active": 2}]})

        _controller(
            emu, name, [running, lambda: time.sleep(0.2), lambda: emu.set_status("trainjobs", NS, name, done)]
        )
        _launch(emu, [])
        # A retry that finds a failed job (deleted, created again) and one that finds it complete.
        failed = manifest() | {"status": {"conditions": [{"type": "Failed", "status": "True"}]}}
        emu.put("trainjobs", NS, failed)
        emu.created.clear()
        _controller(emu, name, [lambda: emu.set_status("trainjobs", NS, name, done)])
        _launch(emu, [])
        emu.put("trainjobs", NS, manifest() | {"status": done})
        _launch(emu, [])
        used |= set(emu.requests)
    with Emulator() as emu:  # PyTorchJob
        cond = {"type": "Succeeded", "status": "True", "reason": "x", "message": ""}
        _controller(emu, name, [lambda: emu.set_status("pytorchjobs", NS, name, {"conditions": [cond]})])
        _launch(emu, [], api="pytorchjob")
        used |= set(emu.requests)
    with Emulator() as emu:  # launch.ipc_lock: the namespace's Pod Security level is read first
        emu.namespaces[NS] = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "labels": {
            "pod-security.kubernetes.io/enforce": "privileged"}}}  # fmt: skip
        cond = {"type": "Succeeded", "status": "True", "reason": "x", "message": ""}
        _controller(emu, name, [lambda: emu.set_status("pytorchjobs", NS, name, {"conditions": [cond]})])
        launch_stage("sft", CONFIG, run_id=RUN, nodes=2, gpus_per_node=8, api="pytorchjob", namespace=NS,
                     spec=NodeSpec(**{**spec().__dict__, "capabilities": ["IPC_LOCK"]}), poll_s=0.05,
                     client=emu.client(), log=[].append)  # fmt: skip
        assert ("get", "namespaces") in emu.requests
        used |= set(emu.requests)
    with Emulator() as emu, pytest.MonkeyPatch.context() as mp:  # in a KFP pod: its own pod is watched
        mp.setenv("KFP_POD_NAME", "step-pod")
        emu.put_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "step-pod", "namespace": NS,
                     "labels": {}}, "spec": {"containers": [{"name": "main", "image": "x"}]}})  # fmt: skip
        _controller(emu, name, [lambda: time.sleep(0.3), lambda: emu.set_status("trainjobs", NS, name, done)])
        _launch(emu, [])
        assert emu.count("get", "pods") == 1 and emu.count("watch", "pods") >= 1
        used |= set(emu.requests) - {("get", "pods")}  # the one read of its own pod: the runner Role's
    docs = [d for d in yaml.safe_load_all((ROOT / "manifests/base/rbac.yaml").read_text()) if d]
    role = next(
        d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "paravt-trainjob-launcher"
    )
    granted = {(v, r) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    # The one cluster-scoped call (the TrainJob CRD's schema) is the cluster admin's ClusterRole.
    cluster = [d for d in yaml.safe_load_all((ROOT / "manifests/cluster/crd-reader.yaml").read_text()) if d]
    (crd_rule,) = next(d for d in cluster if d["kind"] == "ClusterRole")["rules"]
    assert crd_rule["resourceNames"] == ["trainjobs.trainer.kubeflow.org"]
    assert used & {("get", "customresourcedefinitions")} == {
        (v, r) for r in crd_rule["resources"] for v in crd_rule["verbs"]
    }
    used -= {("get", "customresourcedefinitions")}
    assert used == granted, (used - granted, granted - used)
    groups = {r: rule["apiGroups"] for rule in role["rules"] for r in rule["resources"]}
    assert groups["trainjobs"] == ["trainer.kubeflow.org"] and groups["pytorchjobs"] == ["kubeflow.org"]
    # Worked out by hand from the launcher's code: get/create/delete on both kinds, pods listed by label,
    # the rank-0 pod's log, its own namespace (Pod Security level), its own pod watched; no list/watch on
    # the jobs, no pod get.
    assert granted == {(v, r) for r in ("trainjobs", "pytorchjobs") for v in ("create", "get", "delete")} | {
        ("list", "pods"),
        ("watch", "pods"),
        ("get", "pods/log"),
        ("get", "namespaces"),
    }
    binding = next(
        d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["name"] == "paravt-trainjob-launcher"
    )
    assert binding["subjects"][0]["name"] == "paravt-pipeline-runner"


def test_a_flaky_api_server_is_retried_but_a_forbidden_read_fails_at_once():
    from kubernetes.client.exceptions import ApiException

    name = job_name(RUN, "sft")
    log: list[str] = []
    with Emulator() as emu:
        done = {
            "conditions": [
                {
                    "type": "Complete",
                    "status": "True",
                    "reason": "x",
                    "message": "",
                    "lastTransitionTime": "2026-11-25T09:00:00Z",
                }
            ]
        }
        emu.failures = [503]  # the first read (does the job exist?) fails once

        def flaky() -> None:
            emu.failures.extend([500, 429])
            time.sleep(0.5)
            emu.set_status("trainjobs", NS, name, done)

        _controller(emu, name, [flaky])
        _launch(emu, log)
        assert emu.count("create", "trainjobs") == 1 and not emu.failures
        assert sum("API read failed (HTTP" in line for line in log) == 3
        emu.failures = [403]
        with pytest.raises(ApiException) as err:
            Launcher(emu.client(), NS, poll_s=0.01, log=log.append).get(name)
        assert err.value.status == 403


@pytest.mark.parametrize("committed", [False, True])
def test_a_create_or_delete_the_api_server_answers_with_5xx_is_retried(committed):
    """An API server answers 5xx when its storage times out (k8s.io/apiserver v0.33.0, pkg/storage/errors.go,
    ErrCodeTimeout: the write may or may not have been made) and 429 when it sheds load (pkg/server/filters/
    maxinflight.go): transient, like the reads already retried. A
    create that was made before its error finds the job on its retry (409 AlreadyExists) and goes on; a 4xx
    other than 429 fails at once."""
    from kubernetes.client.exceptions import ApiException

    name = job_name(RUN, "sft")
    log: list[str] = []
    done = {"conditions": [{"type": "Complete", "status": "True", "reason": "x", "message": "",
                            "lastTransitionTime": "2026-11-25T09:00:00Z"}]}  # fmt: skip
    with Emulator() as emu:
        emu.write_failures = [("create", 500, committed), ("delete", 503, committed), ("delete", 429, False)]
        _controller(emu, name, [lambda: emu.set_status("trainjobs", NS, name, done)])
        _launch(emu, log)
        assert emu.count("create", "trainjobs") == 2 and not emu.write_failures
        assert emu.get("trainjobs", NS, name) is None  # deleted after completion, through the errors
        assert sum("create failed (HTTP 500)" in line for line in log) == 1
        emu.write_failures = [("create", 403, False)]
        with pytest.raises(ApiException) as err:
            Launcher(emu.client(), NS, poll_s=0.01, log=log.append).start(manifest())
        assert err.value.status == 403 and emu.count("create", "trainjobs") == 3


def test_sigterm_to_the_step_deletes_its_job_and_a_rerun_creates_it_again(tmp_path, monkeypatch, capsys):
    """Terminating a run (or the step's deadline) stops the step with SIGTERM: Argo v4.0.5 signals the main
    container (workflow/controller/pod/queue.go, terminateContainers: SIGTERM, SIGKILL after the grace
    period), its emissary passes the signal to the step's process group (workflow/executor/osspecific,
    Kill). Without a handler the TrainJob stays, holding 2x8 GPUs until its activeDeadlineSeconds (48 h).
    The component's body gets SIGTERM while following the job in the emulator: the job is deleted and the
    step exits 143; a rerun of the step creates the job once more, with the same config (the same output
    URI, whose checkpoints the stage resumes from)."""
    from kfp.dsl import HTML, Artifact, Metrics, Model

    from components.multinode import sft_trainjob_op

    ns, name = "default", job_name(RUN, "sft")  # no in-cluster namespace file here: "default"
    kubeconfig = tmp_path / "kubeconfig"
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    before = signal.getsignal(signal.SIGTERM)
    jobs: list[dict] = []
    with Emulator() as emu:
        emu.register_crd(crd())
        _kubeconfig(emu, kubeconfig)

        def running() -> None:
            emu.set_status("trainjobs", ns, name, {"jobsStatus": [{"name": "node", "active": 2, "ready": 2}]})

        def terminate() -> None:
            jobs.append(emu.get("trainjobs", ns, name))
            os.kill(os.getpid(), signal.SIGTERM)  # what Argo's emissary does to the step's process group

        _controller(emu, name, [running, lambda: time.sleep(0.3), terminate])
        outputs = [HTML(name="c"), Metrics(name="m"), Model(name="o")]
        with pytest.raises(SystemExit) as exited:
            sft_trainjob_op.python_func(
                config_yaml=(ROOT / "configs/sft/tiny.yaml").read_text(),
                overrides=[],
                data_uri="s3://bucket/runs/x/data",
                model_uri="s3://bucket/models/base",
                nodes=2,
                gpus_per_node=8,
                api="trainjob",
                runtime="torch-distributed",
                poll_s=0.05,
                node_spec={"image": "registry/paravt-sft:1"},
                media_pvc="",
                curve=outputs[0],
                metrics=outputs[1],
                model=outputs[2],
                tensorboard=Artifact(name="tb"),
                output="s3://bucket/runs/x/sft",
                run_id=RUN,
            )
        assert exited.value.code == 143
        assert emu.get("trainjobs", ns, name) is None  # the GPUs are free now
        assert (emu.count("create", "trainjobs"), emu.count("delete", "trainjobs")) == (1, 1)
        assert signal.getsignal(signal.SIGTERM) is before  # the step's handler is gone again
        out = capsys.readouterr().out
        assert f"TrainJob {name}: SIGTERM (Argo stopped the step" in out and "); deleted the job" in out

        # The retried step: nothing to re-attach to, so the job is created once more, the same job.
        emu.created.clear()
        ctl = _controller(
            emu, name, [lambda: jobs.append(emu.get("trainjobs", ns, name)), lambda: _complete(emu, ns, name)]
        )
        config = next(e["value"] for e in jobs[0]["spec"]["trainer"]["env"] if e["name"] == CONFIG_ENV)
        # the nodes' trackers name their run after the pipeline run, as the one-node steps do
        assert {"name": "KFP_RUN_ID", "value": RUN} in jobs[0]["spec"]["trainer"]["env"]
        log: list[str] = []
        launch_stage("sft", config, run_id=RUN, nodes=2, gpus_per_node=8, api="trainjob",
                     spec=with_run_id(NodeSpec(image="registry/paravt-sft:1"), RUN), namespace=ns, poll_s=0.05,
                     client=emu.client(), log=log.append, timeout_s=30)  # fmt: skip
        ctl.join(5)
        assert emu.count("create", "trainjobs") == 2 and emu.get("trainjobs", ns, name) is None
        assert f"TrainJob {name}: created in {ns}" in log and not any("re-attaching" in line for line in log)
    assert jobs[1]["spec"] == jobs[0]["spec"]
    assert "output: s3://bucket/runs/x/sft" in config
