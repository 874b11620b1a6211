"""KFP components of the report stage: the nightly bookkeeping (start a night, then the exit-handler
report that records the night's final state and renders the trend) and the train DAG's report.

Specs: each body is one call into ``components/launchers/report.py``, which calls ``paravt_core.report.stage`` (the same code as ``paravt report``).
"""

from kfp import dsl
from kfp.dsl import HTML, Markdown, Metrics, Output

from components.images import EVAL_IMAGE


@dsl.component(base_image=EVAL_IMAGE, install_kfp_package=False)
def night_start_op(results_prefix: str, night: str, run_id: str, checkpoint: str) -> str:
    """Mark the night (``night`` or today, UTC) RUNNING in the results prefix; return the night's
    output prefix ``<results_prefix>/<YYYY-MM-DD>`` (the benchmarks' eval outputs go under it)."""
    from components.launchers.report import night_start_step

    return night_start_step(results_prefix=results_prefix, night=night, run_id=run_id, checkpoint=checkpoint)


@dsl.component(base_image=EVAL_IMAGE, install_kfp_package=False)
def nightly_report_op(
    config_yaml: str,
    overrides: list,
    results_prefix: str,
    night: str,
    run_id: str,
    checkpoint: str,
    benchmarks: list,
    status: dsl.PipelineTaskFinalStatus,
    report: Output[HTML],
    summary: Output[Markdown],
    metrics: Output[Metrics],
):
    """Exit handler of the nightly pipeline: runs whether the evals succeeded or not, records the
    night's final state (KFP's), and writes the trend report to ``<results_prefix>/<night>/report``."""
    from components.launchers.report import nightly_report_step

    return nightly_report_step(
        config_yaml=config_yaml,
        overrides=overrides,
        results_prefix=results_prefix,
        night=night,
        run_id=run_id,
        checkpoint=checkpoint,
        benchmarks=benchmarks,
        status=status,
        report=report,
        summary=summary,
        metrics=metrics,
    )


@dsl.component(base_image=EVAL_IMAGE, install_kfp_package=False)
def report_op(
    config_yaml: str,
    overrides: list,
    eval_outputs: list,
    report: Output[HTML],
    summary: Output[Markdown],
    metrics: Output[Metrics],
    sft_output: str = "",
    rl_output: str = "",
    output: str = "",
    run_prefix: str = "",
    run_id: str = "",
) -> str:
    """The train DAG's report: the eval table over every benchmark (fan-in), the SFT and RL curves
    and metrics. Returns the URI of ``report.html``. Empty ``sft_output`` / ``rl_output`` / ``output``:
    ``<run root>/sft``, ``/rl``, ``/report`` (components/locations.py)."""
    from components.launchers.report import report_step

    return report_step(
        config_yaml=config_yaml,
        overrides=overrides,
        eval_outputs=eval_outputs,
        report=report,
        summary=summary,
        metrics=metrics,
        sft_output=sft_output,
        rl_output=rl_output,
        output=output,
        run_prefix=run_prefix,
        run_id=run_id,
    )
