"""Run pipelines on this machine with Kubeflow's own local runner, and the ``make demo`` flow.

``kfp.local.SubprocessRunner(use_venv=False)`` executes every component of the DAG as a subprocess
of the current interpreter (the project venv): the same component code that runs in the images on a
cluster. Kubernetes settings (secrets, GPUs, volumes) are cluster-only and ignored here; task retry
policies are honoured (kfp 2.17's local orchestrator retries with the same backoff), so local runs
compile with ``PARAVT_RETRY_BACKOFF=0s``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
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

    start = time.perf_counter()
    with _local_runner(pipeline_root):
        task = train_pipeline(data_config_yaml=config_to_yaml(data_cfg), data_overrides=list(overrides or []))
    return LocalRun(data_uri=task.output, pipeline_root=pipeline_root, seconds=time.perf_counter() - start)


@contextlib.contextmanager
def _local_runner(pipeline_root: str) -> Iterator[None]:
    """kfp.local with the subprocess runner; retries without backoff while the pipeline inside is
    compiled and run (restored afterwards, so later cluster compiles keep the real backoff)."""
    Path(pipeline_root).mkdir(parents=True, exist_ok=True)
    local.init(
        runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(Path(pipeline_root).resolve())
    )
    before = os.environ.get("PARAVT_RETRY_BACKOFF")
    os.environ["PARAVT_RETRY_BACKOFF"] = "0s"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PARAVT_RETRY_BACKOFF", None)
        else:
            os.environ["PARAVT_RETRY_BACKOFF"] = before


def run_nightly_locally(
    checkpoint_uri: str,
    results_prefix: str,
    benchmarks: list[str],
    pipeline_root: str,
    *,
    night: str = "",
    eval_config_yaml: str = "{}",
    eval_overrides: list[str] | None = None,
) -> None:
    """Run the nightly eval pipeline with the subprocess runner (raises if the run fails; the report,
    an exit handler, has run either way)."""
    from pipelines.nightly_eval import nightly_pipeline

    with _local_runner(pipeline_root):
        nightly_pipeline(
            checkpoint_uri=checkpoint_uri,
            results_prefix=results_prefix,
            benchmarks=benchmarks,
            eval_config_yaml=eval_config_yaml,
            eval_overrides=list(eval_overrides or []),
            night=night,
        )


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
