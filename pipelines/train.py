"""The training DAG: data -> SFT -> RL (PARA-GRPO) -> ParallelFor(benchmarks): eval -> report.

Every stage writes under ``run_prefix`` (``<run_prefix>/sft``, ``/rl``, ``/eval/<benchmark>``,
``/report``; the data stage where its config says) and resumes from its own checkpoints, so a retried
task (KFP's task retries, or ``paravt pipeline retry``) continues where it stopped. Run it on a
cluster (``paravt pipeline submit train``) or locally with ``kfp.local.SubprocessRunner(use_venv=False)``
(``pipelines/local.py``, ``make demo``).
"""

from kfp import dsl

from components.data import data_op
from components.eval import eval_op
from components.report import report_op
from components.rl import rl_op
from components.sft import sft_op
from pipelines.nightly_eval import BENCHMARKS
from pipelines.platform import MEDIA_PVC_NAME, configure_task

PIPELINE_NAME = "paravt-train"


@dsl.pipeline(name=PIPELINE_NAME, description="ParaVT: data -> SFT -> PARA-GRPO -> eval -> report")
def train_pipeline(
    run_prefix: str = "./paravt-work/run",
    base_model: str = "Qwen/Qwen3-VL-8B-Instruct",
    benchmarks: list = BENCHMARKS,  # noqa: B006
    data_config_yaml: str = "{}",
    data_overrides: list = [],  # noqa: B006
    sft_config_yaml: str = "{}",
    sft_overrides: list = [],  # noqa: B006
    rl_config_yaml: str = "{}",
    rl_overrides: list = [],  # noqa: B006
    eval_config_yaml: str = "{}",
    eval_overrides: list = [],  # noqa: B006
    report_config_yaml: str = "{}",
    report_overrides: list = [],  # noqa: B006
    sft_gpus: str = "8",
    rl_gpus: str = "8",
    eval_gpus: str = "1",
    media_pvc: str = MEDIA_PVC_NAME,
) -> str:
    """``run_prefix``: where this run's stage outputs go (s3://bucket/runs/<name> on a cluster);
    ``base_model``: the model SFT starts from; each stage's config as YAML text plus dotted
    ``key=value`` overrides (as ``paravt <stage> --config``); GPUs per stage; ``media_pvc``: the
    PersistentVolumeClaim with the extracted media (mounted at /mnt/media). Returns the report URI."""
    data = data_op(config_yaml=data_config_yaml, overrides=data_overrides)
    configure_task(data, "data", media_pvc=media_pvc)

    sft = sft_op(
        config_yaml=sft_config_yaml,
        overrides=sft_overrides,
        data_uri=data.outputs["Output"],
        model_uri=base_model,
        output=f"{run_prefix}/sft",
    )
    configure_task(sft, "sft", gpus=sft_gpus, media_pvc=media_pvc)

    rl = rl_op(
        config_yaml=rl_config_yaml,
        overrides=rl_overrides,
        data=data.outputs["Output"],
        model=sft.outputs["Output"],
        output=f"{run_prefix}/rl",
    )
    configure_task(rl, "rl", gpus=rl_gpus, media_pvc=media_pvc)

    with dsl.ParallelFor(benchmarks, name="benchmarks") as benchmark:
        ev = eval_op(
            config_yaml=eval_config_yaml,
            overrides=eval_overrides,
            # The RL stage's final checkpoint (what rl_op returns), as a parameter: kfp.local 2.17
            # replaces a task output passed into a ParallelFor with the loop item.
            model=f"{run_prefix}/rl/final",
            benchmark=benchmark,
            output_prefix=f"{run_prefix}/eval",
            gpus=eval_gpus,
        ).after(rl)
        configure_task(ev, "eval", display_name="eval", gpus=eval_gpus, media_pvc=media_pvc)

    report = report_op(
        config_yaml=report_config_yaml,
        overrides=report_overrides,
        eval_outputs=dsl.Collected(ev.outputs["Output"]),
        sft_output=f"{run_prefix}/sft",
        rl_output=f"{run_prefix}/rl",
        output=f"{run_prefix}/report",
    )
    configure_task(report, "report")
    return report.outputs["Output"]
