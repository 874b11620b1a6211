"""What the components of ``components/report.py`` (``night_start_op``, ``nightly_report_op``, ``report_op``) do in their pods. Each component
is the spec (inputs, outputs, image, docstring) and its body one call into this module, which the image
holds: the compiled pipeline then carries no launch logic, and the code that runs is the image's own. No
kfp import at run time."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kfp import dsl
    from kfp.dsl import HTML, Markdown, Metrics, Output


def night_start_step(results_prefix: str, night: str, run_id: str, checkpoint: str) -> str:
    """``night_start_op``'s body (its docstring says what each parameter means)."""
    from paravt_core import storage
    from paravt_core.report.stage import start_night

    date = start_night(results_prefix, night, checkpoint, run_id)
    print(f"night {date} started")
    return storage.join(results_prefix, date)


def nightly_report_step(
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
    """``nightly_report_op``'s body (its docstring says what each parameter means)."""
    from components.launchers import stage_config
    from paravt_core import storage
    from paravt_core.config import ReportConfig
    from paravt_core.report.stage import find_night, run, today_utc

    cfg = stage_config(ReportConfig, config_yaml, overrides)
    # The night this run started (it may have crossed midnight since).
    date = night or find_night(results_prefix, run_id) or today_utc()
    cfg.output = storage.join(results_prefix, date, "report")
    cfg.trend.results_prefix = results_prefix
    cfg.trend.night = date
    cfg.trend.run_id = run_id
    cfg.trend.checkpoint = checkpoint
    cfg.trend.benchmarks = [str(b) for b in benchmarks]
    cfg.trend.state = status.state
    cfg.trend.error = status.error_message or ""
    result = run(cfg)
    with open(report.path, "wb") as out:
        out.write(storage.read_bytes(result.outputs["html"]))
    with open(summary.path, "wb") as out:
        out.write(storage.read_bytes(result.outputs["markdown"]))
    report.metadata["uri"] = cfg.output
    for key, value in result.metrics.items():
        metrics.log_metric(key, value)


def report_step(
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
    """``report_op``'s body (its docstring says what each parameter means)."""

    from components.launchers import stage_config
    from components.locations import run_root
    from paravt_core import storage
    from paravt_core.config import ReportConfig
    from paravt_core.report.stage import run

    cfg = stage_config(ReportConfig, config_yaml, overrides)
    cfg.eval_outputs = [str(o) for o in eval_outputs]
    if not (sft_output and rl_output and output):
        root = run_root(run_prefix, run_id, report.uri)
        sft_output = sft_output or storage.join(root, "sft")
        rl_output = rl_output or storage.join(root, "rl")
        output = output or storage.join(root, "report")
    cfg.sft_output, cfg.rl_output, cfg.output = sft_output, rl_output, output
    result = run(cfg)
    with open(report.path, "wb") as out:
        out.write(storage.read_bytes(result.outputs["html"]))
    with open(summary.path, "wb") as out:
        out.write(storage.read_bytes(result.outputs["markdown"]))
    report.metadata["uri"] = result.outputs["html"]
    for key, value in result.metrics.items():
        metrics.log_metric(key, value)
    return result.outputs["html"]
