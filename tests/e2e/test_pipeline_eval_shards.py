"""The sharded eval step (pipelines/eval_step.py): the shard plan, the compiled fan-out over (benchmark, shard)
with its merge loop in both pipelines, and a 3-shard nightly run through kfp.local on the tiny model.

KFP backend rule the fan-out relies on (kubeflow/pipelines backend/src/v2/expression/expression.go, ``Select``):
a loop item is offered to the selector as ``string_value``, "the JSON serialized version of the value", so the
compiler's ``parseJson(string_value)["benchmark"]`` reads a field of a dict item.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from components.eval_task import shard_plan
from paravt_core import storage
from paravt_core.cli import main
from paravt_core.report.stage import night_uri
from pipelines.local import run_nightly_locally, tiny_stage_configs


def test_shard_plan():
    assert shard_plan(["videomme", "mlvu"], 3) == [
        {"benchmark": "videomme", "shard": "0/3"},
        {"benchmark": "videomme", "shard": "1/3"},
        {"benchmark": "videomme", "shard": "2/3"},
        {"benchmark": "mlvu", "shard": "0/3"},
        {"benchmark": "mlvu", "shard": "1/3"},
        {"benchmark": "mlvu", "shard": "2/3"},
    ]
    # one shard: the unsharded run of before (empty shard)
    assert shard_plan(["videomme", "mlvu"], 1) == [
        {"benchmark": "videomme", "shard": ""},
        {"benchmark": "mlvu", "shard": ""},
    ]
    with pytest.raises(ValueError, match="eval_shards must be at least 1, got 0"):
        shard_plan(["videomme"], 0)
    with pytest.raises(ValueError, match="listed twice"):
        shard_plan(["mlvu", "mlvu"], 2)


def _compile(name: str, tmp_path: Path) -> tuple[dict, dict]:
    out = tmp_path / f"{name}.yaml"
    assert main(["pipeline", "compile", name, str(out)]) == 0
    spec, platform = yaml.safe_load_all(out.read_text())
    return spec, platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]


def _loops(dag: dict) -> dict[str, dict]:
    return {name: t for name, t in dag["tasks"].items() if "parameterIterator" in t}


@pytest.mark.parametrize("pipeline, body", [("train", None), ("nightly", "comp-exit-handler-1")])
def test_compiled_eval_step_fans_out_over_benchmark_and_shard(pipeline, body, tmp_path):
    spec, k8s = _compile(pipeline, tmp_path)
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params["eval_shards"] == {
        "defaultValue": 1.0,
        "isOptional": True,
        "parameterType": "NUMBER_INTEGER",
    }
    dag = spec["components"][body]["dag"] if body else spec["root"]["dag"]
    plan = dag["tasks"]["eval-shards-op"]
    chan = "pipelinechannel--" if body else ""  # a sub-DAG's inputs are channels of the pipeline's
    assert plan["inputs"]["parameters"]["shards"] == {"componentInputParameter": f"{chan}eval_shards"}
    assert plan["inputs"]["parameters"]["benchmarks"] == {"componentInputParameter": f"{chan}benchmarks"}

    loops = _loops(dag)
    (shard_loop,) = [t for t in loops.values() if t["taskInfo"]["name"] == "eval-shards"]
    (merge_loop,) = [t for t in loops.values() if t["taskInfo"]["name"] == "eval-merge"]
    # the ParallelFor over the shard plan: one eval task per (benchmark, shard) item
    assert shard_loop["parameterIterator"]["items"] == {
        "inputParameter": "pipelinechannel--eval-shards-op-Output"
    }
    item = shard_loop["parameterIterator"]["itemInput"]
    (ev,) = spec["components"][shard_loop["componentRef"]["name"]]["dag"]["tasks"].values()
    assert ev["componentRef"]["name"] == "comp-eval-op"
    inputs = ev["inputs"]["parameters"]
    for field in ("benchmark", "shard"):
        assert inputs[field] == {"componentInputParameter": item,
                                 "parameterExpressionSelector": f'parseJson(string_value)["{field}"]'}  # fmt: skip
    # then one merge per benchmark, once every eval task is done
    merge_name = next(n for n, t in dag["tasks"].items() if t is merge_loop)
    assert merge_loop["dependentTasks"] == [next(n for n, t in dag["tasks"].items() if t is shard_loop)]
    assert merge_loop["parameterIterator"]["items"] == {"inputParameter": "pipelinechannel--benchmarks"}
    (merge,) = spec["components"][merge_loop["componentRef"]["name"]]["dag"]["tasks"].values()
    assert merge["componentRef"]["name"] == "comp-eval-merge-op"
    assert merge["inputs"]["parameters"]["shards"] == {
        "componentInputParameter": "pipelinechannel--eval_shards"
    }
    assert merge["inputs"]["parameters"]["benchmark"] == {
        "componentInputParameter": merge_loop["parameterIterator"]["itemInput"]
    }
    # the eval and the merge get the same config and location inputs
    for key in set(inputs) - {
        "benchmark",
        "shard",
        "gpus",
        "accelerator_count",
        "pipelinechannel--eval_gpus",
    }:
        assert merge["inputs"]["parameters"][key] == inputs[key], key
    # GPUs for the eval tasks only; the merge: 2 CPUs, 8G, the media volume (it loads the rows), retries
    executors = spec["deploymentSpec"]["executors"]
    assert "accelerator" in executors["exec-eval-op"]["container"]["resources"]
    merge_res = executors["exec-eval-merge-op"]["container"]["resources"]
    assert "accelerator" not in merge_res
    assert (merge_res["resourceCpuLimit"], merge_res["resourceMemoryLimit"]) == ("2", "8G")
    assert k8s["exec-eval-merge-op"]["pvcMount"][0]["mountPath"] == "/mnt/media"
    assert merge["retryPolicy"]["maxRetryCount"] == 3 and merge["taskInfo"]["name"] == "eval merge"
    if pipeline == "train":  # the report fans in the merged outputs
        collected = dag["tasks"]["report-op"]["inputs"]["parameters"]["eval_outputs"]["taskOutputParameter"]
        assert collected == {
            "producerTask": merge_name,
            "outputParameterKey": "pipelinechannel--eval-merge-op-Output",
        }


def test_nightly_with_three_shards_through_kfp_local(
    tiny_model_dir: str, eval_fixtures_dir: Path, tmp_path: Path
) -> None:
    """kfp 2.17's local runner runs the fan-out: 3 eval tasks on disjoint slices, the merge, the report."""
    prefix, night = str(tmp_path / "results"), "2026-11-24"
    run_nightly_locally(
        tiny_model_dir,
        prefix,
        ["synthetic"],
        str(tmp_path / "kfp"),
        night=night,
        eval_config_yaml=tiny_stage_configs()["eval"],
        eval_overrides=[
            f"work_dir={tmp_path / 'eval-work'}",
            f"demo_data={eval_fixtures_dir}",
            "protocols=[direct]",
            "agent.max_new_tokens=4",
            "agent.overview_frames=2",
        ],  # fmt: skip
        eval_shards=3,
    )
    out = Path(prefix) / night / "synthetic"
    shard_ids = []
    for i in range(3):
        assert storage.is_complete(str(out / "shards" / f"{i}-of-3")), i
        lines = (
            (out / "shards" / f"{i}-of-3" / "samples" / "direct" / "synthetic.jsonl").read_text().splitlines()
        )
        shard_ids += [json.loads(line)["id"] for line in lines]
    merged = [
        json.loads(line)["id"]
        for line in (out / "samples" / "direct" / "synthetic.jsonl").read_text().splitlines()
    ]
    assert len(shard_ids) == len(set(shard_ids)) == 8 and merged == sorted(
        shard_ids
    )  # the 8 synthetic samples
    assert (
        storage.is_complete(str(out))
        and json.loads((out / "results.json").read_text())["totals"]["samples"] == 8
    )
    # three eval tasks ran, one merge; the merge's HTML artifact is the benchmark's report
    kfp = tmp_path / "kfp"
    assert len(list(kfp.rglob("eval-op/report"))) == 3
    (html,) = list(kfp.rglob("eval-merge-op/report"))
    assert html.read_text() == (out / "report.html").read_text()
    record = json.loads(storage.read_bytes(night_uri(prefix, night)))
    assert record["state"] == "SUCCEEDED" and set(record["benchmarks"]["synthetic"]["scores"]) == {"direct"}
