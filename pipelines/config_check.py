"""A run's stage configs, checked before it is submitted: what a step would refuse on its GPUs, hours in.

Every ``<stage>_config_yaml`` parameter of a compiled package (the value given, else the package's default)
is loaded into its stage's config class with its ``<stage>_overrides``, and the refusals the steps apply in
their pods (``paravt_core.launch.hardware``) are applied here to the GPUs the package reserves for them: CPU
on GPUs, float32 weights at 1B parameters or more, an eval with no server it can reach (here: a loopback
``base_url``, which nothing serves in the eval pod), a multi-node config given to a one-node step.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from paravt_core.config import STAGE_CONFIGS, ConfigError, load_config, stage_config

# A stage's example recipe, named in its refusal (the shipped configs).
EXAMPLES = {"sft": "configs/sft/qwen3vl_8b.yaml", "rl": "configs/rl/paragrpo_8b.yaml"}


def package_defaults(package: str) -> dict[str, Any]:
    """The package's pipeline parameters and their defaults (None: none), from the compiled IR."""
    spec = next(yaml.safe_load_all(Path(package).read_text()))
    declared = spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {})
    return {name: d.get("defaultValue") for name, d in declared.items()}


def load_text(stage: str, text: str, overrides: list) -> Any:
    """``stage``'s config from YAML text and dotted overrides, as its component loads it."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(text or "{}")
    try:
        return load_config(stage_config(stage), f.name, [str(o) for o in overrides or []])
    finally:
        os.unlink(f.name)


def stage_configs(package: str, params: dict[str, Any]) -> dict[str, Any]:
    """Each stage's config as the run would load it; a config that does not load is refused, named."""
    values = {**package_defaults(package), **params}
    configs = {}
    for stage in STAGE_CONFIGS:
        name = f"{stage}_config_yaml"
        if name not in values:
            continue
        try:
            configs[stage] = load_text(stage, values[name], values.get(f"{stage}_overrides") or [])
        except (ConfigError, ValueError) as err:
            raise ConfigError(f"{name} / {stage}_overrides: {err}") from err
    return configs


def reserved_gpus(stage: str, cfg: Any, values: dict[str, Any]) -> int:
    """GPUs the package gives ``stage``: its ``<stage>_gpus`` parameter, or a multi-node step's nodes x
    GPUs per node (fixed in the IR, no parameter); 0 for the stages without a GPU."""
    if (count := values.get(f"{stage}_gpus")) is not None:
        try:
            return int(str(count))
        except ValueError as err:
            raise ConfigError(f"{stage}_gpus={count!r} is not a GPU count") from err
    launch = getattr(cfg, "launch", None)
    if stage in EXAMPLES and launch is not None and launch.nodes > 1:
        return launch.nodes * launch.gpus_per_node
    return 0


def check_configs(package: str, params: dict[str, Any], stages: set[str] | None = None) -> None:
    """Refuse, in one line naming the parameter, what a step of this run would refuse on its GPUs;
    ``stages``: only these (``compile`` checks the configs it was given)."""
    from paravt_core.launch.hardware import check_eval_engine, check_uses_gpus

    values = {**package_defaults(package), **params}
    configs = stage_configs(package, params)
    # the weights every GPU stage holds are the base model's size (SFT's start, then its and RL's outputs)
    model = str(values.get("base_model") or values.get("checkpoint_uri") or "")
    for stage, cfg in configs.items():
        if stages is not None and stage not in stages:
            continue
        gpus = reserved_gpus(stage, cfg, values)
        if f"{stage}_gpus" in values and getattr(cfg, "launch", None) is not None and cfg.launch.nodes > 1:
            raise ConfigError(
                f"{stage}_config_yaml: launch.nodes={cfg.launch.nodes}, but this package trains {stage} on one "
                f"node: compile with --{stage}-config <this config> (its multi-node step)"
            )
        if stage == "sft":
            check_uses_gpus("sft", gpus=gpus, device="cuda", float32=not cfg.model.bf16,
                            model=model or cfg.model.uri, parameter="sft_config_yaml",
                            example=EXAMPLES["sft"])  # fmt: skip
        elif stage == "rl":
            check_uses_gpus("rl", gpus=gpus, device=cfg.device, float32=cfg.dtype == "float32",
                            model=model or cfg.model, parameter="rl_config_yaml", example=EXAMPLES["rl"])  # fmt: skip
        elif stage == "eval":
            if model:
                cfg.model = model
            check_eval_engine(cfg, gpus=gpus, reach=False)
