"""Typed config of the eval stage (``paravt eval``): benchmarks, protocols, the episode, engine, runner, judge,
shards and the error gate. It lives here, not in ``paravt_core.config``, because it embeds the agent's
``AgentConfig`` (see ``paravt_core.config.STAGE_CONFIGS``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from paravt_core.agent.config import AgentConfig
from paravt_core.config_base import StrictModel


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
    # Merge the generation calls of the samples in flight into one batch (in-process engine; the shared
    # paravt_core.engines.coalesce.CoalescingEngine: a batch leaves once every sample in flight waits on it).
    coalesce: bool = True
    max_batch: int = Field(default=32, ge=1)  # requests per generate of the in-process engine


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
    preset: Literal["paravt", "release"] = Field(
        default="paravt",
        description="Episode preset: paravt (ours) or release (the released driver that made the published numbers).",
    )
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
    expected_shards: int = Field(
        default=0,
        ge=0,
        description="With merge=true: the shard count n to merge (0: read it off the shards/ directory).",
    )
    # Fail the stage (after writing everything) when errors / samples exceeds this share.
    max_error_share: float = Field(default=0.05, ge=0.0, le=1.0)
