"""The nightly eval pipeline: compiled IR (fan-out, exit-handler report, platform settings, no secrets,
the manifests' parameters exist) and a local run whose eval fails, showing the night as failed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from paravt_core import storage
from paravt_core.cli import main
from paravt_core.report.stage import night_uri
from paravt_core.report.trend import SUCCEEDED, BenchmarkResult, Night
from pipelines.local import run_nightly_locally
from tests.support.paths import ROOT


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> tuple[str, dict, dict]:
    out = tmp_path_factory.mktemp("nightly") / "nightly.yaml"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_SECRET_ACCESS_KEY", "leak-canary-nightly-5")
        assert main(["pipeline", "compile", "nightly", str(out)]) == 0
    text = out.read_text()
    spec, platform_spec = yaml.safe_load_all(text)
    return text, spec, platform_spec["platforms"]["kubernetes"]["deploymentSpec"]["executors"]


def test_nightly_ir_structure(compiled) -> None:
    text, spec, _ = compiled
    assert "leak-canary" not in text
    assert spec["pipelineInfo"]["name"] == "paravt-nightly-eval"
    root = spec["root"]
    assert set(root["dag"]["tasks"]) == {"exit-handler-1", "nightly-report-op"}
    report = root["dag"]["tasks"]["nightly-report-op"]
    # The report is the exit task: it runs when the body finishes, failed or not, and gets its status.
    assert report["triggerPolicy"]["strategy"] == "ALL_UPSTREAM_TASKS_COMPLETED"
    assert report["inputs"]["parameters"]["status"]["taskFinalStatus"]["producerTask"] == "exit-handler-1"
    assert report["dependentTasks"] == ["exit-handler-1"]
    handler = spec["components"]["comp-exit-handler-1"]["dag"]["tasks"]
    assert set(handler) == {"night-start-op", "eval-shards-op", "for-loop-2", "for-loop-3"}
    loop = handler["for-loop-2"]  # over (benchmark, shard) pairs; tests/e2e/test_pipeline_eval_shards.py
    assert loop["parameterIterator"]["items"]["inputParameter"] == "pipelinechannel--eval-shards-op-Output"
    assert sorted(loop["dependentTasks"]) == ["eval-shards-op", "night-start-op"]  # under the started night
    merges = handler["for-loop-3"]
    assert merges["parameterIterator"]["items"]["inputParameter"] == "pipelinechannel--benchmarks"
    assert merges["dependentTasks"] == ["for-loop-2"]
    (merge_task,) = spec["components"]["comp-for-loop-3"]["dag"]["tasks"].values()
    assert merge_task["inputs"]["parameters"]["output_prefix"] == {
        "componentInputParameter": "pipelinechannel--results_prefix"
    }
    loop_inputs = spec["components"]["comp-for-loop-2"]["inputDefinitions"]["parameters"]
    assert "pipelinechannel--eval_gpus" in loop_inputs  # the GPU count reaches the eval tasks
    (eval_task,) = spec["components"]["comp-for-loop-2"]["dag"]["tasks"].values()
    assert eval_task["componentRef"]["name"] == "comp-eval-op"
    # Evals write under the night their run started (results_prefix + run id, resolved in the task).
    params = eval_task["inputs"]["parameters"]
    assert params["output_prefix"] == {"componentInputParameter": "pipelinechannel--results_prefix"}
    assert params["run_id"]["runtimeValue"]["constant"] == "{{$.pipeline_job_uuid}}"
    # Every task retries with backoff and does not cache.
    for task in (report, handler["night-start-op"], handler["eval-shards-op"], eval_task, merge_task):
        assert task["retryPolicy"]["maxRetryCount"] == 3 and task["retryPolicy"]["backoffDuration"] == "60s"
        assert task["cachingOptions"] == {}
    params = root["inputDefinitions"]["parameters"]
    assert params["benchmarks"]["defaultValue"] == [
        "videomme",
        "videomme_wsub",
        "longvideobench",
        "lvbench",
        "mlvu",
        "mmvu",
        "charades",
    ]
    assert "defaultValue" not in params["checkpoint_uri"] and "defaultValue" not in params["results_prefix"]


def test_nightly_ir_images_resources_and_platform(compiled) -> None:
    _, spec, k8s = compiled
    executors = spec["deploymentSpec"]["executors"]
    for name in ("exec-eval-op", "exec-night-start-op", "exec-nightly-report-op"):
        assert executors[name]["container"]["image"].startswith("paravt-eval")
    resources = executors["exec-eval-op"]["container"]["resources"]
    assert (
        resources["accelerator"]["resourceCount"] == "{{$.inputs.parameters['pipelinechannel--eval_gpus']}}"
    )
    assert resources["resourceMemoryLimit"] == "64G"
    assert "accelerator" not in executors["exec-nightly-report-op"]["container"]["resources"]
    ev = k8s["exec-eval-op"]
    assert ev["pvcMount"][0]["mountPath"] == "/mnt/media"
    assert ev["emptyDirMounts"][0]["sizeLimit"] == "16Gi"
    assert ev["secretAsEnv"][0]["secretName"] == "paravt-s3"
    for name in ("exec-night-start-op", "exec-nightly-report-op"):
        assert k8s[name]["secretAsEnv"][0]["secretName"] == "paravt-s3"
        assert "pvcMount" not in k8s[name]


def test_manifests_schedule_parameters_are_pipeline_parameters(compiled) -> None:
    _, spec, _ = compiled
    docs = yaml.safe_load_all((ROOT / "manifests" / "base" / "nightly-schedule.yaml").read_text())
    config_map = next(d for d in docs if d["kind"] == "ConfigMap")
    params = yaml.safe_load(config_map["data"]["params.yaml"])
    assert set(params) <= set(spec["root"]["inputDefinitions"]["parameters"])
    assert {"checkpoint_uri", "results_prefix"} <= set(params)  # the required ones


def test_nightly_local_failed_eval_shows_failed_night(tmp_path: Path) -> None:
    prefix = str(tmp_path / "results")
    earlier = Night(
        "2026-11-22", SUCCEEDED, "ckpt-old", {"synthetic": BenchmarkResult(SUCCEEDED, {"agentic": 40.0})}
    )
    storage.write_bytes(night_uri(prefix, earlier.date), json.dumps(earlier.to_json()).encode())
    missing_model = str(tmp_path / "no-such-checkpoint")
    with pytest.raises(RuntimeError, match="FAILURE"):
        run_nightly_locally(missing_model, prefix, ["synthetic"], str(tmp_path / "kfp"), night="2026-11-23")

    night = json.loads(storage.read_bytes(night_uri(prefix, "2026-11-23")))
    assert night["state"] == "FAILED" and night["checkpoint"] == missing_model
    assert night["benchmarks"]["synthetic"]["state"] == "FAILED"
    report_dir = tmp_path / "results" / "2026-11-23" / "report"
    md = (report_dir / "report.md").read_text()
    assert "| 2026-11-23 | failed | failed |" in md and "| 2026-11-22 | succeeded | 40.0 |" in md
    assert (report_dir / "trend.png").read_bytes()[:4] == b"\x89PNG"
    # The KFP HTML artifact of the exit task is the same page.
    (html_artifact,) = list((tmp_path / "kfp").rglob("nightly-report-op/report"))
    assert html_artifact.read_text() == (report_dir / "report.html").read_text()


@pytest.mark.skipif(
    importlib.util.find_spec("paravt_core.eval") is None, reason="eval stage not in this checkout"
)
def test_nightly_local_success(tiny_model_dir: str, tmp_path: Path, eval_fixtures_dir: Path) -> None:
    from pipelines.local import tiny_stage_configs

    prefix = str(tmp_path / "results")
    failed = Night("2026-11-22", "FAILED", "ckpt-old", error="task eval-op failed")
    storage.write_bytes(night_uri(prefix, failed.date), json.dumps(failed.to_json()).encode())
    run_nightly_locally(
        tiny_model_dir,
        prefix,
        ["synthetic"],
        str(tmp_path / "kfp"),
        night="2026-11-23",
        eval_config_yaml=tiny_stage_configs()["eval"],
        eval_overrides=[f"work_dir={tmp_path / 'eval-work'}", f"demo_data={eval_fixtures_dir}"],
    )
    night = json.loads(storage.read_bytes(night_uri(prefix, "2026-11-23")))
    assert night["state"] == "SUCCEEDED" and night["checkpoint"] == tiny_model_dir
    # The eval output of this night, under <prefix>/<night>/<benchmark>, is complete and was read back.
    assert storage.is_complete(f"{prefix}/2026-11-23/synthetic")
    scores = night["benchmarks"]["synthetic"]["scores"]
    assert set(scores) == {"agentic", "direct"}  # the tiny recipe runs with and without the tool
    md = (tmp_path / "results" / "2026-11-23" / "report" / "report.md").read_text()
    assert "| 2026-11-22 | failed |" in md and "| 2026-11-23 | succeeded |" in md
