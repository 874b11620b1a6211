"""Run pipelines on this machine with Kubeflow's own local runner, and the ``make demo`` flow.

``kfp.local.SubprocessRunner(use_venv=False)`` executes every component of the DAG as a subprocess
of the current interpreter (the project venv): the same component code that runs in the images on a
cluster. Kubernetes settings (secrets, GPUs, volumes) are cluster-only and ignored here; task retry
policies are honoured (kfp 2.17's local orchestrator retries), without the backoff.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kfp import local

from paravt_core.config import DataConfig, config_to_yaml
from paravt_core.user_errors import ParavtUserError

CONFIGS = Path(__file__).resolve().parents[1] / "configs"  # the recipes, tiny ones included


@dataclass
class TrainRun:
    report_uri: str
    run_prefix: str
    pipeline_root: str
    seconds: float


def run_train_locally(
    pipeline_root: str,
    *,
    run_prefix: str,
    base_model: str,
    data_cfg: DataConfig,
    benchmarks: list[str],
    stage_configs: dict[str, str] | None = None,
    stage_overrides: dict[str, list[str]] | None = None,
    runner: Any = None,
) -> TrainRun:
    """Run the whole train DAG with the subprocess runner (no GPUs); ``stage_configs`` /
    ``stage_overrides``: YAML text / dotted overrides per stage (``sft``, ``rl``, ``eval``, ``report``)."""
    from pipelines.train import train_pipeline

    configs, overrides = stage_configs or {}, stage_overrides or {}
    args = {}
    for stage in ("sft", "rl", "eval", "report"):
        args[f"{stage}_config_yaml"] = configs.get(stage, "{}")
        args[f"{stage}_overrides"] = list(overrides.get(stage, []))
    start = time.perf_counter()
    with local_runner(pipeline_root, train_pipeline, runner=runner):
        task = train_pipeline(
            run_prefix=run_prefix,
            base_model=base_model,
            benchmarks=benchmarks,
            data_config_yaml=config_to_yaml(data_cfg),
            data_overrides=list(overrides.get("data", [])),
            sft_gpus="0",
            rl_gpus="0",
            eval_gpus="0",
            media_root="",  # no media volume here: the data config's work_dir holds the extraction
            **args,
        )
    return TrainRun(task.output, run_prefix, pipeline_root, time.perf_counter() - start)


def run_data_locally(data_cfg: DataConfig, pipeline_root: str) -> str:
    """The data component alone through kfp.local; returns the materialized data URI."""
    from components.data import data_op

    with local_runner(pipeline_root):
        return data_op(config_yaml=config_to_yaml(data_cfg), overrides=[]).outputs["Output"]


@contextlib.contextmanager
def local_runner(pipeline_root: str, pipeline=None, runner: Any = None) -> Iterator[None]:
    """kfp.local with the subprocess runner (or ``runner``). kfp 2.17's local orchestrator honours the
    tasks' retry policies, backoff included; for ``pipeline`` the backoff is set to zero while inside
    (the compiled spec is restored afterwards, so later cluster compiles keep the real backoff)."""
    Path(pipeline_root).mkdir(parents=True, exist_ok=True)
    local.init(
        runner=runner or local.SubprocessRunner(use_venv=False),
        pipeline_root=str(Path(pipeline_root).resolve()),
    )
    # kfp 2.17's local orchestrator indents output by swapping builtins.print per task (logging_utils.
    # indented_print); tasks of a ParallelFor run in threads and can restore each other's swap, leaving every
    # later print of this process indented. Put the real one back afterwards.
    real_print = builtins.print
    if pipeline is None:
        try:
            yield
        finally:
            builtins.print = real_print
        return
    saved = type(pipeline.pipeline_spec)()
    saved.CopyFrom(pipeline.pipeline_spec)
    dags = [pipeline.pipeline_spec.root.dag] + [c.dag for c in pipeline.pipeline_spec.components.values()]
    for dag in dags:
        for task in dag.tasks.values():
            if task.HasField("retry_policy"):
                task.retry_policy.backoff_duration.seconds = 0
    try:
        yield
    finally:
        pipeline.pipeline_spec.CopyFrom(saved)
        builtins.print = real_print


def run_nightly_locally(
    checkpoint_uri: str,
    results_prefix: str,
    benchmarks: list[str],
    pipeline_root: str,
    *,
    night: str = "",
    eval_config_yaml: str = "{}",
    eval_overrides: list[str] | None = None,
    eval_shards: int = 1,
) -> None:
    """Run the nightly eval pipeline with the subprocess runner (raises if the run fails; the report,
    an exit handler, has run either way). ``eval_shards``: eval tasks per benchmark (then merged)."""
    from pipelines.nightly_eval import nightly_pipeline

    with local_runner(pipeline_root, nightly_pipeline):
        nightly_pipeline(
            checkpoint_uri=checkpoint_uri,
            results_prefix=results_prefix,
            benchmarks=benchmarks,
            eval_config_yaml=eval_config_yaml,
            eval_overrides=list(eval_overrides or []),
            night=night,
            eval_shards=eval_shards,
        )


class DemoError(ParavtUserError, RuntimeError):
    """The demo pipeline failed: one line naming the task and the log to read."""


ACCURACY_NOTE = (
    "These accuracies come from a randomly initialised {params} model tuned for a few dozen steps on "
    "{videos} synthetic videos: 0% (or chance) is the expected score. The demo shows every stage running "
    "end to end on CPU (and resuming when rerun), not a model that has learned the task."
)


def tensorboard_command(run_prefix: str) -> str:
    """The one command that shows every stage's TensorBoard logs of a run (``<stage>/tensorboard`` under
    ``run_prefix``), with the path relative to the working directory when it is below it."""
    rel = os.path.relpath(run_prefix)
    return f"tensorboard --logdir {run_prefix if rel.startswith('..') else rel}"


def demo(out_dir: str, videos: int = 8, seconds: float = 12.0, runner: Any = None) -> TrainRun:
    """``make demo``: synthetic data + tiny Qwen3-VL -> the whole train DAG (data, SFT, RL, eval on the
    synthetic split with and without the tool, report) through kfp.local, on CPU. The console gets one
    line per step; the runner's output, resolved configs and warnings go to ``<out_dir>/demo.log``.
    ``runner``: another kfp.local runner (``make images-dag-smoke``: DockerRunner, every task in the images;
    everything then lives under ``out_dir``, the pipeline root, which DockerRunner mounts at the same path)."""
    from paravt_core.models import build_tiny_model
    from paravt_core.synth import synthesize
    from paravt_core.synth.eval_fixtures import write_fixtures
    from pipelines.demo_console import (
        TaskWatcher,
        output_to_log,
        stage_summary,
        timed,
        tiny_model_parameters,
    )

    out = Path(out_dir).resolve()
    log_path = out / "demo.log"
    elapsed_all = timed()
    with output_to_log(log_path) as console:

        def say(line: str) -> None:
            console.write(line + "\n")
            console.flush()

        say(
            f"ParaVT demo on CPU: synthetic videos -> tiny Qwen3-VL -> data, SFT, RL, eval, report (log: {log_path})"
        )
        elapsed = timed()
        synthesize(str(out / "synth"), videos=videos, seconds=seconds, seed=0)
        write_fixtures(out / "eval-fixtures")  # the eval stage's demo_data (it never imports synth)
        say(
            f"  synth       {elapsed():6.1f} s  {videos} synthetic videos of {seconds:g} s -> {out / 'synth'}"
        )
        elapsed = timed()
        model_dir = build_tiny_model(str(out / "tiny-model"), force=True)  # the demo's own directory
        params = tiny_model_parameters(model_dir)
        say(
            f"  model       {elapsed():6.1f} s  tiny Qwen3-VL, {params / 1e3:.0f}K parameters, random weights"
        )

        def finished(task: str, status: str, secs: float) -> None:
            name = task.removesuffix("-op")
            if status != "SUCCESS":
                say(f"  {name:<11} {secs:6.1f} s  {status}; see {log_path}")
                return
            say(f"  {name:<11} {secs:6.1f} s  {stage_summary(task, out / 'run', out / 'data')}")

        try:
            with TaskWatcher(log_path, finished):
                run = run_train_locally(
                    str(out) if runner is not None else str(out / "kfp-local"),
                    run_prefix=str(out / "run"),
                    base_model=model_dir,
                    data_cfg=demo_data_config(out),
                    benchmarks=["synthetic"],
                    stage_configs=tiny_stage_configs(),
                    stage_overrides=demo_overrides(out),
                    runner=runner,
                )
        except KeyboardInterrupt:
            raise
        except Exception as err:
            raise DemoError(
                f"the pipeline failed ({type(err).__name__}); the failing task's output is in {log_path}"
            ) from err
        say(f"pipeline finished in {run.seconds:.1f} s (all steps {elapsed_all():.1f} s)")
        say(f"report        : {run.report_uri}")
        say(f"report (text) : {Path(run.run_prefix) / 'report' / 'report.md'}")
        say(f"stage outputs : {run.run_prefix}   kfp local outputs: {run.pipeline_root}")
        say(f"curves        : {tensorboard_command(run.run_prefix)}   (SFT, RL and eval logs side by side)")
        say(ACCURACY_NOTE.format(params=f"{params / 1e3:.0f}K-parameter", videos=videos))
    return run


def demo_data_config(out: Path) -> DataConfig:
    return DataConfig.model_validate(
        {
            "work_dir": str(out / "work"),
            "output": str(out / "data"),
            "download": {
                "media_source": str(out / "synth" / "source"),
                "parquet_source": str(out / "synth" / "parquet"),
            },
        }
    )


def tiny_stage_configs() -> dict[str, str]:
    """The tiny recipes of the SFT, RL and eval stages (configs/<stage>/tiny.yaml)."""
    return {stage: (CONFIGS / stage / "tiny.yaml").read_text() for stage in ("sft", "rl", "eval")}


def demo_overrides(out: Path) -> dict[str, list[str]]:
    """Scratch directories of the tiny recipes moved under the demo's output directory."""
    return {
        "sft": [f"work_dir={out / 'sft-tmp'}"],
        "eval": [f"work_dir={out / 'eval-work'}", f"demo_data={out / 'eval-fixtures'}"],
        "report": ["title='ParaVT demo — tiny Qwen3-VL on synthetic videos'"],
    }


def demo_in_images(out_dir: str) -> TrainRun:
    """The demo DAG with ``kfp.local.DockerRunner``: every task in the images named by
    ``PARAVT_IMAGE_*`` (set before this module is imported), through a Docker-compatible API
    (``DOCKER_HOST``; podman's service in ``make images-dag-smoke``). kfp 2.17's DockerRunner reports a
    container it could no longer wait for as succeeded, so every stage's completed output is checked
    here rather than trusted."""
    from paravt_core import storage

    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    out.chmod(0o777)  # the containers run as uid 10001 and write under the mounted pipeline root
    from docker.types import Ulimit  # the Docker SDK DockerRunner drives (images-dag-smoke.sh installs it)

    # Explicit limits: without them runc asks for the daemon's defaults, which a rootful podman inside an
    # unprivileged container may not raise ("error setting rlimit type 7: operation not permitted").
    limits = [Ulimit(name="nofile", soft=20000, hard=20000), Ulimit(name="nproc", soft=32768, hard=32768)]
    runner = local.DockerRunner(network_mode="host", runtime="runc", ulimits=limits)
    run = demo(str(out), videos=4, seconds=8.0, runner=runner)
    missing = [
        stage
        for stage in ("sft", "rl", "eval/synthetic", "report")
        if not storage.is_complete(storage.join(run.run_prefix, stage))
    ]
    if missing:
        raise RuntimeError(f"DockerRunner reported success but these outputs are incomplete: {missing}")
    return run
