"""The ablation DAG: its compiled spec (the two loops and what feeds each task), and a run of two rows of the
paper's study through kfp.local with the smallest settings (tiny Qwen3-VL, synthetic data, one RL step each):
data and SFT once, each variant's RL with its own knobs, its eval, and the comparison report made of them."""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import yaml

from paravt_core import ablation, storage
from pipelines.ablations_local import run_ablations_locally
from pipelines.compile import compile_pipeline
from pipelines.local import demo_data_config, local_runner, tiny_stage_configs
from tests.support.kfp_nested_support import nested_pipeline
from tests.support.paths import ROOT


def _spec(tmp_path: Path) -> dict:
    package = compile_pipeline("ablations", str(tmp_path / "ablations.yaml"), warn=False)
    return next(yaml.safe_load_all(Path(package).read_text()))


def _loop_of(spec: dict, task: str) -> tuple[str, dict]:
    """(loop task name in the root DAG, its spec) whose body holds ``task``."""
    root = spec["root"]["dag"]["tasks"]
    for name, t in root.items():
        if "parameterIterator" in t:
            body = spec["components"][t["componentRef"]["name"]]["dag"]["tasks"]
            if task in body:
                return name, t
    raise AssertionError(f"{task} is in no loop")


def test_compiled_spec_has_a_variant_loop_then_a_flat_eval_loop(tmp_path):
    spec = _spec(tmp_path)
    root = spec["root"]["dag"]["tasks"]
    assert {"data-op", "sft-op", "eval-pairs-op", "ablation-report-op"} <= set(root)
    # RL loop: over the `variants` parameter, after SFT (the checkpoint is read under the run's root)
    _, rl_loop = _loop_of(spec, "ablation-rl-op")
    assert rl_loop["parameterIterator"]["items"]["inputParameter"].endswith("variants")
    assert "sft-op" in rl_loop.get("dependentTasks", [])
    # the eval loop iterates the barrier's output and is not nested in the RL loop
    _, ev_loop = _loop_of(spec, "eval-op")
    assert ev_loop["parameterIterator"]["items"]["inputParameter"].endswith("eval-pairs-op-Output")
    body = spec["components"][ev_loop["componentRef"]["name"]]["dag"]["tasks"]
    inputs = body["eval-op"]["inputs"]["parameters"]
    for name in ("model", "overrides", "benchmark", "output_prefix"):
        assert inputs[name]["taskOutputParameter"]["producerTask"] == "ablation-eval-args-op", name
    # the barrier collects every variant's RL; the report collects every eval
    pairs_in = root["eval-pairs-op"]["inputs"]["parameters"]["trained"]
    assert "taskOutputParameter" in pairs_in or "componentInputParameter" in pairs_in
    assert "ablation-report-op" not in body
    # default study: the paper's rows
    defaults = spec["root"]["inputDefinitions"]["parameters"]
    assert (
        defaults["variants"]["defaultValue"]
        == ablation.load_study_file(ROOT / "configs" / "ablations" / "paper.yaml").names()
    )


def test_two_variants_one_step_each_through_kfp_local(
    synth_dataset, tiny_model_dir, eval_fixtures_dir, tmp_path
):
    out = tmp_path / "run"
    out.mkdir()
    (out / "synth").symlink_to(Path(synth_dataset.source_dir).parent)
    variants = ["vanilla_grpo", "no_unclosed_penalty"]
    run = run_ablations_locally(
        str(out / "kfp"),
        run_prefix=str(out / "root"),
        base_model=tiny_model_dir,
        data_cfg=demo_data_config(out),
        variants=variants,
        benchmarks=["synthetic"],
        stage_configs=tiny_stage_configs(),
        stage_overrides={
            "sft": [f"work_dir={out / 'sft-tmp'}", "trainer.steps=4"],
            "rl": ["steps=1", "prompts_per_step=1", "group_size=2"],
            "eval": [
                f"work_dir={out / 'eval-work'}",
                f"demo_data={eval_fixtures_dir}",
                "protocols=[agentic]",
                "benchmarks=[{name: synthetic, limit: 2}]",
            ],
        },
    )
    root = run.run_prefix
    assert run.report_uri == storage.join(ablation.report_output(root), "report.html")
    assert storage.is_complete(storage.join(root, "sft"))  # SFT once, shared
    rows = json.loads(Path(ablation.report_output(root), "comparison.json").read_text())
    assert [r["variant"] for r in rows] == variants
    for name, row in zip(variants, rows, strict=True):
        rl = ablation.rl_output(root, name)
        cfg = yaml.safe_load(Path(rl, "config.yaml").read_text())
        assert cfg["model"] == storage.join(root, "sft", "final") and cfg["steps"] == 1
        summary = json.loads(Path(rl, "metrics.json").read_text())
        assert summary["steps"] == 1 and len(summary["f_tau_curve"]) == 1
        assert (
            row["ours"]["f_tau"] == summary["f_tau_final"] and row["ours"]["kappa"] == summary["kappa_final"]
        )
        results = json.loads(Path(ablation.eval_prefix(root, name), "synthetic", "results.json").read_text())
        assert results["model"] == storage.join(rl, "final")
        assert row["ours"]["synthetic"] == results["protocols"]["agentic"]["synthetic"]["accuracy"]
        assert row["checksum"] == results["prompt_checksum"] and row["protocol"].startswith("agentic")
        assert row["paper"]["f_tau"] == (0.13 if name == "vanilla_grpo" else None)
    # each variant trained with its own knobs on the one base config
    knobs = {
        n: yaml.safe_load(Path(ablation.rl_output(root, n), "config.yaml").read_text())["paravt"]
        for n in variants
    }
    assert knobs["vanilla_grpo"]["constrained"]["think_prefix"] is False
    assert knobs["vanilla_grpo"]["anchoring"] == {"weight": 0.0, "unclosed_penalty": True}
    assert knobs["no_unclosed_penalty"]["constrained"]["think_prefix"] is True
    assert knobs["no_unclosed_penalty"]["anchoring"] == {"weight": 0.5, "unclosed_penalty": False}
    md = Path(ablation.report_output(root), "report.md").read_text()
    assert "| vanilla_grpo | " in md and "| no_unclosed_penalty | " in md


def test_submit_ablations_sends_the_study_rows_as_parameters(tmp_path, monkeypatch, capsys):
    """``paravt pipeline submit ablations`` against the KFP v2beta1 test server (tests/support/kfp_test_server.py):
    the pipeline compiles on the fly and the chosen rows and base RL config travel as run parameters."""
    from paravt_core.cli import main
    from tests.support.kfp_test_server import KfpTestServer

    monkeypatch.setenv("KFP_TOKEN", "tok")
    rl_yaml = (ROOT / "configs" / "rl" / "paragrpo_8b.yaml").read_text()
    params = {"variants": ["vanilla_grpo", "para_grpo"], "rl_config_yaml": rl_yaml, "rl_gpus": 8}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    with KfpTestServer(token="tok") as server:
        argv = ["pipeline", "submit", "ablations", "--params", str(tmp_path / "params.yaml")]
        assert main([*argv, "--host", server.url]) == 0
        (run_call,) = server.state.calls("POST", "/runs")
    body = run_call.body
    assert body["pipeline_spec"]["pipeline_spec"]["pipelineInfo"]["name"] == "paravt-ablations"
    sent = body["runtime_config"]["parameters"]
    assert sent["variants"] == ["vanilla_grpo", "para_grpo"] and sent["rl_config_yaml"] == rl_yaml
    assert sent["rl_gpus"] == "8"  # declared as a string: KFP 2.17's driver reads GPU counts as text
    with KfpTestServer(token="tok") as server:
        (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"variant": ["x"]}))
        argv = ["pipeline", "submit", "ablations", "--params", str(tmp_path / "bad.yaml")]
        assert main([*argv, "--host", server.url]) != 0
        assert not server.state.calls("POST", "/runs")
    assert "unknown pipeline parameter(s) variant" in capsys.readouterr().err


# --- why the DAG has two flat loops -------------------------------------------------------------------------


def test_kfp_local_misbinds_a_nested_loop(tmp_path):
    """Observed with kfp 2.17.0's local runner: inside a loop nested in another, both an outer task's output
    and the outer loop item arrive as the inner loop's item. The right answer would be
    [["model-of-v1|v1|b1"], ["model-of-v2|v2|b1"]]; this is why pipelines/ablations.py runs its evals in a
    flat loop over variant::benchmark items. When this test fails, kfp.local binds them right: the
    benchmark loop can move back inside the variant loop."""
    before = builtins.print
    with local_runner(str(tmp_path)):
        assert nested_pipeline().output == [["b1|b1|b1"], ["b1|b1|b1"]]
    assert builtins.print is before  # local_runner undoes kfp.local's per-task print swaps (parallel tasks)
