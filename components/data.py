"""KFP component: the data stage (download -> extract -> materialize -> validate -> audit).

A spec: the body is one call into ``components/launchers/data.py`` (in the image), which calls the same
``run(cfg)`` as the CLI. The config
travels as YAML text plus dotted overrides; it never holds secrets (S3 credentials come from the
environment, mounted from a Kubernetes Secret by the pipeline).
"""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Metrics, Output

from components.images import SFT_IMAGE


@dsl.component(base_image=SFT_IMAGE, install_kfp_package=False)
def data_op(
    config_yaml: str,
    overrides: list,
    audit: Output[Artifact],
    metrics: Output[Metrics],
    dataset: Output[Dataset],
    run_prefix: str = "",
    run_id: str = "",
    media_root: str = "",
    media_mount: str = "",
) -> str:
    """Run ``paravt data``; return the URI of the materialized data (a completed output prefix), also
    the ``dataset`` artifact (no copy). In a pipeline (``run_id`` set) what the config leaves at its
    default goes to shared storage, never into the pod: the output to ``<run root>/data`` (components/
    locations.py), and with ``media_root`` (the media volume's mount) the extraction root to
    ``media_root`` and the downloaded archives to ``<media_root>/.downloads``. ``media_mount``: where the
    pipeline mounted the media volume (fixed when compiling); a ``media_root`` outside it is refused, since
    the extraction would stay inside this pod where no later stage sees it."""
    from components.launchers.data import data_step

    return data_step(
        config_yaml=config_yaml,
        overrides=overrides,
        audit=audit,
        metrics=metrics,
        dataset=dataset,
        run_prefix=run_prefix,
        run_id=run_id,
        media_root=media_root,
        media_mount=media_mount,
    )
