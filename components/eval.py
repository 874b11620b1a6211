"""KFP component: the eval stage for one benchmark (the pipelines fan out over benchmarks with ParallelFor).

Thin by design, like ``components/data.py``: the body imports paravt_core and calls the same
``run(cfg)`` as ``paravt eval``. The model, the benchmark and the output URI are set on top of the
YAML config and the dotted overrides. The output is ``<output_prefix>/<benchmark>``.
"""

from kfp import dsl
from kfp.dsl import HTML, Metrics, Output

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
) -> str:
    """Run ``paravt eval`` on one benchmark; return the URI of its (complete) output. ``gpus``: what the
    task requested (its accelerator limit), recorded with the report. Passing it as an input also makes
    a ParallelFor around this task declare the GPU-count parameter, which kfp 2.17's compiler leaves out
    of the loop's inputs when only the accelerator limit refers to it (the task then cannot start).
    Nightly layout when ``run_id`` is set: ``<output_prefix>/<night>/<benchmark>``, the night being
    ``night`` or the one this run started (inputs are pipeline parameters only: kfp.local 2.17 replaces a
    task output passed into a ParallelFor with the loop item). In the train DAG (``train_run_id`` set),
    empty ``model`` / ``output_prefix`` are the run's RL checkpoint ``<run root>/rl/final`` and
    ``<run root>/eval`` (components/locations.py)."""
    import json
    import tempfile

    from paravt_core import storage
    from paravt_core.config import EvalConfig, load_config
    from paravt_core.eval.stage import run

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(config_yaml)
    if train_run_id or run_prefix:
        from components.locations import run_root

        root = run_root(run_prefix, train_run_id, report.uri)
        model = model or storage.join(root, "rl", "final")
        output_prefix = output_prefix or storage.join(root, "eval")
    if run_id:
        from paravt_core.report.stage import find_night, today_utc

        output_prefix = storage.join(output_prefix, night or find_night(output_prefix, run_id) or today_utc())
    output = storage.join(output_prefix, benchmark)
    cfg = load_config(EvalConfig, f.name, [str(o) for o in overrides])
    cfg.model = model
    cfg.output = output
    # One benchmark per task; its other settings (source, media_root, limit) come from the config.
    configured = {b.name: b for b in cfg.benchmarks}
    cfg.benchmarks = [configured.get(benchmark) or {"name": benchmark}]
    result = run(cfg)
    with open(report.path, "wb") as out:
        out.write(storage.read_bytes(storage.join(output, "report.html")))
    report.metadata["uri"] = output
    report.metadata["gpus"] = gpus
    for key, value in result.metrics.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            metrics.log_metric(key, value)
    print(json.dumps(result.outputs))
    return output
