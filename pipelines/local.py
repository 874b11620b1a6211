"""Run pipelines on this machine with Kubeflow's own local runner, and the ``make demo`` flow.

``kfp.local.SubprocessRunner(use_venv=False)`` executes every component of the DAG as a subprocess
of the current interpreter (the project venv): the same component code that runs in the images on a
cluster. Platform settings (secrets, GPUs, retries) are cluster-only and ignored here.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kfp import local

from paravt_core.config import DataConfig, config_to_yaml


@dataclass
class LocalRun:
    data_uri: str
    pipeline_root: str
    seconds: float


def run_train_locally(
    data_cfg: DataConfig, pipeline_root: str, overrides: list[str] | None = None
) -> LocalRun:
    """Run the train DAG with the subprocess runner; return where its outputs are."""
    from pipelines.train import train_pipeline

    Path(pipeline_root).mkdir(parents=True, exist_ok=True)
    local.init(
        runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(Path(pipeline_root).resolve())
    )
    start = time.perf_counter()
    task = train_pipeline(data_config_yaml=config_to_yaml(data_cfg), data_overrides=list(overrides or []))
    return LocalRun(data_uri=task.output, pipeline_root=pipeline_root, seconds=time.perf_counter() - start)


def demo(out_dir: str, videos: int = 8, seconds: float = 12.0) -> LocalRun:
    """``make demo``: synthetic data -> tiny model -> the train pipeline through kfp.local."""
    from rich.console import Console

    from paravt_core import storage
    from paravt_core.data.audit import print_audit
    from paravt_core.models import build_tiny_model
    from paravt_core.synth import synthesize

    console = Console(width=None if sys.stdout.isatty() else 120)
    out = Path(out_dir).resolve()
    console.rule("1/3 synthetic ParaVT data")
    synth = synthesize(str(out / "synth"), videos=videos, seconds=seconds, seed=0)
    console.print(synth.summary())
    console.rule("2/3 tiny Qwen3-VL")
    model_dir = build_tiny_model(str(out / "tiny-model"))
    console.print(f"tiny model: {model_dir}")
    console.rule("3/3 train pipeline (kfp.local.SubprocessRunner)")
    cfg = DataConfig.model_validate(
        {
            "work_dir": str(out / "work"),
            "output": str(out / "data"),
            "download": {
                "media_source": str(out / "synth" / "source"),
                "parquet_source": str(out / "synth" / "parquet"),
            },
        }
    )
    run = run_train_locally(cfg, str(out / "kfp-local"))
    audit = json.loads(storage.read_bytes(storage.join(run.data_uri, "audit.json")))
    console.rule("audit")
    print_audit(audit, console=console)
    console.print(f"\npipeline finished in {run.seconds:.1f} s")
    console.print(f"materialized data : {run.data_uri}")
    console.print(f"audit report      : {storage.join(run.data_uri, 'audit.json')}")
    console.print(f"tiny model        : {model_dir}")
    console.print(f"kfp local outputs : {run.pipeline_root}")
    return run
