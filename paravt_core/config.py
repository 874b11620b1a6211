"""Typed stage configs: YAML file + dotted ``key=value`` overrides, unknown keys rejected.

Every stage has one pydantic model. ``load_config(DataConfig, "c.yaml", ["extract.workers=4"])``
reads the YAML, applies the overrides (values parsed as YAML scalars, so ``4`` is an int and
``[a, b]`` a list), and validates. Any unknown key, at any depth, is an error that lists the
valid names at that level.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from paravt_core.agent.config import AgentConfig
from paravt_core.config_base import ConfigError, StrictModel

C = TypeVar("C", bound="StrictModel")


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
# Eval stage
# ---------------------------------------------------------------------------------------------


class EvalBenchmarkConfig(StrictModel):
    """One benchmark to evaluate (registry names: videomme, videomme_wsub, longvideobench, lvbench, mlvu,
    mmvu, charades, synthetic).

    ``source``: the rows - a local file or directory (parquet, a ``save_to_disk`` Arrow directory, JSON or
    JSONL), an ``s3://`` prefix, or ``hf://<dataset id>`` (downloaded into ``work_dir``); empty = ``hf://``
    + the registry's dataset id. ``media_root``: where the videos are (local or ``s3://``), laid out as the
    benchmark publishes them. ``subtitles``: the subtitle directory (``videomme_wsub``; default
    ``<media_root>/subtitle``).
    """

    name: str
    source: str = ""
    split: str = ""  # default: the registry's split
    media_root: str = ""
    subtitles: str = ""
    limit: int | None = Field(default=None, ge=1)  # first N rows only


class EvalEngineConfig(StrictModel):
    # "transformers": in-process (CPU/GPU) with cross-sample batching; "openai": an OpenAI-compatible server
    # (vLLM, SGLang) at base_url, the processor loaded from `model`.
    kind: Literal["transformers", "openai"] = "transformers"
    base_url: str = ""
    served_model: str = ""  # model name on the server (default: `model`)
    device: str = "cpu"
    dtype: str | None = None
    coalesce: bool = True  # merge concurrent samples' generation calls into one batch (in-process engine)
    max_batch: int = Field(default=32, ge=1)
    coalesce_window_ms: float = Field(default=10.0, ge=0.0)


class EvalRunnerConfig(StrictModel):
    concurrency: int = Field(default=8, ge=1)  # samples in flight
    retries: int = Field(default=3, ge=0)  # per sample, for engine errors and timeouts
    backoff_s: float = Field(default=1.0, ge=0.0)  # first retry delay; doubles, with jitter
    upload_every_s: float = Field(default=60.0, gt=0.0)  # s3:// output: how often records are uploaded


class EvalJudgeConfig(StrictModel):
    # Open-ended items (MMVU) go to the LLM judge (endpoint, key and model from LLM_JUDGE_BASE_URL,
    # LLM_JUDGE_API_KEY, LLM_JUDGE_MODEL); off, or no endpoint set: scored by token F1 (the results say so).
    enabled: bool = True


class EvalConfig(StrictModel):
    """``paravt eval``: benchmarks x protocols on one model; exactly-once records, metrics, report."""

    model: str = ""  # model URI (local dir, s3:// prefix, hub id); openai engine: only its processor
    # Published checkpoint whose SPEC §7 numbers the report shows beside ours: ParaVT-8B, Qwen3-VL-8B,
    # LongVT-RFT-7B; "auto" guesses from `model`; "" = none.
    published_model: str = "auto"
    output: str = "./paravt-work/eval"  # URI of records, results.json, metrics.json, report.html
    work_dir: str = "./paravt-work/eval-work"  # local scratch (downloads, record files of an s3 output)
    # Tiny/demo runs: write the synthetic eval split and fixture copies of every benchmark here first, and
    # evaluate those (benchmarks without a source/media_root use them).
    demo_data: str = ""
    benchmarks: list[EvalBenchmarkConfig] = Field(default_factory=list)
    # agentic (with the tool), direct and reasoning (without); every benchmark runs under each.
    protocols: list[Literal["agentic", "direct", "reasoning"]] = Field(default_factory=lambda: ["agentic"])
    # The episode (SPEC §4.4); eval defaults: greedy main agent and sub-agents, otherwise AgentConfig's
    # (64 overview frames, 2048 tokens, 3 tool rounds x 5 calls). The protocol sets prompt and forced answer.
    agent: AgentConfig = Field(
        default_factory=lambda: AgentConfig(temperature=0.0, subagent={"temperature": 0.0})
    )
    engine: EvalEngineConfig = Field(default_factory=EvalEngineConfig)
    runner: EvalRunnerConfig = Field(default_factory=EvalRunnerConfig)
    judge: EvalJudgeConfig = Field(default_factory=EvalJudgeConfig)
    shard: str = ""  # "i/n": evaluate shard i of n (records under shards/i-of-n/); merge=true combines them
    merge: bool = False
    # Fail the stage (after writing everything) when errors / samples exceeds this share.
    max_error_share: float = Field(default=0.05, ge=0.0, le=1.0)


STAGE_CONFIGS: dict[str, type[StrictModel]] = {"data": DataConfig, "eval": EvalConfig}


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
