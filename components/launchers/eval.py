"""What the components of ``components/eval.py`` (``eval_op``, ``eval_shards_op``, ``eval_merge_op``) do in their pods. Each component
is the spec (inputs, outputs, image, docstring) and its body one call into this module, which the image
holds: the compiled pipeline then carries no launch logic, and the code that runs is the image's own. No
kfp import at run time."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kfp.dsl import HTML, Artifact, Metrics, Output


def eval_step(
    config_yaml: str,
    overrides: list,
    benchmark: str,
    gpus: str,
    report: Output[HTML],
    metrics: Output[Metrics],
    model: str = "",
    output_prefix: str = "",
    night: str = "",
    run_id: str = "",
    run_prefix: str = "",
    train_run_id: str = "",
    shard: str = "",
) -> str:
    """``eval_op``'s body (its docstring says what each parameter means)."""
    from paravt_core.launch.caches import settle_caches

    settle_caches()  # the download caches' volume, or ~/.cache: before anything reads HF_HOME
    import html
    import json
    import os

    from components.eval_task import eval_task_config
    from components.publish import log_numbers
    from paravt_core import storage
    from paravt_core.eval.stage import run

    cfg = eval_task_config(config_yaml, overrides, benchmark, report.uri, model=model, output_prefix=output_prefix,
                           night=night, run_id=run_id, run_prefix=run_prefix, train_run_id=train_run_id)  # fmt: skip
    os.environ["KFP_RUN_ID"] = train_run_id or run_id  # the trackers' run name (paravt_core/tracking)
    cfg.shard = shard
    import torch

    from paravt_core.launch.hardware import check_eval_engine

    check_eval_engine(cfg, gpus=torch.cuda.device_count() if torch.cuda.is_available() else 0)
    result = run(cfg)
    report.metadata["gpus"] = gpus
    print(json.dumps(result.outputs))
    if shard:
        where = result.outputs["shard"]
        with open(report.path, "w") as out:  # the report is the merge's; this page says where the records are
            out.write(f"<p>paravt eval {html.escape(benchmark)}, shard {html.escape(shard)}: "
                      f"{result.metrics['records']} records in {html.escape(where)}</p>")  # fmt: skip
        report.metadata["uri"] = where
        metrics.log_metric("records", result.metrics["records"])
        return where
    with open(report.path, "wb") as out:
        out.write(storage.read_bytes(storage.join(cfg.output, "report.html")))
    report.metadata["uri"] = cfg.output
    log_numbers(metrics, result.metrics)
    return cfg.output


def eval_shards_step(benchmarks: list, shards: int) -> list:
    """``eval_shards_op``'s body (its docstring says what each parameter means)."""
    from components.eval_task import shard_plan

    plan = shard_plan(benchmarks, shards)
    print(f"{len(plan)} eval task(s): {len(plan) // max(1, len(benchmarks))} shard(s) x {list(benchmarks)}")
    return plan


def eval_merge_step(
    config_yaml: str,
    overrides: list,
    benchmark: str,
    shards: int,
    report: Output[HTML],
    metrics: Output[Metrics],
    tensorboard: Output[Artifact],
    model: str = "",
    output_prefix: str = "",
    night: str = "",
    run_id: str = "",
    run_prefix: str = "",
    train_run_id: str = "",
) -> str:
    """``eval_merge_op``'s body (its docstring says what each parameter means)."""
    import os

    from components.eval_task import eval_task_config, publish_output
    from components.publish import publish_tensorboard
    from paravt_core import storage
    from paravt_core.eval.stage import run

    cfg = eval_task_config(config_yaml, overrides, benchmark, report.uri, model=model, output_prefix=output_prefix,
                           night=night, run_id=run_id, run_prefix=run_prefix, train_run_id=train_run_id)  # fmt: skip
    os.environ["KFP_RUN_ID"] = train_run_id or run_id  # the trackers' run name (paravt_core/tracking)
    if int(shards) > 1:
        cfg.merge, cfg.expected_shards = True, int(shards)
        run(cfg)
    elif not storage.is_complete(cfg.output):
        raise RuntimeError(f"eval output {cfg.output} is not complete: its eval task did not finish")
    publish_output(cfg.output, report, metrics)
    publish_tensorboard(tensorboard, cfg.output, train_run_id or run_id)
    print(f"{benchmark}: {cfg.output}")
    return cfg.output
