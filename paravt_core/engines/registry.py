"""Every engine kind in one place, and the one way a stage builds its engine.

``engine.kind`` selects a kind; its fields are that kind's config class (``engines/kinds/<kind>.py``), so a
stage's ``engine`` section is a union discriminated by ``kind`` (``engine_config(stage)``) and ``--help`` lists
each kind's fields. ``build(config, context)`` makes the engine for RL, eval and ``paravt agent run`` alike.
Adding an engine: a module in ``engines/kinds/`` with its config class, ``build`` and ``KIND``, plus its line
below.
"""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import Field

from paravt_core.config_base import ConfigError

from .kinds import openai, sglang, transformers, vllm
from .kinds.base import STAGES, BuildContext, EngineKind

KINDS: dict[str, EngineKind] = {
    kind.name: kind
    for kind in (
        transformers.KIND,
        sglang.KIND,
        vllm.KIND,
        openai.KIND,
    )
}


def kinds_for(stage: str) -> list[EngineKind]:
    """The kinds that can serve ``stage`` (one of ``kinds.base.STAGES``), in registry order."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}: one of {STAGES}")
    return [k for k in KINDS.values() if stage in k.stages]


def engine_config(stage: str) -> Any:
    """The type of ``stage``'s ``engine`` section: its kinds' config classes, told apart by ``kind``."""
    classes = tuple(k.config for k in kinds_for(stage))
    return Annotated[Union[classes], Field(discriminator="kind")]  # noqa: UP007 - built from a tuple


def check_kind(stage: str, kind: str) -> EngineKind:
    """The registered kind ``kind`` if it can serve ``stage``; else ``ConfigError`` saying why."""
    found = KINDS.get(kind)
    if found is None:
        raise ConfigError(f"engine.kind={kind!r} is not an engine kind: one of {', '.join(KINDS)}")
    if stage not in found.stages:
        why = found.refused.get(stage, f"it does not serve {stage}")
        raise ConfigError(f"engine.kind={kind} cannot serve {stage}: {why}")
    return found


def build(config: Any, context: BuildContext) -> Any:
    """The engine ``config`` describes, for ``context.stage``."""
    return check_kind(context.stage, config.kind).build(config, context)


__all__ = ["KINDS", "BuildContext", "EngineKind", "build", "check_kind", "engine_config", "kinds_for"]
