"""The whole train DAG through kfp.local with the smallest settings (tiny Qwen3-VL, synthetic data):
data -> SFT -> RL -> eval (synthetic split, with and without the tool) -> report; and a second run in
which SFT fails midway on its first attempt (PARAVT_FAULT, read by the trainer) and KFP's task retry
resumes it from its checkpoint: every stage's outputs equal the uninterrupted run's."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from safetensors.numpy import load_file

from paravt_core import storage
from paravt_core.synth import SynthResult
from pipelines.local import demo_data_config, run_train_locally, tiny_stage_configs

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("paravt_core.eval") is None,
    reason="the eval stage is not in this checkout yet (the DAG's eval component is written against it)",
)


def _synth_copy(synth: SynthResult, out: Path) -> None:
    """demo_data_config reads the synthetic data from <out>/synth."""
    (out / "synth").symlink_to(Path(synth.source_dir).parent)


def _run(synth: SynthResult, model: str, out: Path, fixtures: Path):
    out.mkdir(parents=True)
    _synth_copy(synth, out)
    return run_train_locally(
        str(out / "kfp"),
        run_prefix=str(out / "run"),
        base_model=model,
        data_cfg=demo_data_config(out),
        benchmarks=["synthetic"],
        stage_configs=tiny_stage_configs(),
        stage_overrides={
            "sft": [f"work_dir={out / 'sft-tmp'}", "trainer.steps=20"],
            "rl": ["steps=2"],
            "eval": [f"work_dir={out / 'eval-work'}", f"demo_data={fixtures}"],
        },
    )


def _tensors(final_dir: str) -> dict:
    files = sorted(Path(final_dir).glob("*.safetensors"))
    assert files, final_dir
    merged = {}
    for f in files:
        merged.update(load_file(str(f)))
    return merged


def _jsonl(uri: str) -> list[dict]:
    """Per-step metrics without wall-clock measurements (``*_s`` seconds, ``*_per_s`` rates)."""
    rows = [json.loads(line) for line in storage.read_bytes(uri).decode().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if not (k.endswith("_s") or k.startswith("peak_mem"))} for r in rows]


def test_train_dag_locally_and_a_retry_resumes(
    synth_dataset, tiny_model_dir, tmp_path, monkeypatch, eval_fixtures_dir
) -> None:
    clean = _run(synth_dataset, tiny_model_dir, tmp_path / "clean", eval_fixtures_dir)
    prefix = Path(clean.run_prefix)
    for stage in ("sft", "rl", "report"):
        assert storage.is_complete(str(prefix / stage)), stage
    assert storage.is_complete(str(prefix / "eval" / "synthetic"))
    report_md = (prefix / "report" / "report.md").read_text()
    # The eval table has the synthetic split with and without the tool; SFT and RL sections are there.
    assert "| synthetic | agentic |" in report_md and "| synthetic | direct |" in report_md
    assert "## SFT" in report_md and "## RL" in report_md
    assert clean.report_uri == str(prefix / "report" / "report.html")

    # SFT checkpoints every 10 steps (tiny recipe); fail right after step 10, once.
    once = tmp_path / "fault-fired"
    monkeypatch.setenv("PARAVT_FAULT", "sft:10")
    monkeypatch.setenv("PARAVT_FAULT_ONCE", str(once))
    faulted = _run(synth_dataset, tiny_model_dir, tmp_path / "faulted", eval_fixtures_dir)
    assert once.read_text() == "sft:10\n"  # the first attempt did fail there
    fprefix = Path(faulted.run_prefix)
    sft_summary = json.loads((fprefix / "sft" / "metrics.json").read_text())
    assert sft_summary["resumed_from"] and sft_summary["resumed_from"].rstrip("/").endswith("10")

    # Same outputs as the uninterrupted run: per-step SFT and RL metrics (timings aside), final weights,
    # eval scores.
    for stage in ("sft", "rl"):
        assert _jsonl(str(fprefix / stage / "metrics.jsonl")) == _jsonl(
            str(prefix / stage / "metrics.jsonl")
        ), stage
        a, b = _tensors(str(prefix / stage / "final")), _tensors(str(fprefix / stage / "final"))
        assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a), stage
    clean_metrics = json.loads((prefix / "report" / "metrics.json").read_text())
    faulted_metrics = json.loads((fprefix / "report" / "metrics.json").read_text())
    evals = {k: v for k, v in clean_metrics.items() if k.startswith("synthetic.")}
    assert evals and evals == {k: v for k, v in faulted_metrics.items() if k.startswith("synthetic.")}
