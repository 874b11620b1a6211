"""What the components of ``components/ablations.py`` (``ablation_rl_op``, ``eval_pairs_op``, ``ablation_eval_args_op``, ``ablation_report_op``) do in their pods. Each component
is the spec (inputs, outputs, image, docstring) and its body one call into this module, which the image
holds: the compiled pipeline then carries no launch logic, and the code that runs is the image's own. No
kfp import at run time."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from kfp.dsl import HTML, Artifact, Markdown, Metrics, Model, Output


def ablation_rl_step(
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
    """``ablation_rl_op``'s body (its docstring says what each parameter means)."""
    import json

    from components.launchers import stage_config
    from components.locations import expose, run_root
    from components.publish import publish_rl_curves
    from paravt_core import ablation
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
    cfg = stage_config(
        RlConfig, config_yaml, ablation.rl_overrides(study, variant, [str(o) for o in overrides])
    )
    output = ablation.rl_output(root, variant)
    cfg.data, cfg.model, cfg.output = ablation.shared_data(root), ablation.sft_final(root), output
    summary = launch(cfg)
    publish_rl_curves(output, summary, curves=curves, metrics=metrics)
    print(json.dumps({"variant": variant, "final": model}))
    expose(trained, model, run_id)
    return model


def eval_pairs_step(variants: list, benchmarks: list, trained: list) -> list:
    """``eval_pairs_op``'s body (its docstring says what each parameter means)."""
    from paravt_core.ablation import eval_pairs

    print(f"trained: {trained}")
    return eval_pairs([str(v) for v in variants], [str(b) for b in benchmarks])


def ablation_eval_args_step(
    study_yaml: str,
    item: str,
    overrides: list,
    info: Output[Artifact],
    run_prefix: str = "",
    run_id: str = "",
) -> NamedTuple(
    "EvalArgs", [("model", str), ("output_prefix", str), ("overrides", list), ("benchmark", str)]
):
    """``ablation_eval_args_op``'s body (its docstring says what each parameter means)."""
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


def ablation_report_step(
    study_yaml: str,
    variants: list,
    eval_outputs: list,
    report: Output[HTML],
    summary: Output[Markdown],
    metrics: Output[Metrics],
    run_prefix: str = "",
    run_id: str = "",
) -> str:
    """``ablation_report_op``'s body (its docstring says what each parameter means)."""
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
