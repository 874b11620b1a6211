"""The training DAG: data -> SFT -> RL (PARA-GRPO) -> eval (ParallelFor(benchmark x shard), merge) -> report.

Every stage writes under the run's root (``<root>/data``, ``/sft``, ``/rl``, ``/eval/<benchmark>``,
``/report``): ``run_prefix`` when given, else the run's directory under the pipeline root (object
storage on a cluster; components/locations.py). The data and the SFT and RL checkpoints are also the
tasks' ``Dataset`` / ``Model`` artifacts (their URIs are those directories: no copy), and SFT and RL take
the data as ``Input[Dataset]``, so ML Metadata links data -> SFT and data -> RL (lineage in the UI); RL
takes SFT's checkpoint as its URI (text), see below.
On a cluster KFP 2.17's launcher downloads every input artifact's prefix into the pod before the step
runs (backend/src/v2/component/launcher_v2.go, downloadArtifacts): the data directory (rows and audit,
no media); not the SFT checkpoint (~16 GB, into node-local scratch on every attempt, with no way to
request that disk through KFP), which RL gets as a URI; the stages themselves read the S3 locations.
Each stage resumes from its own checkpoints, so a retried
task (KFP's task retries, or ``paravt pipeline retry``) continues where it stopped. Run it on a
cluster (``paravt pipeline submit train``) or locally with ``kfp.local.SubprocessRunner(use_venv=False)``
(``pipelines/local.py``, ``make demo``).
"""

import inspect

from kfp import dsl

from components.data import data_op
from components.images import RL_IMAGE, SFT_IMAGE
from components.multinode import rl_trainjob_op, sft_trainjob_op
from components.report import report_op
from components.rl import rl_op
from components.sft import sft_op
from paravt_core.config import LaunchConfig
from pipelines.eval_step import eval_step
from pipelines.nightly_eval import BENCHMARKS
from pipelines.platform import MEDIA_MOUNT_PATH, MEDIA_PVC_NAME, configure_task, launcher_platform, node_spec

PIPELINE_NAME = "paravt-train"


def _multinode_inputs(launch: LaunchConfig, stage: str, image: str) -> dict:
    return dict(
        nodes=launch.nodes,
        gpus_per_node=launch.gpus_per_node,
        api=launch.api,
        runtime=launch.runtime,
        poll_s=launch.poll_s,
        node_spec=node_spec(stage, image),
    )


def _multinode_name(stage: str, launch: LaunchConfig) -> str:
    kind = "TrainJob" if launch.api == "trainjob" else "PyTorchJob"
    return f"{stage} ({kind}, {launch.nodes}x{launch.gpus_per_node} GPUs)"


def build_train_pipeline(
    sft_launch: LaunchConfig | None = None,
    rl_launch: LaunchConfig | None = None,
    sft_yaml: str | None = None,
    rl_yaml: str | None = None,
):
    """The train DAG for the given ``launch`` sections of the SFT and RL configs (known when compiling:
    a multi-node stage is a different step, a small pod that creates and follows a Kubeflow Trainer job,
    ``components/multinode.py``). ``None`` or one node: the stage trains in its own GPU pod.
    ``sft_yaml`` / ``rl_yaml``: the config files' text, the defaults of ``sft_config_yaml`` /
    ``rl_config_yaml``, so a run submitted without them trains the recipe the DAG was shaped for (not the
    CPU demo that ``"{}"`` is, nor a 2-node DAG with the 1-node batch)."""
    sft_launch, rl_launch = sft_launch or LaunchConfig(), rl_launch or LaunchConfig()

    def train_pipeline(
        run_prefix: str = "",
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
        eval_shards: int = 1,
        media_pvc: str = MEDIA_PVC_NAME,
        media_root: str = MEDIA_MOUNT_PATH,
    ) -> str:
        """``run_prefix``: where this run's stage outputs go (``<run_prefix>/<stage>``); empty (default):
        the run's own directory under the pipeline root, ``<pipeline root>/paravt-train/<run id>/<stage>``
        (object storage on a cluster, the same for every retry; components/locations.py);
        ``base_model``: the model SFT starts from; each stage's config as YAML text plus dotted
        ``key=value`` overrides (as ``paravt <stage> --config``); GPUs per stage (text: KFP 2.17's driver
        reads the count as a string); ``eval_shards``: eval tasks per benchmark, each on a disjoint
        slice of its samples by id, merged into one result (1: one task per benchmark); ``media_pvc``: the
        PersistentVolumeClaim with the extracted media, mounted at /mnt/media; ``media_root``: where the data
        stage extracts, a directory under that mount (anything else is refused: the mount cannot move;
        empty: the config decides). Returns the report URI."""
        run_id = dsl.PIPELINE_JOB_ID_PLACEHOLDER  # passed alone: the driver resolves only exact placeholders
        data = data_op(
            config_yaml=data_config_yaml,
            overrides=data_overrides,
            run_prefix=run_prefix,
            run_id=run_id,
            media_root=media_root,
            media_mount=MEDIA_MOUNT_PATH,  # another media_root is refused: the mount is fixed
        )
        configure_task(data, "data", media_pvc=media_pvc)

        common = dict(run_prefix=run_prefix, run_id=run_id)
        if sft_launch.nodes > 1:
            sft = sft_trainjob_op(
                config_yaml=sft_config_yaml,
                overrides=sft_overrides,
                data_uri=data.outputs["Output"],
                model_uri=base_model,
                media_pvc=media_pvc,
                **_multinode_inputs(sft_launch, "sft", SFT_IMAGE),
                **common,
            )
            configure_task(
                sft, "sft", display_name=_multinode_name("sft", sft_launch), platform=launcher_platform("sft")
            )
        else:
            sft = sft_op(
                config_yaml=sft_config_yaml,
                overrides=sft_overrides,
                data=data.outputs["dataset"],
                model_uri=base_model,
                **common,
            )
            configure_task(sft, "sft", gpus=sft_gpus, media_pvc=media_pvc)

        if rl_launch.nodes > 1:
            rl = rl_trainjob_op(
                config_yaml=rl_config_yaml,
                overrides=rl_overrides,
                data=data.outputs["Output"],
                model=sft.outputs["Output"],
                media_pvc=media_pvc,
                **_multinode_inputs(rl_launch, "rl", RL_IMAGE),
                **common,
            )
            configure_task(
                rl, "rl", display_name=_multinode_name("rl", rl_launch), platform=launcher_platform("rl")
            )
        else:
            rl = rl_op(
                config_yaml=rl_config_yaml,
                overrides=rl_overrides,
                data=data.outputs["dataset"],
                model=sft.outputs["Output"],  # the checkpoint's URI: no 16 GB copy into the pod
                **common,
            )
            configure_task(rl, "rl", gpus=rl_gpus, media_pvc=media_pvc)

        # The model is the RL stage's final checkpoint, found under the run's root (not rl's task output:
        # kfp.local 2.17 replaces a task output passed into a ParallelFor with the loop item).
        merged = eval_step(benchmarks=benchmarks, shards=eval_shards, gpus=eval_gpus, media_pvc=media_pvc,
                           after=(rl,), config_yaml=eval_config_yaml, overrides=eval_overrides,
                           run_prefix=run_prefix, train_run_id=run_id)  # fmt: skip

        report = report_op(
            config_yaml=report_config_yaml,
            overrides=report_overrides,
            eval_outputs=dsl.Collected(merged.outputs["Output"]),
            run_prefix=run_prefix,
            run_id=run_id,
        )
        configure_task(report, "report")
        return report.outputs["Output"]

    # A multi-node stage's GPUs are launch.nodes x launch.gpus_per_node of its config, fixed in the IR: its
    # GPU parameter would be a knob that does nothing, so the compiled pipeline does not have it.
    unused = {
        f"{stage}_gpus" for stage, launch in (("sft", sft_launch), ("rl", rl_launch)) if launch.nodes > 1
    }
    description = "ParaVT: data -> SFT -> PARA-GRPO -> eval -> report"
    defaults = {
        name: text for name, text in (("sft_config_yaml", sft_yaml), ("rl_config_yaml", rl_yaml)) if text
    }
    return dsl.pipeline(name=PIPELINE_NAME, description=description)(
        rewrite_signature(train_pipeline, unused, defaults)
    )


def rewrite_signature(func, names: set[str], defaults: dict[str, str] | None = None):
    """``func`` with the parameters ``names`` (which must have defaults) left out of its signature and
    ``defaults`` replacing those of others: KFP makes every parameter of a pipeline function a pipeline
    input with its default (kfp 2.17 dsl/graph_component.py reads ``inspect.signature`` and calls the
    function positionally in that order). Python has no conditional parameters, hence the rewritten
    signature."""
    if not names and not defaults:
        return func
    signature = inspect.signature(func)
    kept = [
        p.replace(default=(defaults or {}).get(p.name, p.default))
        for p in signature.parameters.values()
        if p.name not in names
    ]

    def pipeline(*args, **kwargs):  # KFP passes the inputs by position; a rewrite of a rewrite, by name
        return func(**dict(zip([p.name for p in kept][: len(args)], args, strict=True)), **kwargs)

    pipeline.__signature__ = signature.replace(parameters=kept)
    pipeline.__name__, pipeline.__qualname__, pipeline.__doc__ = (
        func.__name__,
        func.__qualname__,
        func.__doc__,
    )
    pipeline.__module__ = func.__module__
    return pipeline


train_pipeline = build_train_pipeline()
