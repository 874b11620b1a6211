"""The base of every typed config: a pydantic model that rejects unknown keys.

Kept apart from ``paravt_core.config`` so that section models living elsewhere (``agent.config``) can build
on it while ``config`` embeds them in stage configs (``EvalConfig.agent``) without an import cycle.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfigError(ValueError):
    """A config file or override that cannot be turned into a valid stage config."""


class StrictModel(BaseModel):
    """Base for every config section: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
