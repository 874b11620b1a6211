"""The train pipeline compiles to KFP IR with the cluster settings every stage needs, and no secrets."""

from __future__ import annotations

import yaml

from paravt_core.cli import main


def _compile(tmp_path, monkeypatch) -> tuple[str, list[dict]]:
    # A secret in the compiling environment must not leak into the IR.
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "do-not-leak-4b1d")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "do-not-leak-key-id")
    out = tmp_path / "train.yaml"
    assert main(["pipeline", "compile", str(out)]) == 0
    text = out.read_text()
    return text, list(yaml.safe_load_all(text))


def test_train_pipeline_ir(tmp_path, monkeypatch) -> None:
    text, docs = _compile(tmp_path, monkeypatch)
    spec, platform = docs[0], docs[1]
    assert spec["pipelineInfo"]["name"] == "paravt-train"
    assert set(spec["components"]) == {"comp-data-op"}
    task = spec["root"]["dag"]["tasks"]["data-op"]
    assert task["retryPolicy"]["maxRetryCount"] == 3
    assert task["retryPolicy"]["backoffDuration"] == "60s"
    assert task["cachingOptions"] == {}  # caching off: enableCache is omitted when false
    executor = spec["deploymentSpec"]["executors"]["exec-data-op"]["container"]
    assert executor["image"].startswith("paravt-sft")
    assert executor["resources"]["resourceCpuLimit"] == "4"
    assert executor["resources"]["resourceMemoryLimit"] == "16G"
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-data-op"]
    envs = {e["envVar"] for e in k8s["secretAsEnv"][0]["keyToEnv"]}
    assert envs == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"}
    assert k8s["secretAsEnv"][0]["secretName"] == "paravt-s3"
    assert k8s["activeDeadlineSeconds"] == "86400"
    # The data stage extracts media onto the media volume (a pipeline parameter names the claim).
    assert k8s["pvcMount"][0]["mountPath"] == "/mnt/media"
    assert k8s["pvcMount"][0]["pvcNameParameter"] == {"componentInputParameter": "media_pvc"}
    assert "do-not-leak" not in text


def test_image_digest_override(tmp_path, monkeypatch) -> None:
    import importlib

    import components.data
    import components.images
    import pipelines.train

    digest = "registry.example/paravt-sft@sha256:" + "a" * 64
    monkeypatch.setenv("PARAVT_IMAGE_SFT", digest)
    try:
        importlib.reload(components.images)
        importlib.reload(components.data)
        importlib.reload(pipelines.train)
        _, docs = _compile(tmp_path, monkeypatch)
        assert docs[0]["deploymentSpec"]["executors"]["exec-data-op"]["container"]["image"] == digest
    finally:
        monkeypatch.delenv("PARAVT_IMAGE_SFT")
        importlib.reload(components.images)
        importlib.reload(components.data)
        importlib.reload(pipelines.train)


def test_unknown_pipeline_name(tmp_path) -> None:
    import pytest

    from pipelines.compile import compile_pipeline

    with pytest.raises(ValueError, match="known: nightly, train"):
        compile_pipeline("nightly-typo", str(tmp_path / "x.yaml"))
