"""The ablation pipeline on this machine through kfp.local (``make ablations-demo``, the tests).

Same runner as ``pipelines/local.py`` (``kfp.local.SubprocessRunner(use_venv=False)``: every component as a
subprocess of this interpreter), the tiny recipes of the train demo as the base configs, and the study
file with its benchmark columns set to the benchmarks actually run.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from paravt_core.config import DataConfig, config_to_yaml
from pipelines.local import CONFIGS, demo_data_config, local_runner, tiny_stage_configs

PAPER = CONFIGS / "ablations" / "paper.yaml"


@dataclass
class AblationRun:
    report_uri: str
    run_prefix: str
    pipeline_root: str
    seconds: float


def study_for(benchmarks: list[str], study_file: Path = PAPER) -> str:
    """The study's text with its benchmark columns set to ``benchmarks`` (JSON: one line, YAML reads it)."""
    study = yaml.safe_load(study_file.read_text())
    study["benchmarks"] = list(benchmarks)
    return json.dumps(study, ensure_ascii=False)


def run_ablations_locally(
    pipeline_root: str,
    *,
    run_prefix: str,
    base_model: str,
    data_cfg: DataConfig,
    variants: list[str],
    benchmarks: list[str],
    study_yaml: str | None = None,
    stage_configs: dict[str, str] | None = None,
    stage_overrides: dict[str, list[str]] | None = None,
    runner: Any = None,
) -> AblationRun:
    """Run the ablation DAG with the subprocess runner (no GPUs); ``stage_configs`` / ``stage_overrides``:
    YAML text / dotted overrides per stage (``sft``, ``rl``, ``eval``; ``data`` overrides too)."""
    from pipelines.ablations import ablations_pipeline

    configs, overrides = stage_configs or {}, stage_overrides or {}
    args = {}
    for stage in ("sft", "rl", "eval"):
        args[f"{stage}_config_yaml"] = configs.get(stage, "{}")
        args[f"{stage}_overrides"] = list(overrides.get(stage, []))
    start = time.perf_counter()
    with local_runner(pipeline_root, ablations_pipeline, runner=runner):
        task = ablations_pipeline(
            run_prefix=run_prefix,
            base_model=base_model,
            study_yaml=study_yaml or study_for(benchmarks),
            variants=list(variants),
            benchmarks=list(benchmarks),
            data_config_yaml=config_to_yaml(data_cfg),
            data_overrides=list(overrides.get("data", [])),
            sft_gpus="0",
            rl_gpus="0",
            eval_gpus="0",
            media_root="",
            **args,
        )
    return AblationRun(task.output, run_prefix, pipeline_root, time.perf_counter() - start)


DEMO_VARIANTS = ["vanilla_grpo", "para_grpo", "no_tool_reward", "sequential_tools"]


def ablations_demo(
    out_dir: str,
    *,
    variants: list[str] | None = None,
    benchmarks: list[str] | None = None,
    rl_steps: int = 2,
    sft_steps: int = 20,
    videos: int = 4,
) -> AblationRun:
    """``make ablations-demo``: synthetic data + tiny Qwen3-VL -> data, SFT, RL of each variant of the
    paper's study (``rl_steps`` steps each), eval, comparison report, through kfp.local on CPU."""
    from paravt_core.models import build_tiny_model
    from paravt_core.synth import synthesize
    from paravt_core.synth.eval_fixtures import write_fixtures

    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    synthesize(str(out / "synth"), videos=videos, seconds=8.0, seed=0)
    model_dir = build_tiny_model(str(out / "tiny-model"), force=True)
    write_fixtures(out / "eval-fixtures")  # the eval stage's demo_data (it never imports synth)
    return run_ablations_locally(
        str(out / "kfp-local"),
        run_prefix=str(out / "run"),
        base_model=model_dir,
        data_cfg=demo_data_config(out),
        variants=variants or DEMO_VARIANTS,
        benchmarks=benchmarks or ["synthetic"],
        stage_configs=tiny_stage_configs(),
        stage_overrides={
            "sft": [f"work_dir={out / 'sft-tmp'}", f"trainer.steps={sft_steps}"],
            "rl": [f"steps={rl_steps}"],
            "eval": [
                f"work_dir={out / 'eval-work'}",
                f"demo_data={out / 'eval-fixtures'}",
                "protocols=[agentic]",
            ],
        },
    )


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(
        description="The ablation pipeline on the tiny model through kfp.local (CPU)."
    )
    p.add_argument("--out-dir", default="ablations-demo-out")
    p.add_argument(
        "--variants", nargs="+", default=None, help=f"rows of the paper's study (default: {DEMO_VARIANTS})"
    )
    p.add_argument("--benchmarks", nargs="+", default=None, help="eval benchmarks (default: synthetic)")
    p.add_argument("--rl-steps", type=int, default=2)
    args = p.parse_args(argv)
    run = ablations_demo(
        args.out_dir, variants=args.variants, benchmarks=args.benchmarks, rl_steps=args.rl_steps
    )
    print(f"ablation pipeline finished in {run.seconds:.1f} s")
    print(f"report        : {run.report_uri}")
    print(f"report (text) : {Path(run.run_prefix) / 'ablations' / 'report' / 'report.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
