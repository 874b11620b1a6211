"""``paravt eval rescore <eval output> [--reader release|robust]``: re-score an eval run's saved records offline.

No model and no judge: every record that holds the episode's final reply is read again by both readers (ours,
``scoring.score_sample``, and the release's, ``readers.release_score``); open-ended items keep the score they
were recorded with (the judge's or token F1's), errors stay errors. The results, metrics and report of the
re-scored records go to ``<output>/rescored/<reader>/`` (the run's own outputs and records are not touched),
and the console table shows both readers' headline per benchmark, so a reader change is measured on an
existing run at no GPU cost.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from paravt_core import storage

from . import benchmarks as registry
from .benchmarks import Sample
from .config import EvalConfig
from .readers import release_score
from .records import read_records
from .scoring import prediction_of, score_sample


class RescoreError(RuntimeError):
    """The output holds no eval run to re-score (one-line message)."""


def _sample_of(record: dict[str, Any]) -> Sample:
    interval = record.get("gold_interval")
    return Sample(benchmark=str(record.get("benchmark", "")), id=str(record["id"]),
                  question=str(record.get("question") or ""), gold=str(record.get("gold") or ""),
                  qtype=str(record.get("qtype") or "mcq"), letters=str(record.get("letters") or ""),
                  gold_interval=tuple(interval) if interval else None)  # fmt: skip


async def rescore_record(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with both readers' scores worked out again from its final reply (see the module docstring)."""
    if record.get("final_text") is None:
        return record
    sample = _sample_of(record)
    out = dict(record)
    out["release_score"], out["release_prediction"] = release_score(
        record["final_text"], sample.qtype, sample.gold, sample.gold_interval
    )
    if record.get("status") == "ok" and sample.qtype in ("mcq", "tvg"):
        score = await score_sample(sample, prediction_of(record["final_text"]), None)
        out.update(prediction=score.parsed, score=score.score, score_source=score.source,
                   score_reason=score.reason)  # fmt: skip
    return out


async def _rescore_all(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return list(await asyncio.gather(*(rescore_record(r) for r in records)))


def _local_records(output: str, rel: str, work: str) -> list[dict[str, Any]]:
    uri = storage.join(output, rel)
    if not storage.exists(uri):
        return []
    if storage.is_s3(uri):
        local = os.path.join(work, "rescore", rel)
        storage.download_file(uri, local)
        uri = local
    return read_records(uri)


def rescore(
    output: str, reader: str | None = None, work: str = "./paravt-work/eval-rescore"
) -> dict[str, Any]:
    """Re-score the run under ``output``; returns the new results (written to ``<output>/rescored/<reader>``)."""
    from .stage import RecordStore, canonical, write_outputs

    uri = storage.join(output, "results.json")
    if not storage.exists(uri):
        raise RescoreError(
            f"{output} holds no results.json: not a finished eval output (run paravt eval first)"
        )
    before = json.loads(storage.read_bytes(uri))
    cfg = EvalConfig.model_validate(before["config"])
    if reader:
        cfg = cfg.model_copy(update={"reader": reader})
    started = time.perf_counter()
    records: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for protocol, benches in before["protocols"].items():
        for bench in benches:
            recs = _local_records(output, RecordStore.rel(protocol, bench), work)
            records.setdefault(protocol, {})[bench] = asyncio.run(_rescore_all(recs))
    dest = storage.join(output, "rescored", cfg.resolved_reader)
    return write_outputs(cfg, dest, canonical(records), time.perf_counter() - started, before.get("server"))


def readers_table(results: dict[str, Any]) -> list[tuple[str, str, str, float | None, float | None, int]]:
    """(protocol, benchmark, metric, release reader, robust reader, samples read differently) per benchmark."""
    rows = []
    for protocol, benches in results["protocols"].items():
        for bench, m in benches.items():
            base = registry.metrics_of(bench).headline
            rows.append((protocol, bench, m["headline"], m.get(f"{base}_release"), m.get(f"{base}_robust"),
                         int(m.get("reader_differences") or 0)))  # fmt: skip
    return rows


def print_readers(results: dict[str, Any], dest: str) -> None:
    from rich.table import Table

    from paravt_core.stage import console

    table = Table(title=f"paravt eval rescore (headline reader: {results.get('reader')})")
    for col in (
        "protocol",
        "benchmark",
        "headline metric",
        "release reader",
        "robust reader",
        "read differently",
    ):
        table.add_column(
            col, justify="left" if col in ("protocol", "benchmark", "headline metric") else "right"
        )
    for protocol, bench, metric, rel, rob, diff in readers_table(results):
        table.add_row(protocol, bench, metric, "–" if rel is None else f"{rel:.1f}",
                      "–" if rob is None else f"{rob:.1f}", str(diff))  # fmt: skip
    console.print(table)
    console.print(f"re-scored results, metrics and report in {dest}", highlight=False, soft_wrap=True)
