"""What the eval components share: the task's config and output location, the shard plan, the artifacts.

Imported inside the components' bodies (the package is installed in the images), no kfp import here.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from paravt_core import storage


def shard_plan(benchmarks: list, shards: int) -> list[dict[str, str]]:
    """The eval tasks of a fan-out: one ``{"benchmark", "shard"}`` per benchmark and shard, benchmark-major.
    One shard: ``shard`` is empty (the unsharded run of today, its output written directly)."""
    shards = int(shards)
    if shards < 1:
        raise ValueError(f"eval_shards must be at least 1, got {shards}")
    names = [str(b) for b in benchmarks]
    if len(set(names)) != len(names):
        raise ValueError(f"a benchmark is listed twice in {names}")
    return [
        {"benchmark": b, "shard": f"{i}/{shards}" if shards > 1 else ""} for b in names for i in range(shards)
    ]


def eval_task_config(
    config_yaml: str,
    overrides: list,
    benchmark: str,
    artifact_uri: str,
    *,
    model: str = "",
    output_prefix: str = "",
    night: str = "",
    run_id: str = "",
    run_prefix: str = "",
    train_run_id: str = "",
) -> Any:
    """The ``EvalConfig`` of one benchmark's task: the YAML and overrides, then model, output and benchmark.

    Output ``<output_prefix>/<benchmark>``; nightly (``run_id`` set): ``<output_prefix>/<night>/<benchmark>``,
    the night being ``night`` or the one this run started. In the train DAG (``train_run_id`` or
    ``run_prefix`` set), empty ``model`` / ``output_prefix`` are the run's RL checkpoint ``<run root>/rl/final``
    and ``<run root>/eval`` (components/locations.py; ``artifact_uri``: one of the task's output artifacts)."""
    from paravt_core.config import EvalConfig, load_config

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(config_yaml)
    try:
        cfg = load_config(EvalConfig, f.name, [str(o) for o in overrides])
    finally:
        os.unlink(f.name)
    if train_run_id or run_prefix:
        from components.locations import run_root

        root = run_root(run_prefix, train_run_id, artifact_uri)
        model = model or storage.join(root, "rl", "final")
        output_prefix = output_prefix or storage.join(root, "eval")
    if run_id:
        from paravt_core.report.stage import find_night, today_utc

        output_prefix = storage.join(output_prefix, night or find_night(output_prefix, run_id) or today_utc())
    cfg.model = model
    cfg.output = storage.join(output_prefix, benchmark)
    # One benchmark per task; its other settings (source, media_root, limit) come from the config.
    configured = {b.name: b for b in cfg.benchmarks}
    cfg.benchmarks = [configured.get(benchmark) or {"name": benchmark}]
    return cfg


def publish_output(output: str, report: Any, metrics: Any) -> None:
    """A complete eval output as the task's artifacts: its ``report.html`` and the numbers of ``metrics.json``."""
    with open(report.path, "wb") as out:
        out.write(storage.read_bytes(storage.join(output, "report.html")))
    report.metadata["uri"] = output
    for key, value in json.loads(storage.read_bytes(storage.join(output, "metrics.json"))).items():
        metrics.log_metric(key, value)
