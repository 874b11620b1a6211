"""``paravt pipeline doctor`` against the Kubernetes API emulator loaded as each supported install ships:

- Kubeflow 1.11.0 (kubeflow/manifests v1.11.0): Trainer v2.1.0's TrainJob CRD (applications/trainer/upstream,
  the same blob as kubeflow/trainer v2.1.0 manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml), the
  training operator commented out (example/kustomization.yaml), KFP 2.15.0's Argo ConfigMap patch
  (manifests/kustomize/third-party/argo/base/workflow-controller-configmap-patch.yaml: no workflowDefaults),
  profile namespaces labelled ``pod-security.kubernetes.io/enforce: baseline``
  (applications/profiles/pss/namespace-labels.yaml);
- standalone KFP 2.17.0 + Trainer v2.2.0: that CRD, KFP 2.17.0's Argo ConfigMap patch (workflowDefaults: TTL
  3600 s, retryPolicy OnError), the ``kubeflow`` namespace without a PSS label.

KFP's ScheduledWorkflow CRD: kubeflow/pipelines 2.15.0 manifests/kustomize/base/pipeline/cluster-scoped/
scheduled-workflow-crd.yaml (unchanged in 2.17.0). Fixtures: tests/fixtures/k8s/SOURCE.md."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from paravt_core.cli import main
from pipelines.doctor import diagnose, doctor
from tests.support.k8s_emulator import Emulator
from tests.support.paths import ROOT

K8S = ROOT / "tests/fixtures/k8s"


def _doc(path: Path, kind: str = "", name: str = "") -> dict:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return next(
        d for d in docs if (not kind or d["kind"] == kind) and (not name or d["metadata"]["name"] == name)
    )


def _kfp_launcher() -> dict:
    return _doc(ROOT / "manifests/base/kfp-launcher.yaml", "ConfigMap", "kfp-launcher")


def _install(emu: Emulator, *, trainer: str, kfp: str, namespace: str, labels: dict[str, str]) -> None:
    emu.register_crd(_doc(K8S / f"trainer.kubeflow.org_trainjobs.{trainer}.trimmed.yaml"))
    emu.register_crd(_doc(K8S / "kubeflow.org_scheduledworkflows.kfp-2.15.0.yaml"))
    emu.configmaps[("kubeflow", "workflow-controller-configmap")] = _doc(
        K8S / f"argo-workflow-controller-configmap.kfp-{kfp}.yaml"
    )
    emu.configmaps[(namespace, "kfp-launcher")] = _kfp_launcher()
    emu.namespaces[namespace] = {"apiVersion": "v1", "kind": "Namespace",
                                 "metadata": {"name": namespace, "labels": labels}}  # fmt: skip


def _run(emu: Emulator, namespace: str) -> tuple[int, list[str]]:
    out: list[str] = []
    code = doctor(namespace, "kubeflow", api_client=emu.client(), out=out.append)
    return code, out


def test_kubeflow_1_11_as_shipped_runs_and_says_what_will_not_work():
    with Emulator() as emu:
        _install(emu, trainer="v2.1.0", kfp="2.15.0", namespace="paravt",
                 labels={"pod-security.kubernetes.io/enforce": "baseline"})  # fmt: skip
        code, out = _run(emu, "paravt")
    text = "\n".join(out)
    assert code == 0, text  # nothing blocks: the TrainJob is built for v2.1
    warnings = [line for line in out if line.startswith("warning: ")]
    assert any(
        "Trainer v2.1's (podTemplateOverrides" in w and "paravt-trainjob-crd-reader" in w for w in warnings
    )
    assert any("no Workflow TTL" in w for w in warnings)
    assert any("retry policy OnFailure (Argo's default" in w for w in warnings)
    assert any("Pod Security baseline" in w and "launch.ipc_lock" in w for w in warnings)
    assert "warning: no TrainJob CRD" not in text and "PyTorchJob" not in text.split("neither")[0]
    assert "ok: KFP ScheduledWorkflow v1beta1" in out
    assert "ok: paravt/kfp-launcher: pipeline root s3://paravt-artifacts/kfp" in out
    assert out[-1] == "doctor: 0 blocking, 4 warnings (namespace paravt, KFP in kubeflow)"


def test_standalone_kfp_2_17_with_trainer_2_2():
    with Emulator() as emu:
        _install(emu, trainer="v2.2.0", kfp="2.17.0", namespace="kubeflow", labels={})
        code, out = _run(emu, "kubeflow")
    assert code == 0
    assert "ok: TrainJob v1alpha1 with runtimePatches (Kubeflow Trainer v2.2 or later)" in out
    ttl = {"secondsAfterCompletion": 3600, "secondsAfterSuccess": 3600, "secondsAfterFailure": 3600}
    assert f"ok: Workflow TTL {ttl}" in out
    (retry,) = [line for line in out if "retry policy" in line]
    assert (
        retry.startswith("warning: retry policy OnError (workflowDefaults)") and "kubelet terminates" in retry
    )
    assert not [line for line in out if "Pod Security" in line]  # unlabelled: privileged
    assert out[-1] == "doctor: 0 blocking, 1 warnings (namespace kubeflow, KFP in kubeflow)"


def test_what_blocks_exits_non_zero_through_the_cli(tmp_path, monkeypatch, capsys):
    """A restricted namespace with Trainer v2.1 (no securityContext for the node pods), no kfp-launcher, no
    ScheduledWorkflow CRD: three blocking lines and exit 1, through ``paravt pipeline doctor`` and a
    kubeconfig that points at the emulator."""
    with Emulator() as emu:
        _install(emu, trainer="v2.1.0", kfp="2.15.0", namespace="paravt",
                 labels={"pod-security.kubernetes.io/enforce": "restricted"})  # fmt: skip
        del emu.configmaps[("paravt", "kfp-launcher")]
        del emu.crds["scheduledworkflows.kubeflow.org"]
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "emu",
            "clusters": [{"name": "emu", "cluster": {"server": emu.host}}],
            "users": [{"name": "me", "user": {"token": "x"}}],
            "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "me", "namespace": "paravt"}}],
        }))  # fmt: skip
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        code = main(["pipeline", "doctor"])  # the namespace from the context
    out = capsys.readouterr().out.splitlines()
    blocks = [line for line in out if line.startswith("blocks: ")]
    assert code == 1, out
    assert len(blocks) == 3, blocks
    assert any("no ConfigMap kfp-launcher in paravt" in b for b in blocks)
    assert any("ScheduledWorkflow CRD is missing" in b for b in blocks)
    assert any("Pod Security restricted" in b and "securityContext" in b for b in blocks)
    assert out[-1].startswith("doctor: 3 blocking")


def test_what_it_may_not_read_is_said_not_guessed():
    with Emulator() as emu:
        _install(emu, trainer="v2.2.0", kfp="2.17.0", namespace="paravt", labels={})
        emu.forbidden |= {"customresourcedefinitions", "configmaps", "namespaces"}
        lines = diagnose(emu.client(), "paravt")
    text = [str(line) for line in lines]
    assert all(line.level == "warning" for line in lines), text
    assert any("cannot read CustomResourceDefinitions" in t for t in text)
    assert any("cannot read ConfigMap paravt/kfp-launcher (HTTP 403)" in t for t in text)
    assert any("cannot read kubeflow/workflow-controller-configmap (HTTP 403)" in t for t in text)
    assert any("Pod Security level unknown" in t for t in text)


def test_help_says_what_it_checks(capsys):
    with pytest.raises(SystemExit):
        main(["pipeline", "doctor", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for thing in ("runtimePatches", "PyTorchJob", "Kueue", "ScheduledWorkflow", "kfp-launcher",
                  "pod-security.kubernetes.io/enforce", "workflowDefaults", "exit code is 1"):  # fmt: skip
        assert thing in text, thing
