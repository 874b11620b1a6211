"""Typed stage configs: YAML file + dotted ``key=value`` overrides, unknown keys rejected.

Every stage has one pydantic model. ``load_config(DataConfig, "c.yaml", ["extract.workers=4"])``
reads the YAML, applies the overrides (values parsed as YAML scalars, so ``4`` is an int and
``[a, b]`` a list), and validates. Any unknown key, at any depth, is an error that lists the
valid names at that level.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

C = TypeVar("C", bound="StrictModel")


class ConfigError(ValueError):
    """A config file or override that cannot be turned into a valid stage config."""


class StrictModel(BaseModel):
    """Base for every config section: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# ---------------------------------------------------------------------------------------------
# Data stage
# ---------------------------------------------------------------------------------------------


class DownloadConfig(StrictModel):
    """Where the media archives and the parquets come from.

    A source is a Hugging Face dataset repo id (``hf://ParaVT/ParaVT-Source`` or a bare
    ``owner/name``), a local directory (used in place), or an ``s3://`` prefix. Include patterns are
    fnmatch patterns on paths relative to the source (``museg/charades*`` = only the Charades zips).
    An empty ``media_source`` downloads no archives: ``extract.root`` must then already hold the media.
    """

    media_source: str = "hf://ParaVT/ParaVT-Source"
    parquet_source: str = "hf://ParaVT/ParaVT-Parquet"
    media_include: list[str] = Field(default_factory=lambda: ["*.zip"])
    parquet_include: list[str] = Field(default_factory=lambda: ["*.parquet"])
    revision: str | None = None
    max_workers: int = Field(default=4, ge=1)


class ExtractConfig(StrictModel):
    # Extraction root (one tree for every archive). Empty: <work_dir>/media.
    root: str = ""
    workers: int = Field(default=2, ge=1)


class MaterializeConfig(StrictModel):
    # Where sentinel paths point after materialization. Empty: the local extraction root.
    # An s3:// prefix makes every media reference an s3:// URI under it.
    media_prefix: str = ""
    # With an s3:// media_prefix, upload the extracted media there (skipped when already uploaded).
    upload_media: bool = True
    batch_rows: int = Field(default=16384, ge=1)
    threads: int = Field(default=2, ge=1)  # batches processed concurrently per file


class ValidateConfig(StrictModel):
    check_files_exist: bool = True
    # Decode-and-shape checks of `messages` / `extra_info`; off = trust the structure, check paths only.
    check_structure: bool = True
    # Fail the stage when (missing + invalid rows) / rows exceeds this share.
    max_bad_fraction: float = Field(default=0.005, ge=0.0, le=1.0)


class DataConfig(StrictModel):
    """``paravt data``: download -> extract -> materialize -> validate -> audit."""

    work_dir: str = "./paravt-work"  # local scratch: downloads and the extracted media root
    output: str = "./paravt-work/data"  # URI of the materialized parquets + audit
    download: DownloadConfig = Field(default_factory=DownloadConfig)
    extract: ExtractConfig = Field(default_factory=ExtractConfig)
    materialize: MaterializeConfig = Field(default_factory=MaterializeConfig)
    validate_: ValidateConfig = Field(default_factory=ValidateConfig, alias="validate")

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)


# ---------------------------------------------------------------------------------------------
# Report stage
# ---------------------------------------------------------------------------------------------


class TrendConfig(StrictModel):
    """Nightly eval trend. This night's eval outputs are ``<results_prefix>/<night>/<benchmark>/``; every
    night's summary is ``<results_prefix>/nights/<night>.json``. Empty ``results_prefix``: no trend."""

    results_prefix: str = ""
    # YYYY-MM-DD; empty: the night that run ``run_id`` started (nights/*.json), else today (UTC).
    night: str = ""
    run_id: str = ""  # the KFP run of this night
    checkpoint: str = ""  # the model URI evaluated this night (shown in the report)
    benchmarks: list[str] = Field(default_factory=list)  # what this night should have evaluated
    # The run's final state as KFP reports it (SUCCEEDED, FAILED, CANCELED); empty: from the benchmarks.
    state: str = ""
    error: str = ""
    max_nights: int = Field(default=30, ge=2)  # nights shown in the plot and the table


class ReportConfig(StrictModel):
    """``paravt report``: the eval table of a run and, for nightly evals, the trend over earlier nights."""

    output: str = "./paravt-work/report"  # URI of report.html, report.md, trend.png, metrics.json
    title: str = "ParaVT report"
    eval_outputs: list[str] = Field(default_factory=list)  # eval stage outputs (URIs) to tabulate
    # Training stage outputs (URIs) whose metrics.json and top-level plots (*.png) the report shows.
    sft_output: str = ""
    rl_output: str = ""
    trend: TrendConfig = Field(default_factory=TrendConfig)


STAGE_CONFIGS: dict[str, type[StrictModel]] = {"data": DataConfig, "report": ReportConfig}


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def parse_override(item: str) -> tuple[list[str], Any]:
    """``"a.b=4"`` -> (["a", "b"], 4). The value is parsed as a YAML scalar or flow collection."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} is not of the form key.path=value")
    key, raw = item.split("=", 1)
    parts = [p for p in key.strip().split(".")]
    if not key.strip() or any(not p for p in parts):
        raise ConfigError(f"override {item!r} has an empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return parts, value


def _field_names(model: type[BaseModel]) -> dict[str, str]:
    """Accepted key -> field name (aliases accepted as keys)."""
    names: dict[str, str] = {}
    for name, info in model.model_fields.items():
        names[info.alias or name] = name
        names[name] = name
    return names


def _check_keys(model: type[BaseModel], data: Any, where: str) -> None:
    """Raise ConfigError naming the valid keys for the first unknown key, recursively."""
    if not isinstance(data, dict):
        return
    names = _field_names(model)
    for key, value in data.items():
        if key not in names:
            valid = sorted({info.alias or n for n, info in model.model_fields.items()})
            path = f"{where}.{key}" if where else key
            raise ConfigError(f"unknown config key {path!r}; valid keys here: {', '.join(valid)}")
        annotation = model.model_fields[names[key]].annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            _check_keys(annotation, value, f"{where}.{key}" if where else key)


def _set_path(data: dict[str, Any], path: list[str], value: Any) -> None:
    node = data
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[path[-1]] = value


def load_config(model: type[C], path: str | Path | None = None, overrides: list[str] | None = None) -> C:
    """Build a validated config from an optional YAML file and dotted overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        text = Path(path).read_text()
        loaded = yaml.safe_load(text) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: top level must be a mapping, got {type(loaded).__name__}")
        data = loaded
    for item in overrides or []:
        keys, value = parse_override(item)
        _set_path(data, keys, value)
    _check_keys(model, data, "")
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"invalid {model.__name__}:\n{err}") from err


def config_to_dict(cfg: BaseModel) -> dict[str, Any]:
    return cfg.model_dump(mode="json", by_alias=True)


def config_to_yaml(cfg: BaseModel) -> str:
    return yaml.safe_dump(config_to_dict(cfg), sort_keys=False)
