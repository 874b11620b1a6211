"""KFP components of the eval stage: the shard plan, one (benchmark, shard) eval, and one benchmark's merge.

The pipelines fan out over ``(benchmark, shard)`` pairs and then merge each benchmark
(``pipelines/eval_step.py``). Thin by design, like ``components/data.py``: the bodies import paravt_core and
call the same ``run(cfg)`` as ``paravt eval`` (``--shard i/n``, ``--merge``). The model, the benchmark and
the output URI are set on top of the YAML config and the dotted overrides (``components/eval_task.py``).
The output is ``<output_prefix>/<benchmark>``; a shard's records go under its ``shards/<i>-of-<n>/``.
"""

from kfp import dsl
from kfp.dsl import HTML, Artifact, Metrics, Output

from components.images import EVAL_IMAGE


@dsl.component(base_image=EVAL_IMAGE, install_kfp_package=False)
def eval_op(
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
    """Run ``paravt eval`` on one benchmark; return the URI of its (complete) output. ``gpus``: what the
    task requested (its accelerator limit), recorded with the report. Passing it as an input also makes
    a ParallelFor around this task declare the GPU-count parameter, which kfp 2.17's compiler leaves out
    of the loop's inputs when only the accelerator limit refers to it (the task then cannot start).
    Nightly layout when ``run_id`` is set: ``<output_prefix>/<night>/<benchmark>``, the night being
    ``night`` or the one this run started (inputs are pipeline parameters only: kfp.local 2.17 replaces a
    task output passed into a ParallelFor with the loop item). In the train DAG (``train_run_id`` set),
    empty ``model`` / ``output_prefix`` are the run's RL checkpoint ``<run root>/rl/final`` and
    ``<run root>/eval`` (components/locations.py). ``shard`` ``"i/n"``: only that shard's samples, recorded
    under ``<output>/shards/<i>-of-<n>`` (returned); ``eval_merge_op`` then writes the benchmark's results."""
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


@dsl.component(base_image=EVAL_IMAGE, install_kfp_package=False)
def eval_shards_op(benchmarks: list, shards: int) -> list:
    """The fan-out's items: ``{"benchmark", "shard"}`` for every benchmark and shard ``i/n`` (one shard:
    ``shard`` empty, the unsharded run). Refuses fewer than 1 shard and a benchmark listed twice."""
    from components.eval_task import shard_plan

    plan = shard_plan(benchmarks, shards)
    print(f"{len(plan)} eval task(s): {len(plan) // max(1, len(benchmarks))} shard(s) x {list(benchmarks)}")
    return plan


@dsl.component(base_image=EVAL_IMAGE, install_kfp_package=False)
def eval_merge_op(
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
    """One benchmark's results from its ``shards`` shards (``paravt eval --merge``: refuses an incomplete
    set, naming the missing shards); one shard: the eval task wrote the results itself, checked complete
    here. Same location inputs as ``eval_op``. Returns the URI of the benchmark's complete output;
    ``tensorboard``: its TensorBoard logs (``<output>/tensorboard``)."""
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
