"""KFP component: the data stage (download -> extract -> materialize -> validate -> audit).

Thin by design: the body imports paravt_core and calls the same ``run(cfg)`` as the CLI. The config
travels as YAML text plus dotted overrides; it never holds secrets (S3 credentials come from the
environment, mounted from a Kubernetes Secret by the pipeline).
"""

from kfp import dsl
from kfp.dsl import Artifact, Metrics, Output

from components.images import SFT_IMAGE


@dsl.component(base_image=SFT_IMAGE, install_kfp_package=False)
def data_op(config_yaml: str, overrides: list, audit: Output[Artifact], metrics: Output[Metrics]) -> str:
    """Run ``paravt data``; return the URI of the materialized data (a completed output prefix)."""
    import json
    import tempfile

    from paravt_core import storage
    from paravt_core.config import DataConfig, load_config
    from paravt_core.data.stage import run

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(config_yaml)
    cfg = load_config(DataConfig, f.name, [str(o) for o in overrides])
    result = run(cfg)
    with open(audit.path, "wb") as out:
        out.write(storage.read_bytes(result.outputs["audit"]))
    audit.metadata["uri"] = result.outputs["audit"]
    for key, value in result.metrics.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            metrics.log_metric(key, value)
    print(json.dumps(result.outputs))
    return result.outputs["data"]
