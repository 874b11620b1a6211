"""Compile a named pipeline to KFP IR YAML, and check that its images are pinned by digest."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml
from kfp import compiler

# An image reference pinned by content: ``name@sha256:<64 hex>`` (a tag alone can be moved or re-pushed).
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def pipelines() -> dict:
    from pipelines.ablations import ablations_pipeline
    from pipelines.nightly_eval import nightly_pipeline
    from pipelines.train import train_pipeline

    return {"train": train_pipeline, "nightly": nightly_pipeline, "ablations": ablations_pipeline}


def compile_pipeline(
    name: str, out: str, warn: bool = True, sft_config: str | None = None, rl_config: str | None = None
) -> str:
    """Compile pipeline ``name`` to ``out``; ``warn``: say on stderr which images are not pinned by digest
    (submit and schedule say it themselves, after the parameters are checked, so a mistake stays one line).
    ``sft_config`` / ``rl_config``: stage config files whose ``launch`` section shapes the train DAG
    (``launch.nodes > 1``: that stage becomes a step that creates a multi-node Kubeflow Trainer job) and
    whose text becomes the default of ``sft_config_yaml`` / ``rl_config_yaml``."""
    known = pipelines()
    if name not in known:
        raise ValueError(f"unknown pipeline {name!r}; known: {', '.join(sorted(known))}")
    pipeline = known[name]
    if sft_config or rl_config:
        if name != "train":
            raise ValueError("--sft-config / --rl-config shape the train pipeline only")
        from paravt_core.config import SftConfig, load_config
        from paravt_core.rl.config import RlConfig
        from pipelines.train import build_train_pipeline

        pipeline = build_train_pipeline(
            load_config(SftConfig, sft_config).launch if sft_config else None,
            load_config(RlConfig, rl_config).launch if rl_config else None,
            sft_yaml=one_line(sft_config) if sft_config else None,
            rl_yaml=one_line(rl_config) if rl_config else None,
        )
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    compiler.Compiler().compile(pipeline, package_path=out)
    if warn:
        warn_unpinned(name, out)
    return out


def one_line(config: str) -> str:
    """A config file's mapping as one line of flow-style YAML: the compiler writes every parameter's
    default into the package's header comments, and a multi-line default would break those comments, and
    the file, apart (kfp 2.17, compiler/pipeline_spec_builder.py, the ``# Inputs:`` block)."""
    data = yaml.safe_load(Path(config).read_text()) or {}
    return yaml.safe_dump(data, default_flow_style=True, sort_keys=False, width=float("inf")).strip()


def warn_unpinned(name: str, package: str) -> None:
    if unpinned := unpinned_images(package):
        print(
            f"warning: {name}: images not pinned by digest: {', '.join(unpinned)} (set PARAVT_IMAGE_SFT, "
            "_RL, _EVAL to registry/name@sha256:...; `paravt pipeline submit --strict` refuses these)",
            file=sys.stderr,
        )


def unpinned_images(package: str) -> list[str]:
    """Images of a compiled package's executors that are not referenced by digest, sorted."""
    spec = next(yaml.safe_load_all(Path(package).read_text()))
    executors = spec.get("deploymentSpec", {}).get("executors", {}).values()
    images = {e["container"]["image"] for e in executors if "container" in e}
    return sorted(i for i in images if not _DIGEST.search(i))
