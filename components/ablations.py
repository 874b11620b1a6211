"""KFP components of the ablation pipeline (``pipelines/ablations.py``): a variant's RL stage, the barrier
that lists the eval tasks, the per-task eval arguments, and the comparison report.

Thin by design: the study file and the layout are ``paravt_core.ablation``; RL runs through the same
``paravt_core.rl.launch`` as ``components/rl.py`` and the evals are ``components/eval.py``'s ``eval_op``
unchanged. Every input is a pipeline parameter or a loop item, and every location is derived from the run's
root: kfp.local 2.17 replaces a task output passed into a ParallelFor with the loop item (see
``pipelines/ablations.py``).
"""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import HTML, Artifact, Markdown, Metrics, Model, Output

from components.images import EVAL_IMAGE, RL_IMAGE


@dsl.component(base_image=RL_IMAGE, install_kfp_package=False)
def ablation_rl_op(
    study_yaml: str,
    variant: str,
    config_yaml: str,
    overrides: list,
    gpus: str,
    curves: Output[Artifact],
    metrics: Output[Metrics],
    trained: Output[Model],
    run_prefix: str = "",
    run_id: str = "",
) -> str:
    """RL of one variant from the run's shared SFT checkpoint (``<root>/sft/final``) on the data that SFT
    trained on (``paravt_core.ablation.shared_data``): the base config, the pipeline's overrides, then the variant's; output
    ``<root>/ablations/<variant>/rl``. A variant with ``rl: false`` trains nothing and returns the SFT
    checkpoint. Returns the URI of the model the variant's evals read. ``gpus``: the task's accelerator
    limit, recorded on the model artifact; as an input it also makes the variant loop declare the GPU-count
    parameter, which kfp 2.17's compiler leaves out of a loop's inputs when only the limit refers to it."""
    import json
    import tempfile

    from components.locations import expose, run_root
    from components.publish import publish_rl_curves
    from paravt_core import ablation
    from paravt_core.config import load_config
    from paravt_core.rl.config import RlConfig
    from paravt_core.rl.launch import launch

    study = ablation.load_study(study_yaml)
    spec = study.variant(variant)
    root = run_root(run_prefix, run_id, trained.uri)
    model = ablation.variant_model(root, spec)
    trained.metadata["gpus"] = gpus
    if not spec.rl:
        with open(curves.path, "w") as out:
            out.write(f"{variant}: no RL (evaluates the SFT checkpoint)\n")
        expose(trained, model, run_id)
        print(json.dumps({"variant": variant, "final": model, "rl": False}))
        return model
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(config_yaml)
    cfg = load_config(RlConfig, f.name, ablation.rl_overrides(study, variant, [str(o) for o in overrides]))
    output = ablation.rl_output(root, variant)
    cfg.data, cfg.model, cfg.output = ablation.shared_data(root), ablation.sft_final(root), output
    summary = launch(cfg)
    publish_rl_curves(output, summary, curves=curves, metrics=metrics)
    print(json.dumps({"variant": variant, "final": model}))
    expose(trained, model, run_id)
    return model


@dsl.component(base_image=EVAL_IMAGE, install_kfp_package=False)
def eval_pairs_op(variants: list, benchmarks: list, trained: list) -> list:
    """The eval fan-out's items, ``<variant>::<benchmark>``; ``trained`` (every variant's RL output) makes
    this the barrier between the RL loop and the eval loop."""
    from paravt_core.ablation import eval_pairs

    print(f"trained: {trained}")
    return eval_pairs([str(v) for v in variants], [str(b) for b in benchmarks])


@dsl.component(base_image=EVAL_IMAGE, install_kfp_package=False)
def ablation_eval_args_op(
    study_yaml: str,
    item: str,
    overrides: list,
    info: Output[Artifact],
    run_prefix: str = "",
    run_id: str = "",
) -> NamedTuple(
    "EvalArgs", [("model", str), ("output_prefix", str), ("overrides", list), ("benchmark", str)]
):
    """What ``eval_op`` needs for one ``<variant>::<benchmark>`` item: the variant's model, its eval prefix
    ``<root>/ablations/<variant>/eval``, the pipeline's eval overrides then the variant's, the benchmark."""
    import json
    from collections import namedtuple

    from components.locations import run_root
    from paravt_core import ablation

    study = ablation.load_study(study_yaml)
    variant, benchmark = ablation.split_pair(item)
    root = run_root(run_prefix, run_id, info.uri)
    args = {
        "model": ablation.variant_model(root, study.variant(variant)),
        "output_prefix": ablation.eval_prefix(root, variant),
        "overrides": ablation.eval_overrides(study, variant, [str(o) for o in overrides]),
        "benchmark": benchmark,
    }
    with open(info.path, "w") as out:
        json.dump({"variant": variant, **args}, out)
    return namedtuple("EvalArgs", list(args))(**args)


@dsl.component(base_image=EVAL_IMAGE, install_kfp_package=False)
def ablation_report_op(
    study_yaml: str,
    variants: list,
    eval_outputs: list,
    report: Output[HTML],
    summary: Output[Markdown],
    metrics: Output[Metrics],
    run_prefix: str = "",
    run_id: str = "",
) -> str:
    """The comparison report of ``variants`` (fan-in of every eval) under ``<root>/ablations/report``;
    returns the URI of its ``report.html``."""
    from components.locations import run_root
    from paravt_core import ablation, storage
    from paravt_core.report.ablation import write_report

    print(f"eval outputs: {eval_outputs}")
    study = ablation.load_study(study_yaml)
    result = write_report(study, run_root(run_prefix, run_id, report.uri), [str(v) for v in variants])
    with open(report.path, "wb") as out:
        out.write(storage.read_bytes(result["outputs"]["html"]))
    with open(summary.path, "wb") as out:
        out.write(storage.read_bytes(result["outputs"]["markdown"]))
    report.metadata["uri"] = result["outputs"]["html"]
    for key, value in result["metrics"].items():
        metrics.log_metric(key, value)
    return result["outputs"]["html"]
