"""KFP components of the report stage: the nightly bookkeeping (start a night, then the exit-handler
report that records the night's final state and renders the trend) and the train DAG's report.

Thin by design: the bodies call ``paravt_core.report.stage`` (the same code as ``paravt report``).
"""

from kfp import dsl
from kfp.dsl import HTML, Markdown, Metrics, Output

from components.images import EVAL_IMAGE


@dsl.component(base_image=EVAL_IMAGE, install_kfp_package=False)
def night_start_op(results_prefix: str, night: str, run_id: str, checkpoint: str) -> str:
    """Mark the night (``night`` or today, UTC) RUNNING in the results prefix; return the night's
    output prefix ``<results_prefix>/<YYYY-MM-DD>`` (the benchmarks' eval outputs go under it)."""
    from paravt_core import storage
    from paravt_core.report.stage import start_night

    date = start_night(results_prefix, night, checkpoint, run_id)
    print(f"night {date} started")
    return storage.join(results_prefix, date)


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
    import tempfile

    from paravt_core import storage
    from paravt_core.config import ReportConfig, load_config
    from paravt_core.report.stage import find_night, run, today_utc

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(config_yaml)
    cfg = load_config(ReportConfig, f.name, [str(o) for o in overrides])
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
    import tempfile

    from components.locations import run_root
    from paravt_core import storage
    from paravt_core.config import ReportConfig, load_config
    from paravt_core.report.stage import run

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(config_yaml)
    cfg = load_config(ReportConfig, f.name, [str(o) for o in overrides])
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
