"""The ablation DAG: the paper's study as one run, data and SFT once, every recipe variant from the same SFT.

    data -> SFT -> ParallelFor(variants): RL(variant) -> eval pairs (barrier)
         -> ParallelFor(variant::benchmark): eval args -> eval -> comparison report

The variants are a study file's rows (``configs/ablations/paper.yaml``, passed as YAML text in
``study_yaml``): each is a set of dotted recipe overrides on the one base RL config (``rl_config_yaml`` +
``rl_overrides``), and optionally eval overrides where the row changes the protocol (sequential tool
calls). Every variant's evals use the same eval config, so the rows differ only by what the study says.
Outputs under the run's root: ``data/``, ``sft/``, ``ablations/<variant>/rl``, ``ablations/<variant>/eval/
<benchmark>``, ``ablations/report`` (``paravt_core.ablation``).

Why two flat loops instead of a benchmark loop nested in the variant loop: kfp.local 2.17 (what ``make
ablations-demo`` and the tests run) binds a nested loop's inputs wrongly - an outer task's output and the
outer loop item both arrive as the inner loop's item (checked with kfp 2.17.0; the train pipeline's eval
loop has the same workaround). So the eval loop is flat, over ``variant::benchmark`` items listed by a
barrier task after every RL, and each item's eval arguments come from a task inside the same iteration.
The evals start when the last RL ends (on a cluster the RLs dominate the run anyway).
"""

import json
from pathlib import Path

import yaml
from kfp import dsl

from components.ablations import ablation_eval_args_op, ablation_report_op, ablation_rl_op, eval_pairs_op
from components.data import data_op
from components.eval import eval_op
from components.sft import sft_op
from paravt_core.ablation import load_study
from pipelines.platform import MEDIA_MOUNT_PATH, MEDIA_PVC_NAME, configure_task

PIPELINE_NAME = "paravt-ablations"
PAPER_STUDY = Path(__file__).resolve().parents[1] / "configs" / "ablations" / "paper.yaml"
# The default as one line of JSON (YAML reads it): kfp 2.17's compiler copies defaults into the package's
# comment header, and a multi-line default breaks that header.
_PAPER_TEXT = json.dumps(yaml.safe_load(PAPER_STUDY.read_text()), ensure_ascii=False)
_PAPER = load_study(_PAPER_TEXT)


@dsl.pipeline(
    name=PIPELINE_NAME, description="ParaVT ablations: recipe variants from one SFT, one comparison"
)
def ablations_pipeline(
    run_prefix: str = "",
    base_model: str = "Qwen/Qwen3-VL-8B-Instruct",
    study_yaml: str = _PAPER_TEXT,
    variants: list = _PAPER.names(),  # noqa: B006, B008
    benchmarks: list = _PAPER.benchmarks,  # noqa: B006
    data_config_yaml: str = "{}",
    data_overrides: list = [],  # noqa: B006
    sft_config_yaml: str = "{}",
    sft_overrides: list = [],  # noqa: B006
    rl_config_yaml: str = "{}",
    rl_overrides: list = [],  # noqa: B006
    eval_config_yaml: str = "{}",
    eval_overrides: list = [],  # noqa: B006
    sft_gpus: str = "8",
    rl_gpus: str = "8",
    eval_gpus: str = "1",
    media_pvc: str = MEDIA_PVC_NAME,
    media_root: str = MEDIA_MOUNT_PATH,
) -> str:
    """``study_yaml``: the study file's text (default: the paper's, configs/ablations/paper.yaml);
    ``variants``: which of its rows to run (names); ``benchmarks``: the eval benchmarks of every row (the
    report's columns are the study's); ``rl_config_yaml`` + ``rl_overrides``: the base RL recipe every
    variant starts from (e.g. the text of configs/rl/paragrpo_8b.yaml); the other parameters as in the
    train pipeline. Returns the comparison report's URI."""
    run_id = dsl.PIPELINE_JOB_ID_PLACEHOLDER
    data = data_op(
        config_yaml=data_config_yaml,
        overrides=data_overrides,
        run_prefix=run_prefix,
        run_id=run_id,
        media_root=media_root,
        media_mount=MEDIA_MOUNT_PATH,  # another media_root is refused: the mount is fixed
    )
    configure_task(data, "data", media_pvc=media_pvc)

    sft = sft_op(
        config_yaml=sft_config_yaml,
        overrides=sft_overrides,
        data=data.outputs["dataset"],
        model_uri=base_model,
        run_prefix=run_prefix,
        run_id=run_id,
    )
    configure_task(sft, "sft", gpus=sft_gpus, media_pvc=media_pvc)

    with dsl.ParallelFor(variants, name="variants") as variant:
        # Data and SFT checkpoint found under the run's root, not passed in (see the module docstring).
        rl = ablation_rl_op(
            study_yaml=study_yaml,
            variant=variant,
            config_yaml=rl_config_yaml,
            overrides=rl_overrides,
            gpus=rl_gpus,
            run_prefix=run_prefix,
            run_id=run_id,
        ).after(sft)
        configure_task(rl, "rl", display_name="rl", gpus=rl_gpus, media_pvc=media_pvc)

    pairs = eval_pairs_op(
        variants=variants, benchmarks=benchmarks, trained=dsl.Collected(rl.outputs["Output"])
    )
    configure_task(pairs, "report", display_name="eval tasks")

    with dsl.ParallelFor(pairs.output, name="evals") as item:
        args = ablation_eval_args_op(
            study_yaml=study_yaml, item=item, overrides=eval_overrides, run_prefix=run_prefix, run_id=run_id
        )
        configure_task(args, "report", display_name="eval args")
        ev = eval_op(
            config_yaml=eval_config_yaml,
            overrides=args.outputs["overrides"],
            model=args.outputs["model"],
            benchmark=args.outputs["benchmark"],
            output_prefix=args.outputs["output_prefix"],
            gpus=eval_gpus,
        )
        configure_task(ev, "eval", display_name="eval", gpus=eval_gpus, media_pvc=media_pvc)

    report = ablation_report_op(
        study_yaml=study_yaml,
        variants=variants,
        eval_outputs=dsl.Collected(ev.outputs["Output"]),
        run_prefix=run_prefix,
        run_id=run_id,
    )
    configure_task(report, "report", display_name="comparison report")
    return report.outputs["Output"]
