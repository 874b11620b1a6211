"""Typed config of the eval stage (``paravt eval``): benchmarks, protocols, the episode, engine, runner, judge,
shards and the error gate. It lives here, not in ``paravt_core.config``, because it embeds the agent's
``AgentConfig`` (see ``paravt_core.config.STAGE_CONFIGS``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from paravt_core.agent.config import AgentConfig
from paravt_core.config_base import StrictModel, kind_section
from paravt_core.engines.kinds.transformers import TransformersEngineConfig
from paravt_core.engines.registry import check_kind, engine_config
from paravt_core.tracking.config import TrackingConfig


class EvalBenchmarkConfig(StrictModel):
    """One benchmark to evaluate (a registry name: ``paravt eval --list-benchmarks``, ``eval/benchmarks/``).

    ``source``: the rows - a local file or directory (parquet, a ``save_to_disk`` Arrow directory, JSON or
    JSONL), an ``s3://`` prefix, or ``hf://<dataset id>`` (downloaded into ``work_dir``); empty = ``hf://``
    + the registry's dataset id. ``media_root``: where the videos are (local or ``s3://``), laid out as the
    benchmark publishes them. ``subtitles``: the subtitle directory (``videomme_wsub``; default
    ``<media_root>/subtitle``).
    """

    name: str = Field(description="registry name (paravt eval --list-benchmarks)")
    source: str = Field(
        default="",
        description="the rows: local file/dir, s3:// prefix or hf://<dataset id>; empty: the registry's",
    )
    split: str = Field(default="", description="dataset split; empty: the registry's")
    media_root: str = Field(
        default="", description="where the videos are (local or s3://), as the benchmark lays them out"
    )
    subtitles: str = Field(
        default="", description="subtitle directory (videomme_wsub); empty: <media_root>/subtitle"
    )
    subtitle_mode: Literal["all", "aligned"] = Field(
        default="all",
        description="videomme_wsub: all cues (the release) or aligned (cues covering the sampled frames: lmms-eval)",
    )
    limit: int | None = Field(default=None, ge=1, description="evaluate the first N rows only; null: all")


# The generation engine: one config class per engine kind (engines/kinds/), told apart by engine.kind.
EvalEngineConfig = engine_config("eval")


class EvalRunnerConfig(StrictModel):
    concurrency: int = Field(default=8, ge=1, description="samples in flight")
    retries: int = Field(default=3, ge=0, description="retries per sample, for engine errors and timeouts")
    backoff_s: float = Field(
        default=1.0, ge=0.0, description="first retry delay in seconds; doubles, with jitter"
    )
    upload_every_s: float = Field(
        default=60.0, gt=0.0, description="s3:// output: seconds between uploads of the records"
    )


class EvalJudgeConfig(StrictModel):
    # Endpoint, key and model from LLM_JUDGE_BASE_URL, LLM_JUDGE_API_KEY, LLM_JUDGE_MODEL.
    enabled: bool = Field(
        default=True,
        description="open-ended items go to the LLM judge (LLM_JUDGE_* env); off or no endpoint: token F1",
    )


class EvalConfig(StrictModel):
    """``paravt eval``: benchmarks x protocols on one model; exactly-once records, metrics, report."""

    model: str = Field(
        default="",
        description="model URI (local dir, s3:// prefix, hub id); openai engine: only its processor",
    )
    published_model: str = Field(
        default="auto",
        description='published numbers shown beside ours: ParaVT-8B, Qwen3-VL-8B, LongVT-RFT-7B; "auto": from model; "": none',
    )
    output: str = Field(
        default="./paravt-work/eval",
        min_length=1,
        description="URI of records, results.json, metrics.json, report.html",
    )
    work_dir: str = Field(
        default="./paravt-work/eval-work",
        description="local scratch (downloads, record files of an s3 output)",
    )
    demo_data: str = Field(
        default="",
        description="tiny runs: a directory of benchmark fixtures (paravt synth DIR --eval-fixtures) standing in",
    )
    benchmarks: list[EvalBenchmarkConfig] = Field(
        default_factory=list, description="benchmarks to evaluate (name, source, media_root, ...)"
    )
    protocols: list[Literal["agentic", "direct", "reasoning"]] = Field(
        default_factory=lambda: ["agentic"],
        description="agentic (with the tool), direct and reasoning (without); every benchmark runs under each",
    )
    preset: Literal["paravt", "release"] = Field(
        default="paravt",
        description="Episode preset: paravt (ours) or release (the released driver that made the published numbers).",
    )
    # Eval defaults: greedy main agent and sub-agents, otherwise AgentConfig's (64 overview frames, 2048 tokens,
    # 3 tool rounds x 5 calls). The protocol sets prompt and forced answer.
    agent: AgentConfig = Field(
        default_factory=lambda: AgentConfig(temperature=0.0, subagent={"temperature": 0.0}),
        description="the episode (greedy by default); the protocol sets the prompt and forced answer",
    )
    engine: EvalEngineConfig = Field(
        default_factory=TransformersEngineConfig, description="the generation engine"
    )
    runner: EvalRunnerConfig = Field(default_factory=EvalRunnerConfig, description="concurrency and retries")
    judge: EvalJudgeConfig = Field(
        default_factory=EvalJudgeConfig, description="the LLM judge of open-ended items"
    )
    shard: str = Field(default="", description='"i/n": evaluate shard i of n (records under shards/i-of-n/)')
    merge: bool = Field(default=False, description="combine the shards' records into one result")
    expected_shards: int = Field(
        default=0,
        ge=0,
        description="with merge=true: the shard count n to merge (0: read it off the shards/ directory)",
    )
    error_rule: Literal["auto", "paravt", "release"] = Field(
        default="auto",
        description="paravt: errors left out of headlines; release: an MCQ error is wrong; auto: the preset's",
    )
    reader: Literal["auto", "release", "robust"] = Field(
        default="auto",
        description="headline's answer reader: release (its extract_letter), robust (ours); auto: release under error_rule release",
    )
    max_error_share: float = Field(
        default=0.05,
        ge=0.0,
        le=1.0,
        description="fail the stage (after writing everything) when any benchmark's errors / samples exceeds this",
    )
    tracking: TrackingConfig = Field(
        default_factory=TrackingConfig,
        description="experiment tracking (TensorBoard, MLflow, W&B) and pod-log progress",
    )

    @field_validator("engine", mode="before")
    @classmethod
    def _engine_kind_serves_eval(cls, value: Any) -> Any:
        if isinstance(value, dict) and "kind" in value:
            check_kind("eval", value["kind"])  # a kind that cannot evaluate says why
        return kind_section(value, cls.model_fields["engine"].get_default(call_default_factory=True))

    @model_validator(mode="after")
    def _release_prompts(self) -> EvalConfig:
        """preset=release with ``agent.prompt_set`` not given: the release's texts (``release-v1``), written
        into the config so a saved, reloaded or compiled config keeps them."""
        if self.preset == "release" and "prompt_set" not in self.agent.model_fields_set:
            self.agent.prompt_set = (
                "release-v1"  # protocols.RELEASE_PROMPT_SET (protocols imports this module)
            )
            self.agent.prompt_set_checksum = None
        return self

    @property
    def resolved_error_rule(self) -> str:
        """The error rule in force (``auto`` resolved by the preset)."""
        if self.error_rule != "auto":
            return self.error_rule
        return "release" if self.preset == "release" else "paravt"

    @property
    def resolved_reader(self) -> str:
        """The headline's answer reader (``auto``: the release's under its error rule, ours otherwise)."""
        if self.reader != "auto":
            return self.reader
        return "release" if self.resolved_error_rule == "release" else "robust"
