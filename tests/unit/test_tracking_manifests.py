"""The example ``Tensorboard`` resources (manifests/examples/) against the CRD's schema, as the API server
checks them, and the components' ``tensorboard`` outputs in the compiled pipeline."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.support.paths import ROOT

CRD = ROOT / "tests" / "fixtures" / "k8s" / "tensorboard.kubeflow.org_tensorboards.notebooks-44c97f1.yaml"


def _schema() -> dict:
    crd = next(d for d in yaml.safe_load_all(CRD.read_text()) if d)
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1" and crd["spec"]["group"] == "tensorboard.kubeflow.org"
    return version["schema"]["openAPIV3Schema"]


def _tensorboards() -> dict[str, dict]:
    out = {}
    for path in sorted((ROOT / "manifests" / "examples").glob("tensorboard-*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == "Tensorboard":
                out[path.name] = doc
    return out


def test_example_tensorboards_follow_the_crd_schema() -> None:
    schema = _schema()
    found = _tensorboards()
    assert set(found) == {"tensorboard-s3.yaml", "tensorboard-pvc.yaml"}
    for doc in found.values():
        assert doc["apiVersion"] == "tensorboard.kubeflow.org/v1alpha1"
        jsonschema.validate(doc, schema)
    # the controller's two log sources (tensorboard_controller.go: isCloudPath, isPVCPath): S3 and a claim
    assert found["tensorboard-s3.yaml"]["spec"]["logspath"].startswith("s3://")
    assert found["tensorboard-pvc.yaml"]["spec"]["logspath"] == "pvc://paravt-media/runs"
    media = yaml.safe_load((ROOT / "manifests" / "volumes" / "media-pvc.yaml").read_text())
    assert media["metadata"]["name"] == "paravt-media"


def test_the_schema_refuses_a_tensorboard_without_logspath() -> None:
    bad = {"apiVersion": "tensorboard.kubeflow.org/v1alpha1", "kind": "Tensorboard", "metadata": {"name": "x"},
           "spec": {"logsPath": "s3://b/p"}}  # fmt: skip
    with pytest.raises(jsonschema.ValidationError, match="'logspath' is a required property"):
        jsonschema.validate(bad, _schema())


@pytest.mark.parametrize("name", ["sft_op", "rl_op", "eval_merge_op", "sft_trainjob_op", "rl_trainjob_op"])
def test_training_and_eval_steps_output_their_tensorboard_logs(name: str, tmp_path: Path) -> None:
    from kfp import compiler

    import components.eval
    import components.multinode
    import components.rl
    import components.sft

    op = {"sft_op": components.sft.sft_op, "rl_op": components.rl.rl_op,
          "eval_merge_op": components.eval.eval_merge_op,
          "sft_trainjob_op": components.multinode.sft_trainjob_op,  # launch.nodes > 1
          "rl_trainjob_op": components.multinode.rl_trainjob_op}[name]  # fmt: skip
    compiler.Compiler().compile(op, str(tmp_path / "c.yaml"))
    spec = yaml.safe_load((tmp_path / "c.yaml").read_text())
    (component,) = spec["components"].values()
    artifact = component["outputDefinitions"]["artifacts"]["tensorboard"]
    assert artifact["artifactType"]["schemaTitle"] == "system.Artifact"
    (executor,) = spec["deploymentSpec"]["executors"].values()
    body = executor["container"]["command"][-1]  # the spec's body: one call into the image's launcher
    module, step = re.search(r"from (components\.launchers\.\w+) import (\w+)", body).groups()
    assert f"return {step}(" in body and "tensorboard=tensorboard," in body
    assert "publish_tensorboard(tensorboard, " in inspect.getsource(
        getattr(importlib.import_module(module), step)
    )


def test_demo_prints_the_one_tensorboard_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipelines.local import tensorboard_command

    monkeypatch.chdir(tmp_path)
    assert tensorboard_command(str(tmp_path / "demo-out" / "run")) == "tensorboard --logdir demo-out/run"
    assert tensorboard_command("/elsewhere/run") == "tensorboard --logdir /elsewhere/run"
