"""The base of every typed config: a pydantic model that rejects unknown keys.

Kept apart from ``paravt_core.config`` so that section models living elsewhere (``agent.config``) can build
on it without importing the stage configs (and stage configs that embed them, ``RlConfig`` and
``EvalConfig``, can live with their stages).
"""

from __future__ import annotations

from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict


class ConfigError(ValueError):
    """A config file or override that cannot be turned into a valid stage config."""


class StrictModel(BaseModel):
    """Base for every config section: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def union_models(annotation: Any) -> list[type[BaseModel]]:
    """The config classes of a section that is a union of models told apart by a ``kind`` field (an engine
    section, ``engines.registry.engine_config``); empty for any other annotation."""
    if get_origin(annotation) not in (Union, UnionType):
        return []
    args = get_args(annotation)
    if args and all(
        isinstance(a, type) and issubclass(a, BaseModel) and "kind" in a.model_fields for a in args
    ):
        return list(args)
    return []


def union_member(models: list[type[BaseModel]], kind: Any) -> type[BaseModel] | None:
    """The class of ``models`` whose ``kind`` default is ``kind`` (None: no such class)."""
    for model in models:
        if model.model_fields["kind"].default == kind:
            return model
    return None


def kind_section(value: Any, default: Any) -> Any:
    """A kind-chosen section as given, read against the stage's ``default`` one: without a ``kind`` it is the
    default's kind, and a section of the default's kind starts from the default's values (a stage may default
    a field differently from its class)."""
    if not isinstance(value, dict):
        return value
    if value.get("kind", default.kind) != default.kind:
        return value
    return {**default.model_dump(), **value}
