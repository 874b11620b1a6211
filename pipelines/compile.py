"""Compile a named pipeline to KFP IR YAML, and check that its images are pinned by digest."""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path
from typing import Any

import yaml
from kfp import compiler

# An image reference pinned by content: ``name@sha256:<64 hex>`` (a tag alone can be moved or re-pushed).
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def pipelines() -> dict:
    from pipelines.ablations import ablations_pipeline
    from pipelines.nightly_eval import nightly_pipeline
    from pipelines.train import train_pipeline

    return {"train": train_pipeline, "nightly": nightly_pipeline, "ablations": ablations_pipeline}


EVAL_RECIPE = "eval/cluster.yaml"  # every pipeline's default eval config: a vLLM server in the eval pod
# What ``submit`` / ``schedule`` compile a pipeline given by name with: the recipes the DAG is meant to run.
RECIPES = {"train": {"sft": "sft/qwen3vl_8b.yaml", "rl": "rl/paragrpo_8b.yaml"}}


def recipe(relative: str) -> str:
    """A shipped config file: the repository's ``configs/``, or the images' copy (``<venv>/share/configs``)."""
    for root in (Path(__file__).resolve().parents[1] / "configs", Path(sys.prefix) / "share" / "configs"):
        if (root / relative).is_file():
            return str(root / relative)
    raise FileNotFoundError(f"no shipped config {relative} under configs/ or {sys.prefix}/share/configs")


def recipe_configs(name: str) -> dict[str, str]:
    """``{"sft_config": path, ...}``: the recipes pipeline ``name`` is compiled with when submitted by name."""
    return {f"{stage}_config": recipe(path) for stage, path in RECIPES.get(name, {}).items()}


def compile_pipeline(
    name: str,
    out: str,
    warn: bool = True,
    sft_config: str | None = None,
    rl_config: str | None = None,
    eval_config: str | None = None,
) -> str:
    """Compile pipeline ``name`` to ``out``; ``warn``: say on stderr which images are not pinned by digest
    (submit and schedule say it themselves, after the parameters are checked, so a mistake stays one line).
    ``sft_config`` / ``rl_config``: stage config files whose ``launch`` section shapes the train DAG
    (``launch.nodes > 1``: that stage becomes a step that creates a multi-node Kubeflow Trainer job) and
    whose text becomes the default of ``sft_config_yaml`` / ``rl_config_yaml``. ``eval_config``: the
    default of ``eval_config_yaml`` (None: ``configs/eval/cluster.yaml``, whose server the eval step starts
    in its pod). The configs given are checked as ``submit`` checks them (``pipelines/config_check.py``)."""
    known = pipelines()
    if name not in known:
        raise ValueError(f"unknown pipeline {name!r}; known: {', '.join(sorted(known))}")
    pipeline = known[name]
    given = {stage for stage, path in (("sft", sft_config), ("rl", rl_config), ("eval", eval_config)) if path}
    eval_config = eval_config or recipe(EVAL_RECIPE)
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
    pipeline = with_defaults(pipeline, {"eval_config_yaml": one_line(eval_config)})
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    compiler.Compiler().compile(pipeline, package_path=out)
    if given:
        from pipelines.config_check import check_configs

        try:
            check_configs(out, {}, stages=given)
        except Exception:
            Path(out).unlink()  # no package a later submit could pick up
            raise
    if warn:
        warn_unpinned(name, out)
    return out


def with_defaults(pipeline: Any, defaults: dict[str, str]) -> Any:
    """``pipeline`` (a compiled-to-be ``@dsl.pipeline``) with other defaults for those of its parameters
    that ``defaults`` names (the others are not its parameters)."""
    from kfp import dsl

    from pipelines.train import rewrite_signature

    params = inspect.signature(pipeline.pipeline_func).parameters
    if not (defaults := {k: v for k, v in defaults.items() if k in params}):
        return pipeline
    func = rewrite_signature(pipeline.pipeline_func, set(), defaults)
    return dsl.pipeline(name=pipeline.name, description=pipeline.description)(func)


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
