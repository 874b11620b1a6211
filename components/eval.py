"""KFP components of the eval stage: the shard plan, one (benchmark, shard) eval, and one benchmark's merge.

The pipelines fan out over ``(benchmark, shard)`` pairs and then merge each benchmark
(``pipelines/eval_step.py``). Specs, like ``components/data.py``: each body is one call into ``components/launchers/eval.py``, which
calls the same ``run(cfg)`` as ``paravt eval`` (``--shard i/n``, ``--merge``). The model, the benchmark and
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
    from components.launchers.eval import eval_step

    return eval_step(
        config_yaml=config_yaml,
        overrides=overrides,
        benchmark=benchmark,
        gpus=gpus,
        report=report,
        metrics=metrics,
        model=model,
        output_prefix=output_prefix,
        night=night,
        run_id=run_id,
        run_prefix=run_prefix,
        train_run_id=train_run_id,
        shard=shard,
    )


@dsl.component(base_image=EVAL_IMAGE, install_kfp_package=False)
def eval_shards_op(benchmarks: list, shards: int) -> list:
    """The fan-out's items: ``{"benchmark", "shard"}`` for every benchmark and shard ``i/n`` (one shard:
    ``shard`` empty, the unsharded run). Refuses fewer than 1 shard and a benchmark listed twice."""
    from components.launchers.eval import eval_shards_step

    return eval_shards_step(benchmarks=benchmarks, shards=shards)


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
    from components.launchers.eval import eval_merge_step

    return eval_merge_step(
        config_yaml=config_yaml,
        overrides=overrides,
        benchmark=benchmark,
        shards=shards,
        report=report,
        metrics=metrics,
        tensorboard=tensorboard,
        model=model,
        output_prefix=output_prefix,
        night=night,
        run_id=run_id,
        run_prefix=run_prefix,
        train_run_id=train_run_id,
    )
