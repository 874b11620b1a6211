"""Shared by several test modules (from tests/e2e/test_report_stage.py, where it was first written)."""

from __future__ import annotations

import json

from paravt_core import storage
from paravt_core.config import ReportConfig
from paravt_core.report.stage import benchmark_output, night_uri, start_night
from paravt_core.report.trend import FAILED, SUCCEEDED, BenchmarkResult, Night

NIGHT = "2026-11-23"


def _eval_output(uri: str, bench: str, protocols: dict[str, float], headline: str = "accuracy") -> None:
    results = {"protocols": {p: {bench: {headline: v, "headline": headline}} for p, v in protocols.items()}}
    storage.write_bytes(storage.join(uri, "results.json"), json.dumps(results).encode())
    storage.mark_complete(uri)


def _seed(prefix: str) -> None:
    earlier = [
        Night("2026-11-21", SUCCEEDED, "c1", {"videomme": BenchmarkResult(SUCCEEDED, {"agentic": 60.0})}),
        Night("2026-11-22", FAILED, "c2", {"videomme": BenchmarkResult(FAILED, error="OOM")}, "run failed"),
    ]
    for night in earlier:
        storage.write_bytes(night_uri(prefix, night.date), json.dumps(night.to_json()).encode())
    start_night(prefix, NIGHT, "c3")
    _eval_output(benchmark_output(prefix, NIGHT, "videomme"), "videomme", {"agentic": 62.5, "direct": 58.0})
    # charades: the eval started writing but never completed.
    storage.write_bytes(storage.join(benchmark_output(prefix, NIGHT, "charades"), "records.jsonl"), b"{}\n")


def _config(prefix: str, output: str, state: str) -> ReportConfig:
    return ReportConfig.model_validate(
        {
            "output": output,
            "title": "nightly",
            "trend": {
                "results_prefix": prefix,
                "night": NIGHT,
                "checkpoint": "c3",
                "benchmarks": ["videomme", "charades"],
                "state": state,
                "error": "task eval-op failed" if state == "FAILED" else "",
            },
        }
    )
