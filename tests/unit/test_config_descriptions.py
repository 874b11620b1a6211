"""Every config field carries a one-line ``Field(description=...)``, so ``--help`` and ``paravt config show``
teach every key. Walks every section model reachable from the stage configs, and every ``StrictModel`` defined
in a config module (a section not wired into a stage yet), so a new field without a description fails here."""

from __future__ import annotations

import importlib
import pkgutil
import types
import typing

import pytest
from pydantic import BaseModel

import paravt_core
from paravt_core.cli_help import describe_fields
from paravt_core.config import STAGE_CONFIGS, stage_config
from paravt_core.config_base import StrictModel

# One line in --help: the description is printed under its key, indented by 6 columns.
MAX_CHARS = 120


def _models_in(annotation: typing.Any) -> list[type[BaseModel]]:
    """Pydantic models inside an annotation: ``M``, ``M | None``, ``list[M]``, ``dict[str, M]``, ..."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    if typing.get_origin(annotation) is not None or isinstance(annotation, types.UnionType):
        for arg in typing.get_args(annotation):
            found += _models_in(arg)
    return found


def _reachable(model: type[BaseModel], seen: dict[str, type[BaseModel]]) -> None:
    key = f"{model.__module__}.{model.__qualname__}"
    if key in seen:
        return
    seen[key] = model
    for info in model.model_fields.values():
        for inner in _models_in(info.annotation):
            _reachable(inner, seen)


def _config_models() -> dict[str, type[BaseModel]]:
    seen: dict[str, type[BaseModel]] = {}
    for stage in STAGE_CONFIGS:
        _reachable(stage_config(stage), seen)
    # Every module named *config* in the package (sections another stage may embed later).
    for mod in pkgutil.walk_packages(paravt_core.__path__, "paravt_core."):
        if mod.name.rsplit(".", 1)[-1].startswith("config"):
            importlib.import_module(mod.name)
    stack = list(StrictModel.__subclasses__())
    while stack:
        cls = stack.pop()
        stack += cls.__subclasses__()
        if cls.__module__.startswith("paravt_core.") and "config" in cls.__module__.rsplit(".", 1)[-1]:
            _reachable(cls, seen)
    return seen


MODELS = _config_models()


def test_the_walk_finds_the_stage_sections() -> None:
    # A walk that found nothing would pass the test below vacuously.
    names = {m.__name__ for m in MODELS.values()}
    assert {"DataConfig", "SftConfig", "RlConfig", "EvalConfig", "ReportConfig"} <= names
    assert {"AgentConfig", "SubagentConfig", "RewardConfig", "JudgeConfig", "EvalBenchmarkConfig"} <= names
    assert len(MODELS) >= 30


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_field_has_a_one_line_description(name: str) -> None:
    model = MODELS[name]
    missing = [f for f, info in model.model_fields.items() if not (info.description or "").strip()]
    assert not missing, f"{name}: add Field(description=...) to {missing}"
    for field, info in model.model_fields.items():
        text = info.description or ""
        assert "\n" not in text and len(text) <= MAX_CHARS, (
            f"{name}.{field}: one line of <= {MAX_CHARS} chars"
        )


def test_help_prints_each_description_under_its_key() -> None:
    lines = describe_fields(stage_config("rl"))
    at = lines.index("group_size = 8   (int; >= 2)")
    assert lines[at + 1] == "    rollouts per prompt (GRPO group n)"
    at = lines.index("paravt.reward.judge.deadline_s = 30.0   (float; > 0.0)")
    assert lines[at + 1] == "    seconds for a whole verdict, retries included"
    # every leaf line is followed by its description line
    keys = [i for i, line in enumerate(lines) if not line.startswith("    ")]
    assert all(i + 1 < len(lines) and lines[i + 1].startswith("    ") for i in keys)
