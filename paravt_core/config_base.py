"""The base of every typed config: a pydantic model that rejects unknown keys.

Kept apart from ``paravt_core.config`` so that section models living elsewhere (``agent.config``) can build
on it without importing the stage configs (and stage configs that embed them, ``RlConfig`` and
``EvalConfig``, can live with their stages).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfigError(ValueError):
    """A config file or override that cannot be turned into a valid stage config."""


class StrictModel(BaseModel):
    """Base for every config section: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
