"""Eval throughput: concurrent samples with cross-sample batching vs one sample at a time.

Both runs evaluate the same synthetic eval split with the eval runner on the tiny Qwen3-VL on CPU, greedy:
``ours`` keeps ``--concurrency`` samples in flight and merges their generation calls into shared batches
(``paravt_core.engines.coalesce.CoalescingEngine``, shared with RL rollouts); the reference runs one sample after
the other on the plain engine (what a per-sample loop does). Prints samples/s of both, the ratio, and
whether every prediction is identical; writes JSON.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/eval_throughput.py [--videos 8] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from paravt_core.agent.config import AgentConfig  # noqa: E402
from paravt_core.engines.coalesce import CoalescingEngine  # noqa: E402
from paravt_core.engines.transformers_engine import TransformersEngine  # noqa: E402
from paravt_core.eval import benchmarks as B  # noqa: E402
from paravt_core.eval.formats import read_rows  # noqa: E402
from paravt_core.eval.records import SampleLog  # noqa: E402
from paravt_core.eval.runner import RunOptions, run_samples  # noqa: E402
from paravt_core.models import build_tiny_model, load  # noqa: E402
from paravt_core.synth import synthesize  # noqa: E402


def make_samples(work: Path, videos: int) -> list[B.Sample]:
    synth = synthesize(str(work / "synth"), videos=videos, seconds=8.0, seed=0)
    media = work / "media"
    for archive in synth.archives:
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(media)
    return B.to_samples("synthetic", read_rows(str(synth.eval_dir)), B.Context(str(media)))


def timed_run(samples, engine, cfg, concurrency: int, path: Path) -> tuple[float, dict[str, str]]:
    opts = RunOptions(concurrency=concurrency, retries=0)
    started = time.perf_counter()
    with SampleLog(path) as log:
        asyncio.run(run_samples(samples, "agentic", B.get("synthetic"), engine, cfg, log, opts))
        elapsed = time.perf_counter() - started
        bad = [r for r in log.records if r["status"] != "ok"]
        if bad:
            raise SystemExit(f"{len(bad)} samples failed: {bad[0]['error']}")
        return elapsed, {r["id"]: r["final_text"] for r in log.records}


def run(args: argparse.Namespace) -> dict:
    import torch

    console = Console()
    torch.set_num_threads(args.threads)  # one thread: see benchmarks/dispatch.py
    work = Path(args.work or tempfile.mkdtemp(prefix="paravt-bench-eval-"))
    samples = make_samples(work, args.videos)
    loaded = load(args.model or build_tiny_model(str(work / "tiny"), seed=0))
    inner = TransformersEngine(loaded.model, loaded.processor, max_batch_size=args.concurrency * 2)
    cfg = AgentConfig.model_validate(
        {
            "overview_frames": 8,
            "max_pixels": 64 * 96,
            "min_pixels": 32 * 32,
            "max_new_tokens": args.tokens,
            "max_turns": 2,
            "temperature": 0.0,
            "subagent": {"temperature": 0.0, "max_new_tokens": 16},
            "crop": {"max_frames": 4},
        }
    )
    timed_run(samples[:2], inner, cfg, 1, work / "warmup.jsonl")  # first-call allocations, decoder handles
    coalescing = CoalescingEngine(inner, seed=None, max_retries=0)
    times: dict[str, list[float]] = {"ours": [], "reference": []}
    preds: dict[str, dict[str, str]] = {}
    for rep in range(args.reps):  # interleaved, so machine noise hits both alike
        for mode, engine, concurrency in (("ours", coalescing, args.concurrency), ("reference", inner, 1)):
            seconds, preds[mode] = timed_run(samples, engine, cfg, concurrency, work / f"{mode}-{rep}.jsonl")
            times[mode].append(seconds)
    best = {m: min(v) for m, v in times.items()}
    rate = {m: len(samples) / best[m] for m in best}
    ratio = rate["ours"] / rate["reference"]
    same = preds["ours"] == preds["reference"]
    out = {
        "benchmark": "eval_throughput",
        "samples": len(samples),
        "concurrency": args.concurrency,
        "max_new_tokens": args.tokens,
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cpu_count": os.cpu_count(),
        "ours_samples_per_s": rate["ours"],
        "reference_samples_per_s": rate["reference"],
        "ratio": ratio,
        "same_predictions": same,
        "mean_batch_requests": coalescing.requests / coalescing.batches if coalescing.batches else 0,
        "all_times_s": times,
    }
    table = Table(title=f"{len(samples)} synthetic samples, tiny Qwen3-VL on CPU (best of {args.reps})")
    for col in ("mode", "engine calls", "seconds", "samples/s"):
        table.add_column(col, justify="right" if col != "mode" else "left")
    table.add_row(f"ours: {args.concurrency} concurrent, coalesced", f"batches of {out['mean_batch_requests']:.1f} requests",
                  f"{best['ours']:.2f}", f"{rate['ours']:.2f}")  # fmt: skip
    table.add_row("reference: one sample at a time", "one request each", f"{best['reference']:.2f}",
                  f"{rate['reference']:.2f}")  # fmt: skip
    console.print(table)
    console.print(f"ratio ours / reference: [bold]{ratio:.2f}x[/bold]   identical predictions: {same}   "
                  f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, torch threads {torch.get_num_threads()})")  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2))
        console.print(f"written to {args.out}")
    if not same:
        console.print("[red]the two runs predicted differently[/red]")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--videos", type=int, default=8, help="synthetic videos (2 questions each)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=128, help="main-agent max_new_tokens")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--model", default=None, help="model dir (default: build the tiny model)")
    parser.add_argument("--work", default=None, help="scratch dir (default: a temp dir)")
    parser.add_argument("--out", default=None, help="write the numbers as JSON here")
    result = run(parser.parse_args(argv))
    return 0 if result["same_predictions"] else 1


if __name__ == "__main__":
    sys.exit(main())
