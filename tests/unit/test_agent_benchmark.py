"""Smoke run of benchmarks/dispatch.py: it runs, both dispatch modes write the same greedy reports, and the
batched mode makes one sub-agent engine call per turn (no timing assertion: timings are the benchmark's)."""

from __future__ import annotations

import importlib.util
import json
import statistics

from paravt_core.agent import config as agent_config
from paravt_core.video import sizing
from tests.support.paths import ROOT


def _load_benchmark():
    spec = importlib.util.spec_from_file_location("bench_dispatch", ROOT / "benchmarks" / "dispatch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dispatch_benchmark_runs_and_agrees(tiny_model_dir, video, tmp_path, capsys):
    import torch

    threads = torch.get_num_threads()
    bench = _load_benchmark()
    out = tmp_path / "dispatch.json"
    try:
        code = bench.main(
            [
                "--reps",
                "1",
                "--tokens",
                "6",
                "--model",
                tiny_model_dir,
                "--video",
                str(video),
                "--out",
                str(out),
            ]
        )
    finally:
        torch.set_num_threads(threads)  # the benchmark pins one thread; leave the session as it was
    assert code == 0
    data = json.loads(out.read_text())
    reports = data["reports"]
    # the outputs themselves: five non-empty greedy reports, the same text whichever way they were dispatched
    assert len(reports["batched"]) == data["calls"] == 5 and all(r.strip() for r in reports["batched"])
    assert reports["batched"] == reports["sequential"]
    assert data["same_outputs"] is True
    assert data["engine_calls"] == {"batched": [5], "sequential": [1, 1, 1, 1, 1]}
    # the printed ratio is the ratio of the medians of the recorded times
    times = data["all_times_s"]
    assert data["batched_s"] == statistics.median(times["batched"])
    assert data["sequential_s"] == statistics.median(times["sequential"])
    assert data["ratio"] == data["sequential_s"] / data["batched_s"]
    assert f"ratio sequential / batched: {data['ratio']:.2f}x" in capsys.readouterr().out


def test_agent_pixel_defaults_match_the_video_package():
    assert agent_config.DEFAULT_MAX_PIXELS == sizing.DEFAULT_MAX_PIXELS
    assert agent_config.DEFAULT_MIN_PIXELS == sizing.DEFAULT_MIN_PIXELS
