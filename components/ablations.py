"""KFP components of the ablation pipeline (``pipelines/ablations.py``): a variant's RL stage, the barrier
that lists the eval tasks, the per-task eval arguments, and the comparison report.

Specs: each body is one call into ``components/launchers/ablations.py``. The study file and the layout are ``paravt_core.ablation``; RL runs through the same
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
    from components.launchers.ablations import ablation_rl_step

    return ablation_rl_step(
        study_yaml=study_yaml,
        variant=variant,
        config_yaml=config_yaml,
        overrides=overrides,
        gpus=gpus,
        curves=curves,
        metrics=metrics,
        trained=trained,
        run_prefix=run_prefix,
        run_id=run_id,
    )


@dsl.component(base_image=EVAL_IMAGE, install_kfp_package=False)
def eval_pairs_op(variants: list, benchmarks: list, trained: list) -> list:
    """The eval fan-out's items, ``<variant>::<benchmark>``; ``trained`` (every variant's RL output) makes
    this the barrier between the RL loop and the eval loop."""
    from components.launchers.ablations import eval_pairs_step

    return eval_pairs_step(variants=variants, benchmarks=benchmarks, trained=trained)


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
    from components.launchers.ablations import ablation_eval_args_step

    return ablation_eval_args_step(
        study_yaml=study_yaml, item=item, overrides=overrides, info=info, run_prefix=run_prefix, run_id=run_id
    )


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
    from components.launchers.ablations import ablation_report_step

    return ablation_report_step(
        study_yaml=study_yaml,
        variants=variants,
        eval_outputs=eval_outputs,
        report=report,
        summary=summary,
        metrics=metrics,
        run_prefix=run_prefix,
        run_id=run_id,
    )
