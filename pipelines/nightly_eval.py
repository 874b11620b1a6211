"""The nightly eval pipeline: one checkpoint, every benchmark in parallel, then the trend report.

    night_start ─► ParallelFor(benchmark x shard): eval ─► ParallelFor(benchmarks): merge
                                 ─► (exit handler, runs even on failure) report

Results live in object storage under ``results_prefix``: ``<night>/<benchmark>/`` (eval outputs),
``nights/<night>.json`` (each night's state and headline scores, read back by later nights'
reports) and ``<night>/report/`` (the trend report). Schedule it with
``paravt pipeline schedule create nightly --cron "0 0 2 * * *"`` (or the manifests' job).
"""

from kfp import dsl

from components.report import night_start_op, nightly_report_op
from paravt_core.eval.benchmarks import nightly
from pipelines.eval_step import eval_step
from pipelines.platform import MEDIA_PVC_NAME, configure_task

PIPELINE_NAME = "paravt-nightly-eval"
BENCHMARKS = nightly()  # every registry benchmark whose Benchmark.nightly is set


@dsl.pipeline(name=PIPELINE_NAME, description="ParaVT nightly eval: a checkpoint on every benchmark + trend")
def nightly_pipeline(
    checkpoint_uri: str,
    results_prefix: str,
    benchmarks: list = BENCHMARKS,  # noqa: B006
    eval_config_yaml: str = "{}",
    eval_overrides: list = [],  # noqa: B006
    report_config_yaml: str = "{}",
    report_overrides: list = [],  # noqa: B006
    night: str = "",
    eval_gpus: str = "1",
    eval_shards: int = 1,
    media_pvc: str = MEDIA_PVC_NAME,
):
    """``checkpoint_uri``: the model to evaluate; ``results_prefix``: where every night's results live
    (s3://...); ``night``: YYYY-MM-DD (default: the day the run starts, UTC); ``eval_gpus``: GPUs per
    eval task; ``eval_shards``: eval tasks per benchmark (disjoint slices of its samples by id, merged);
    configs as YAML text plus dotted overrides, as for the stages."""
    run_id = dsl.PIPELINE_JOB_ID_PLACEHOLDER
    report = nightly_report_op(
        config_yaml=report_config_yaml,
        overrides=report_overrides,
        results_prefix=results_prefix,
        night=night,
        run_id=run_id,
        checkpoint=checkpoint_uri,
        benchmarks=benchmarks,
    )
    configure_task(report, "report", display_name="report")
    with dsl.ExitHandler(report, name="nightly-eval"):
        start = night_start_op(
            results_prefix=results_prefix, night=night, run_id=run_id, checkpoint=checkpoint_uri
        )
        configure_task(start, "report", display_name="start night")
        eval_step(benchmarks=benchmarks, shards=eval_shards, gpus=eval_gpus, media_pvc=media_pvc, after=(start,),
                  config_yaml=eval_config_yaml, overrides=eval_overrides, model=checkpoint_uri,
                  output_prefix=results_prefix, night=night, run_id=run_id)  # fmt: skip
