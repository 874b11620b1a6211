"""The training DAG: data -> (sft -> rl -> eval -> report, added by later stages).

Run it on a cluster (``paravt pipeline compile`` then ``kfp run create``) or locally with
``kfp.local.SubprocessRunner(use_venv=False)`` (see ``pipelines/local.py``).
"""

from kfp import dsl

from components.data import data_op
from pipelines.platform import MEDIA_PVC_NAME, configure_task

PIPELINE_NAME = "paravt-train"


@dsl.pipeline(name=PIPELINE_NAME, description="ParaVT: data -> SFT -> PARA-GRPO -> eval -> report")
def train_pipeline(
    data_config_yaml: str = "{}",
    data_overrides: list = [],  # noqa: B006
    media_pvc: str = MEDIA_PVC_NAME,
) -> str:
    """``data_config_yaml``: a DataConfig as YAML text; ``data_overrides``: dotted ``key=value`` strings;
    ``media_pvc``: the PersistentVolumeClaim holding the extracted media (mounted at /mnt/media)."""
    data = data_op(config_yaml=data_config_yaml, overrides=data_overrides)
    configure_task(data, "data", media_pvc=media_pvc)
    return data.outputs["Output"]
