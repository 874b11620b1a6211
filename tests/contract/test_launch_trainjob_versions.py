"""The TrainJob follows the installed Trainer: its CRD's ``spec`` fields decide between ``runtimePatches``
(Trainer v2.2.0 and later) and ``podTemplateOverrides`` (v2.1.0, what Kubeflow 1.11.0 ships), and whether the
job's deadline is a field or the nodes' own. Each manifest is checked against that version's real schema:
jsonschema, and no field the schema does not declare (what a Strict create refuses with HTTP 400).

Schemas: ``manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml`` of kubeflow/trainer at v2.1.0
(commit 73c9bece) and v2.2.0 (commit dc7656ad), trimmed (tests/fixtures/k8s/SOURCE.md), and at v2.3.0 as
vendored. Kubeflow 1.11.0 ships the v2.1.0 file unchanged (kubeflow/manifests v1.11.0,
applications/trainer/upstream/base/crds/, the same git blob 80195dc4)."""

from __future__ import annotations

import datetime
import functools
import json
import os
import stat
import subprocess
import time
from pathlib import Path

import jsonschema
import pytest
import yaml

from paravt_core.config_base import ConfigError
from paravt_core.launch.trainjob import (
    CONFIG_ENV,
    TRAINJOB_CRD,
    crd_spec_fields,
    job_name,
    labels,
    launch_stage,
    node_command,
    step_time_left,
    trainjob_manifest,
    trainjob_spec_fields,
)
from tests.support.k8s_emulator import Emulator, unknown_fields
from tests.support.paths import ROOT
from tests.support.trainjob_support import CONFIG, NS, RUN, spec

K8S = ROOT / "tests/fixtures/k8s"
VERSIONS = {
    "v2.1.0": K8S / "trainer.kubeflow.org_trainjobs.v2.1.0.trimmed.yaml",
    "v2.2.0": K8S / "trainer.kubeflow.org_trainjobs.v2.2.0.trimmed.yaml",
    "v2.3.0": K8S / "trainer.kubeflow.org_trainjobs.v2.3.0.yaml",
}
NOW = 1_800_000_000  # a fixed "now" (2027-01-15) for the nodes' own deadline
DEADLINE = 48 * 3600  # spec()'s active_deadline_s


@functools.cache
def crd(version: str) -> dict:
    return next(d for d in yaml.load_all(VERSIONS[version].read_text(), Loader=yaml.CSafeLoader) if d)


def schema(version: str) -> dict:
    return crd(version)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def build(version: str, node_spec=None) -> dict:
    fields = crd_spec_fields(crd(version), "v1alpha1")
    return trainjob_manifest(
        job_name(RUN, "sft"), NS, "sft", node_spec or spec(), nodes=2, gpus_per_node=8, config_yaml=CONFIG,
        job_labels=labels(RUN, "sft"), spec_fields=fields, now=NOW,
    )  # fmt: skip


def test_the_schemas_differ_where_the_manifest_does():
    """What the fixtures say, read by hand off the upstream files: v2.1.0 has podTemplateOverrides and no
    activeDeadlineSeconds; v2.2.0 and v2.3.0 have runtimePatches and activeDeadlineSeconds."""
    fields = {v: crd_spec_fields(crd(v), "v1alpha1") for v in VERSIONS}
    assert "podTemplateOverrides" in fields["v2.1.0"] and "runtimePatches" not in fields["v2.1.0"]
    assert "activeDeadlineSeconds" not in fields["v2.1.0"]
    for v in ("v2.2.0", "v2.3.0"):
        assert {"runtimePatches", "activeDeadlineSeconds"} <= fields[
            v
        ] and "podTemplateOverrides" not in fields[v]
    assert crd_spec_fields(crd("v2.1.0"), "v1") is None  # no such version served


@pytest.mark.parametrize("version", list(VERSIONS))
def test_the_manifest_for_each_version_validates_against_its_schema(version):
    m = build(version)
    jsonschema.validate(m, schema(version))
    assert unknown_fields(m, schema(version), root=True) == []


def test_the_v2_2_manifest_is_what_v2_1_refuses():
    """The v2.2+ shape on Trainer v2.1.0: a Strict create is refused (HTTP 400) naming both fields."""
    from kubernetes.client.exceptions import ApiException

    from paravt_core.launch.trainjob import Launcher

    m = build("v2.3.0")
    assert sorted(unknown_fields(m, schema("v2.1.0"), root=True)) == [
        "spec.activeDeadlineSeconds", "spec.runtimePatches"
    ]  # fmt: skip
    with Emulator() as emu:
        emu.register_crd(crd("v2.1.0"))
        with pytest.raises(ApiException) as err:
            Launcher(emu.client(), NS, poll_s=0.05, log=lambda _: None).start(m)
    assert err.value.status == 400
    assert 'unknown field "spec.runtimePatches"' in json.loads(err.value.body)["message"]


def test_v2_1_gets_pod_template_overrides_and_the_nodes_carry_the_deadline():
    m = build("v2.1.0")
    assert "runtimePatches" not in m["spec"] and "activeDeadlineSeconds" not in m["spec"]
    (over,) = m["spec"]["podTemplateOverrides"]
    assert over["targetJobs"] == [{"name": "node"}]
    assert over["metadata"] == {"annotations": {"sidecar.istio.io/inject": "false"}}
    assert over["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert over["spec"]["tolerations"] == spec().tolerations
    assert [v["name"] for v in over["spec"]["volumes"]] == ["media", "dshm"]
    assert over["spec"]["containers"] == [
        {"name": "node", "volumeMounts": [{"name": "media", "mountPath": "/mnt/media"},
                                          {"name": "dshm", "mountPath": "/dev/shm"}]}
    ]  # fmt: skip
    assert "securityContext" not in str(over)  # v2.1.0's override has no such field
    script = m["spec"]["trainer"]["command"][2]
    assert script.startswith(f"left=$(({NOW + DEADLINE} - $(date +%s)));")
    assert 'exec timeout -k 60 "$left" torchrun -m paravt_core.cli sft' in script
    # v2.2.0: the field, and the command as before.
    m22 = build("v2.2.0")
    assert m22["spec"]["activeDeadlineSeconds"] == DEADLINE
    assert m22["spec"]["trainer"]["command"] == node_command("sft", "trainjob", 2, 8)


def test_capabilities_cannot_go_through_v2_1():
    with pytest.raises(ConfigError, match="Trainer v2.2 or later"):
        build("v2.1.0", spec().__class__(image="x", capabilities=["IPC_LOCK"]))


def _stub(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.mark.parametrize("ahead_s, code", [(3600, 0), (-5, 124)])
def test_the_node_command_stops_at_the_absolute_deadline(tmp_path, ahead_s, code):
    """The real ``/bin/sh`` and coreutils ``timeout`` run the command; a stand-in ``torchrun`` prints what
    it got. A deadline in the past (a pod the Job controller restarted after it) ends at once with 124."""
    _stub(tmp_path, "torchrun", 'echo "torchrun $*"; cat "${TMPDIR:-/tmp}/paravt-stage.yaml"\n')
    cmd = node_command("sft", "trainjob", 2, 8, deadline_epoch=int(time.time()) + ahead_s)
    env = {
        **os.environ,
        "PATH": f"{tmp_path}:{os.environ['PATH']}",
        CONFIG_ENV: "a: 1",
        "TMPDIR": str(tmp_path),
    }
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == code, out.stderr
    if code == 0:
        assert out.stdout.startswith("torchrun -m paravt_core.cli sft --config") and out.stdout.endswith(
            "a: 1"
        )
    else:
        assert out.stdout == ""


def _pod(started: datetime.datetime, deadline_s: int | None) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "step-pod", "namespace": NS, "labels": {}},
        "spec": {"containers": [{"name": "main", "image": "x"}], "activeDeadlineSeconds": deadline_s},
        "status": {"phase": "Running", "startTime": started.strftime("%Y-%m-%dT%H:%M:%SZ")},
    }  # fmt: skip


def _launch_in(emu: Emulator, monkeypatch, log: list) -> None:
    monkeypatch.setenv("KFP_POD_NAME", "step-pod")
    done = {"conditions": [{"type": "Complete", "status": "True", "reason": "x", "message": ""}]}

    def complete() -> None:
        assert emu.created.wait(10)
        emu.set_status("trainjobs", NS, job_name(RUN, "sft"), done)

    import threading

    threading.Thread(target=complete, daemon=True).start()
    launch_stage("sft", CONFIG, run_id=RUN, nodes=2, gpus_per_node=8, api="trainjob", spec=spec(),
                 namespace=NS, poll_s=0.05, client=emu.client(), log=log.append, timeout_s=30)  # fmt: skip


@pytest.mark.parametrize("version", list(VERSIONS))
def test_launch_reads_the_installed_crd_and_bounds_the_job_by_the_step(version, monkeypatch):
    """The step reads the CRD the emulator serves (the real schema), creates with Strict field validation
    (accepted), and the job's deadline is the step pod's own time left: 10 h into a 48 h attempt, 38 h."""
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    with Emulator() as emu:
        emu.register_crd(crd(version))
        emu.put_pod(_pod(now - datetime.timedelta(hours=10), DEADLINE))
        created: list[dict] = []
        orig = emu.handle

        def spy(method, path, body):
            if method == "POST":
                created.append(body)
            return orig(method, path, body)

        emu.handle = spy  # type: ignore[method-assign]
        log: list[str] = []
        _launch_in(emu, monkeypatch, log)
        assert emu.count("get", "customresourcedefinitions") == 1
        assert emu.field_validation == ["Strict"]
    (m,) = created
    left = 38 * 3600
    if version == "v2.1.0":
        assert "podTemplateOverrides" in m["spec"]
        epoch = int(m["spec"]["trainer"]["command"][2].split("$((")[1].split(" ")[0])
        assert abs(epoch - (now.timestamp() + left)) <= 5
    else:
        assert "runtimePatches" in m["spec"]
        assert abs(m["spec"]["activeDeadlineSeconds"] - left) <= 5


def test_an_unreadable_crd_falls_back_to_the_current_shape_and_says_so(monkeypatch):
    with Emulator() as emu:
        emu.register_crd(crd("v2.3.0"))
        emu.forbidden.add("customresourcedefinitions")
        assert trainjob_spec_fields(emu.client()) is None
        log: list[str] = []
        _launch_in(emu, monkeypatch, log)  # no step pod readable: the job keeps spec()'s deadline
    assert any(TRAINJOB_CRD in line and "runtimePatches" in line for line in log)


def test_step_time_left_follows_the_pods_start_and_deadline():
    from kubernetes import client

    started = datetime.datetime(2027, 1, 1, tzinfo=datetime.UTC)
    pod = client.V1Pod(spec=client.V1PodSpec(containers=[], active_deadline_seconds=7200),
                       status=client.V1PodStatus(start_time=started))  # fmt: skip
    assert step_time_left(pod, now=started.timestamp() + 1800) == 5400
    assert step_time_left(pod, now=started.timestamp() + 9000) == 1  # past it: the least the fields take
    assert step_time_left(client.V1Pod(spec=client.V1PodSpec(containers=[]))) is None
    assert step_time_left(None) is None
