"""KFP component: the SFT stage (data stage output -> fine-tuned HF checkpoint).

A spec, like ``components/data.py``: the body is one call into ``components/launchers/sft.py``, which calls
``paravt_core.sft.stage.run``. On a node
with several GPUs it starts the same stage under ``torchrun`` (one process per GPU, FSDP2). The stage
resumes from its newest checkpoint in ``output``, so a rerun continues training: in the pod after a crash
(``launch.retries``, paravt_core/launch/retry.py: Argo does not retry a non-zero exit under KFP's OnError
default), or a KFP retry.
"""

from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Input, Metrics, Model, Output

from components.images import SFT_IMAGE


@dsl.component(base_image=SFT_IMAGE, install_kfp_package=False)
def sft_op(
    config_yaml: str,
    overrides: list,
    data: Input[Dataset],
    model_uri: str,
    curve: Output[HTML],
    metrics: Output[Metrics],
    model: Output[Model],
    tensorboard: Output[Artifact],
    output: str = "",
    run_prefix: str = "",
    run_id: str = "",
) -> str:
    """Run ``paravt sft`` on ``data`` (the data step's ``Dataset``, or an importer's: KFP records the
    lineage); return the URI of the final Hugging Face checkpoint, also the ``model`` artifact (no
    copy). ``output``: where the stage writes (empty: ``<run root>/sft``, components/locations.py);
    ``tensorboard``: its TensorBoard logs (``<output>/tensorboard``)."""
    from components.launchers.sft import sft_step

    return sft_step(
        config_yaml=config_yaml,
        overrides=overrides,
        data=data,
        model_uri=model_uri,
        curve=curve,
        metrics=metrics,
        model=model,
        tensorboard=tensorboard,
        output=output,
        run_prefix=run_prefix,
        run_id=run_id,
    )
