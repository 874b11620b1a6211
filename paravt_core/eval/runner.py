"""Running samples: concurrent episodes on one engine, retries, scoring, one record per sample.

``await run_samples(...)`` runs every sample not yet in the log (``SampleLog.done``), at most ``concurrency``
at a time, and appends one record per sample as soon as it is finished (see ``records``). Per sample:

1. a row error (missing field) is recorded as an error at once;
2. the episode runs (``paravt_core.agent.arun_episode``, the same loop as RL) under the protocol's config;
   an episode that ends with ``engine_error`` / ``engine_timeout`` is retried after an exponential backoff
   with jitter (``retries`` times); ``video_error`` and ``context_overflow`` are not retried;
3. the answer is scored (``scoring``); a judge that cannot answer makes the sample an error.

Status ``ok`` carries a score; status ``error`` carries ``{"reason", "message"}`` and no score. Anything
unexpected inside one sample becomes an ``internal_error`` record: a sample is never dropped.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from paravt_core.agent.config import AgentConfig
from paravt_core.agent.episode import EpisodeResult, EpisodeRow, arun_episode
from paravt_core.engines.base import Engine
from paravt_core.engines.coalesce import CoalescingEngine

from . import protocols
from .benchmarks import Benchmark, Sample
from .readers import release_score
from .records import SampleLog
from .scoring import prediction_of, score_sample

TRANSIENT = ("engine_error", "engine_timeout")
_EPISODE_KEYS = itertools.count()  # orders a sample's requests within a coalesced batch
ERROR_FINISH = ("engine_error", "engine_refused", "engine_timeout", "video_error", "context_overflow")


@dataclass(frozen=True)
class RunOptions:
    concurrency: int = 8
    retries: int = 3
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    video_urls: bool = False  # the engine's server decodes video_url parts (protocols.overview_channel)


def _record(sample: Sample, protocol: str, **fields: Any) -> dict[str, Any]:
    """One JSONL line: the sample's identity, then what became of it."""
    return {
        "id": sample.id,
        "benchmark": sample.benchmark,
        "protocol": protocol,
        "question": sample.question_for(protocol),
        "gold": sample.gold,
        **({"gold_interval": list(sample.gold_interval)} if sample.gold_interval else {}),
        "qtype": sample.qtype,
        **({"letters": sample.letters} if sample.letters else {}),  # our reader's option range (rescore)
        **fields,
    }


def error_record(sample: Sample, protocol: str, reason: str, message: str, **extra: Any) -> dict[str, Any]:
    error = {"reason": reason, "message": message}
    return _record(sample, protocol, status="error", score=None, error=error, meta=sample.meta, **extra)


def episode_fields(result: EpisodeResult) -> dict[str, Any]:
    counts = result.counts()
    return {
        "answer": result.answer,
        "final_text": result.final_text,
        "finish_reason": result.finish_reason,
        "tool_calls": counts["calls_executed"],
        "tool_calls_total": counts["calls_total"],
        "tool_calls_malformed": counts["calls_total"] - counts["calls_parsed"],
        # calls the model got no response for (release layout: beyond max_parallel, blocks its reader ignores)
        "tool_calls_dropped": sum(c.dropped for c in result.calls),
        "tool_rounds": result.tool_rounds,
        "turns": len(result.turns),
        "frames": result.nframes,
        "latency_s": round(result.timings.get("total_s", 0.0), 4),
    }


async def run_one(
    sample: Sample,
    protocol: str,
    bench: Benchmark,
    engine: Engine,
    base: AgentConfig,
    opts: RunOptions,
    *,
    processor: Any = None,
    judge: Any = None,
    sleep: Callable[[float], Any] = asyncio.sleep,
    preset: str = "paravt",
) -> dict[str, Any]:
    """The record of one sample (never raises). ``base``: the agent config with the preset already applied
    (``protocols.preset_agent``); ``preset`` adds its per-sample knobs."""
    if sample.error:
        return error_record(sample, protocol, sample.error_reason, sample.error, attempts=0)
    try:
        cfg = protocols.agent_config(protocol, bench, sample, base, preset, opts.video_urls)
        row = EpisodeRow(video=sample.video, question=sample.question_for(protocol), row_id=sample.id,
                         question_type=sample.qtype)  # fmt: skip
        started = time.perf_counter()
        attempt = 0
        while True:
            attempt += 1
            if isinstance(engine, CoalescingEngine):  # batched with the other samples in flight
                async with engine.track(next(_EPISODE_KEYS)):
                    result = await arun_episode(row, engine, cfg, processor=processor)
            else:
                result = await arun_episode(row, engine, cfg, processor=processor)
            if result.finish_reason not in TRANSIENT or attempt > opts.retries:
                break
            delay = min(opts.max_backoff_s, opts.backoff_s * 2 ** (attempt - 1))
            await sleep(delay * (0.5 + random.random() / 2))
        fields = episode_fields(result)
        fields.update(attempts=attempt, wall_s=round(time.perf_counter() - started, 4))
        if result.finish_reason in ERROR_FINISH:
            return error_record(sample, protocol, result.finish_reason, result.error or result.finish_reason,
                                **fields)  # fmt: skip
        # the release's reader beside ours on every sample (the headline's under error_rule=release)
        fields["release_score"], fields["release_prediction"] = release_score(
            result.final_text, sample.qtype, sample.gold, sample.gold_interval
        )
        score = await score_sample(sample, prediction_of(result.final_text), judge)
        if score.error:
            return error_record(
                sample, protocol, score.error, "the judge could not score this answer", **fields
            )
        return _record(
            sample,
            protocol,
            status="ok",
            prediction=score.parsed,
            score=score.score,
            score_source=score.source,
            score_reason=score.reason,
            error=None,
            meta=sample.meta,
            **fields,
        )
    except Exception as err:  # a bug must not lose the sample: it is recorded and counted
        return error_record(sample, protocol, "internal_error", f"{type(err).__name__}: {err}")


async def run_samples(
    samples: list[Sample],
    protocol: str,
    bench: Benchmark,
    engine: Engine,
    base: AgentConfig,
    log: SampleLog,
    opts: RunOptions,
    *,
    processor: Any = None,
    judge: Any = None,
    on_done: Callable[[dict[str, Any]], None] | None = None,
    gate: asyncio.Semaphore | None = None,
    preset: str = "paravt",
) -> int:
    """Run the samples not yet in ``log``; returns how many were run now. ``gate`` shares one concurrency
    limit between several calls (default: ``opts.concurrency`` for this call)."""
    todo = [s for s in samples if s.id not in log.done]
    gate = gate or asyncio.Semaphore(opts.concurrency)

    async def one(sample: Sample) -> None:
        async with gate:
            record = await run_one(
                sample, protocol, bench, engine, base, opts, processor=processor, judge=judge, preset=preset
            )
        log.append(record)  # fsynced before the sample counts as done
        if on_done is not None:
            on_done(record)

    await asyncio.gather(*(one(s) for s in todo))
    return len(todo)
