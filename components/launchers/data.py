"""What ``data_op`` (``components/data.py``) does in its pod. The component is the spec (inputs, outputs,
image, docstring) and its body one call into this module, which the image holds: the compiled pipeline then
carries no launch logic, and the code that runs is the image's own. No kfp import at run time."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kfp.dsl import Artifact, Dataset, Metrics, Output


def data_step(
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
    """``data_op``'s body (its docstring says what each parameter means)."""
    import json
    import posixpath

    from components.launchers import stage_config
    from components.locations import expose, run_root
    from components.publish import log_numbers
    from paravt_core import storage
    from paravt_core.config import DataConfig
    from paravt_core.data.stage import run

    def outside(path: str) -> bool:  # normalised first: /mnt/media/../../tmp is /tmp
        return not (posixpath.normpath(path) + "/").startswith(mount + "/")

    mount = posixpath.normpath(media_mount) if media_mount else ""
    media_root = posixpath.normpath(media_root) if media_root else ""
    if media_root and mount and outside(media_root):
        raise ValueError(
            f"media_root {media_root!r} is not under the media volume's mount {media_mount!r}: the "
            "extraction would stay in this pod; use a directory under the mount (the volume cannot move)"
        )
    cfg = stage_config(DataConfig, config_yaml, overrides)
    if mount and cfg.extract.root and outside(cfg.extract.root):  # the config's own root: the same rule
        raise ValueError(
            f"extract.root {cfg.extract.root!r} is not under the media volume's mount {media_mount!r}: the "
            "extraction would stay in this pod; leave it empty (media_root is used) or put it under the mount"
        )
    if run_id or run_prefix:
        # Left at their defaults (pod-local paths), these go to shared storage instead.
        defaults = DataConfig()
        if cfg.output == defaults.output:
            cfg.output = storage.join(run_root(run_prefix, run_id, dataset.uri), "data")
        if media_root and not cfg.extract.root:
            cfg.extract.root = media_root
        if media_root and cfg.work_dir == defaults.work_dir:
            cfg.work_dir = storage.join(media_root, ".downloads")
    result = run(cfg)
    expose(dataset, result.outputs["data"], run_id)
    with open(audit.path, "wb") as out:
        out.write(storage.read_bytes(result.outputs["audit"]))
    audit.metadata["uri"] = result.outputs["audit"]
    log_numbers(metrics, result.metrics)
    print(json.dumps(result.outputs))
    return result.outputs["data"]
