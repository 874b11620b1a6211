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
    assert set(spec["components"]) == {
        "comp-data-op",
        "comp-sft-op",
        "comp-rl-op",
        "comp-eval-shards-op",
        "comp-for-loop-1",
        "comp-eval-op",
        "comp-for-loop-2",
        "comp-eval-merge-op",
        "comp-report-op",
    }
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
    assert envs == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert k8s["secretAsEnv"][0]["secretName"] == "paravt-s3"
    # Endpoint and region: the ConfigMap that KFP's launcher config is rendered from (manifests/).
    (config,) = k8s["configMapAsEnv"]
    assert config["configMapName"] == "paravt-s3-config"
    assert {e["envVar"] for e in config["keyToEnv"]} == {"AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION"}
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

    with pytest.raises(ValueError, match="known: ablations, nightly, train"):
        compile_pipeline("nightly-typo", str(tmp_path / "x.yaml"))


def test_train_dag_wiring_images_and_resources(tmp_path, monkeypatch) -> None:
    text, docs = _compile(tmp_path, monkeypatch)
    spec, platform = docs[0], docs[1]
    tasks = spec["root"]["dag"]["tasks"]
    # data -> sft -> rl -> ParallelFor(benchmark x shard) eval -> ParallelFor(benchmarks) merge -> report
    # (fan-in); tests/e2e/test_pipeline_eval_shards.py checks the eval step itself.
    assert tasks["sft-op"]["dependentTasks"] == ["data-op"]
    assert sorted(tasks["rl-op"]["dependentTasks"]) == ["data-op", "sft-op"]
    # Lineage: SFT and RL take the data step's Dataset artifact (not its URI as text), so the driver
    # resolves it from ML Metadata and records it as the tasks' input.
    assert tasks["sft-op"]["inputs"]["artifacts"] == {
        "data": {"taskOutputArtifact": {"producerTask": "data-op", "outputArtifactKey": "dataset"}}
    }
    # RL's starting checkpoint is SFT's output URI, not an input artifact: KFP 2.17.0's launcher copies
    # every input artifact's prefix into the pod before the step (backend/src/v2/component/launcher_v2.go,
    # downloadArtifacts; into the emptyDir of compiler/argocompiler/container.go, s3-scratch) and the IR
    # has no ephemeral-storage request: ~16 GB of node disk on every attempt, for a checkpoint the stage
    # reads from S3 itself.
    assert tasks["rl-op"]["inputs"]["artifacts"] == {
        "data": {"taskOutputArtifact": {"producerTask": "data-op", "outputArtifactKey": "dataset"}},
    }
    assert tasks["rl-op"]["inputs"]["parameters"]["model"] == {
        "taskOutputParameter": {"producerTask": "sft-op", "outputParameterKey": "Output"}
    }
    assert not {"data", "data_uri", "model"} & set(tasks["sft-op"]["inputs"]["parameters"])
    inputs = {
        name: {k: v["artifactType"]["schemaTitle"] for k, v in c["inputDefinitions"]["artifacts"].items()}
        for name, c in spec["components"].items()
        if name in ("comp-sft-op", "comp-rl-op")
    }
    assert inputs == {
        "comp-sft-op": {"data": "system.Dataset"},
        "comp-rl-op": {"data": "system.Dataset"},
    }
    loop = tasks["for-loop-1"]
    assert loop["parameterIterator"]["items"]["inputParameter"] == "pipelinechannel--eval-shards-op-Output"
    assert sorted(loop["dependentTasks"]) == ["eval-shards-op", "rl-op"]
    assert tasks["for-loop-2"]["dependentTasks"] == ["for-loop-1"]
    # The GPU count reaches the eval tasks inside the loop (kfp 2.17 drops it unless passed as an input).
    loop_inputs = spec["components"]["comp-for-loop-1"]["inputDefinitions"]["parameters"]
    assert "pipelinechannel--eval_gpus" in loop_inputs
    collected = tasks["report-op"]["inputs"]["parameters"]["eval_outputs"]["taskOutputParameter"]
    assert collected == {
        "producerTask": "for-loop-2",
        "outputParameterKey": "pipelinechannel--eval-merge-op-Output",
    }
    # Outputs under the run's root: run_prefix (default empty) and the run id, resolved by the driver.
    for name in ("data-op", "sft-op", "rl-op", "report-op"):
        inputs = tasks[name]["inputs"]["parameters"]
        assert inputs["run_prefix"] == {"componentInputParameter": "run_prefix"}, name
        assert inputs["run_id"] == {"runtimeValue": {"constant": "{{$.pipeline_job_uuid}}"}}, name
    assert spec["root"]["inputDefinitions"]["parameters"]["run_prefix"]["defaultValue"] == ""
    # The data and checkpoints are typed artifacts (their URIs: the stage directories, set at run time).
    outputs = {
        name: {
            k: v["artifactType"]["schemaTitle"]
            for k, v in c["outputDefinitions"].get("artifacts", {}).items()
        }
        for name, c in spec["components"].items()
        if name in ("comp-data-op", "comp-sft-op", "comp-rl-op")
    }
    assert outputs["comp-data-op"]["dataset"] == "system.Dataset"
    assert outputs["comp-sft-op"]["model"] == "system.Model"
    assert outputs["comp-rl-op"]["trained"] == "system.Model"
    executors = spec["deploymentSpec"]["executors"]
    images = {name: e["container"]["image"].split(":")[0] for name, e in executors.items()}
    assert images == {
        "exec-data-op": "paravt-sft",
        "exec-sft-op": "paravt-sft",
        "exec-rl-op": "paravt-rl",
        "exec-eval-op": "paravt-eval",
        "exec-eval-shards-op": "paravt-eval",
        "exec-eval-merge-op": "paravt-eval",
        "exec-report-op": "paravt-eval",
    }
    for stage in ("sft", "rl", "eval"):
        accel = executors[f"exec-{stage}-op"]["container"]["resources"]["accelerator"]
        assert accel["resourceCount"] == f"{{{{$.inputs.parameters['pipelinechannel--{stage}_gpus']}}}}"
    for name in ("exec-report-op", "exec-eval-shards-op", "exec-eval-merge-op"):
        assert "accelerator" not in executors[name]["container"]["resources"], name
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert {name for name, e in k8s.items() if "emptyDirMounts" in e} == {
        "exec-sft-op",
        "exec-rl-op",
        "exec-eval-op",
    }
    assert {name for name, e in k8s.items() if "pvcMount" in e} == {
        "exec-data-op",
        "exec-sft-op",
        "exec-rl-op",
        "exec-eval-op",
        "exec-eval-merge-op",
    }
    assert all(e["secretAsEnv"][0]["secretName"] == "paravt-s3" for e in k8s.values())
    eval_task = spec["components"]["comp-for-loop-1"]["dag"]["tasks"]["eval-op"]
    merge_task = spec["components"]["comp-for-loop-2"]["dag"]["tasks"]["eval-merge-op"]
    steps = ("data-op", "sft-op", "rl-op", "eval-shards-op", "report-op")
    for task in [*(tasks[t] for t in steps), eval_task, merge_task]:
        assert task["retryPolicy"]["maxRetryCount"] == 3 and task["cachingOptions"] == {}
