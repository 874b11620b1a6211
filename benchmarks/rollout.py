"""RL rollouts on the tiny Qwen3-VL (CPU), two comparisons in one run:

(a) one GRPO group of 8 episodes of the same prompt: run concurrently through ``CoalescingEngine`` (the
    episodes' generate calls merged into batched ``generate`` calls) vs one episode after the other on the
    plain engine (the reference). Both sample at temperature 0.7 up to the same token limit; the table
    shows wall time, generated tokens and tokens/s.
(b) 6 RL steps of the real stage (``paravt rl``) synchronous (``max_staleness=0``) vs one step ahead
    (``max_staleness=1``: the next step's rollouts run while the learner trains), with where the time goes.
(c) 32 episodes x 4 turns against a continuously batching loopback server with per-request latency, through
    ``SGLangEngine``: independent requests (ours for SGLang) vs lock-step coalescing (``rollout_server.py``).

    .venv/bin/python benchmarks/rollout.py [--group 8] [--tokens 48] [--steps 6] [--out rollout.json]

GPU: ``--model DIR --device cuda --dtype bfloat16`` runs (a) on that checkpoint; ``--sglang-url URL`` (a
server started on the same checkpoint with our pixel budget) adds the same group through ``SGLangEngine``
(concurrent + coalesced) and prints the tokens/s ratio SGLang / transformers ``generate``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from benchmarks.rollout_server import bench_loopback, print_loopback  # noqa: E402
from paravt_core.agent.config import AgentConfig  # noqa: E402
from paravt_core.agent.episode import arun_episode  # noqa: E402
from paravt_core.config import load_config  # noqa: E402
from paravt_core.engines.coalesce import CoalescingEngine  # noqa: E402
from paravt_core.engines.transformers_engine import TransformersEngine  # noqa: E402
from paravt_core.models import build_tiny_model, load  # noqa: E402
from paravt_core.rl.config import RlConfig  # noqa: E402
from paravt_core.rl.data import load_prompts  # noqa: E402
from paravt_core.synth import synthesize  # noqa: E402
from paravt_core.video import api as video_api  # noqa: E402
from tests.support.rl_support import run_data_stage  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def prepare(work: Path) -> tuple[str, str]:
    """Synthetic data through the data stage, and the tiny model."""
    data = run_data_stage(synthesize(str(work / "synth"), videos=4, seconds=8, seed=0), work)
    return data, build_tiny_model(str(work / "tiny"), seed=0)


def agent_config(tokens: int) -> AgentConfig:
    return AgentConfig.model_validate(
        {
            "overview_frames": 8,
            "max_pixels": 64 * 96,
            "min_pixels": 32 * 32,
            "max_turns": 1,
            "max_new_tokens": tokens,
            "temperature": 0.7,
            "think_prefix": True,
            "subagent": {"max_new_tokens": 16},
            "crop": {"max_frames": 4},
        }
    )


async def group_concurrent(engine: CoalescingEngine, row: dict, cfg: AgentConfig, overview, n: int):
    engine.reseed(1234)
    engine.reserve(n)

    async def one(i: int):
        async with engine.track(i, reserved=True):
            return await arun_episode(row, engine, cfg, overview=overview)

    return await asyncio.gather(*(one(i) for i in range(n)))


async def group_sequential(engine: TransformersEngine, row: dict, cfg: AgentConfig, overview, n: int):
    out = []
    for i in range(n):
        seeded = cfg.model_copy(update={"seed": 1234 + 100 * i})
        out.append(await arun_episode(row, engine, seeded, overview=overview))
    return out


def _tokens(episodes) -> int:
    return sum(t.tokens for e in episodes for t in e.turns) + sum(
        c.report_tokens for e in episodes for c in e.calls
    )


def bench_group(data: str, model_dir: str, args: argparse.Namespace) -> dict:
    prompt = load_prompts(data).prompts[0]
    row = {"video": prompt.video, "question": prompt.question, "row_id": prompt.row_id}
    cfg = agent_config(args.tokens)
    import torch

    loaded = load(model_dir, device=args.device, dtype=getattr(torch, args.dtype))
    inner = TransformersEngine(loaded.model, loaded.processor)
    coalesced = CoalescingEngine(inner)
    overview = video_api.overview(prompt.video, 8, max_pixels=cfg.max_pixels, min_pixels=cfg.min_pixels)
    asyncio.run(group_sequential(inner, row, cfg, overview, 1))  # warm-up
    times: dict[str, list[float]] = {"concurrent": [], "sequential": []}
    tokens: dict[str, int] = {}
    for _ in range(args.reps):
        t0 = time.perf_counter()
        episodes = asyncio.run(group_concurrent(coalesced, row, cfg, overview, args.group))
        times["concurrent"].append(time.perf_counter() - t0)
        tokens["concurrent"] = _tokens(episodes)
        t0 = time.perf_counter()
        episodes = asyncio.run(group_sequential(inner, row, cfg, overview, args.group))
        times["sequential"].append(time.perf_counter() - t0)
        tokens["sequential"] = _tokens(episodes)
    if args.sglang_url:  # the same group, same agent settings, generated by the SGLang server
        from paravt_core.engines.sglang_engine import SGLangEngine

        served = CoalescingEngine(SGLangEngine(args.sglang_url, processor=loaded.processor))
        asyncio.run(group_concurrent(served, row, cfg, overview, 1))  # warm-up
        times["sglang"] = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            episodes = asyncio.run(group_concurrent(served, row, cfg, overview, args.group))
            times["sglang"].append(time.perf_counter() - t0)
            tokens["sglang"] = _tokens(episodes)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "group": args.group,
        "max_new_tokens": args.tokens,
        "concurrent_s": med["concurrent"],
        "sequential_s": med["sequential"],
        "tokens": tokens,
        "tokens_per_s": {k: tokens[k] / med[k] for k in med},
        "ratio": med["sequential"] / med["concurrent"],
        "sglang_over_transformers_tokens_per_s": (
            tokens["sglang"] / med["sglang"] / (tokens["concurrent"] / med["concurrent"])
            if "sglang" in med
            else None
        ),
        "engine_calls_per_group": coalesced.batches / args.reps,
        "all_times_s": times,
    }


def bench_staleness(data: str, model_dir: str, args: argparse.Namespace, work: Path) -> dict:
    from paravt_core.rl.stage import run as rl_run

    out: dict = {}
    for staleness in (0, 1):
        output = work / f"rl-staleness-{staleness}"
        cfg = load_config(
            RlConfig,
            ROOT / "configs" / "rl" / "tiny.yaml",
            [
                f"data={data}",
                f"model={model_dir}",
                f"output={output}",
                f"steps={args.steps}",
                f"max_staleness={staleness}",
                f"checkpoint.every={args.steps}",
                f"agent.max_new_tokens={args.tokens}",
            ],
        )
        t0 = time.perf_counter()
        rl_run(cfg)
        wall = time.perf_counter() - t0
        history = [json.loads(x) for x in (output / "metrics.jsonl").read_text().splitlines()]
        out[str(staleness)] = {
            "wall_s": wall,
            "rollout_s": sum(m["rollout_s"] for m in history),
            "learner_s": sum(m.get("learner_s", 0.0) for m in history),
            "sync_s": sum(m["sync_s"] for m in history),
            "staleness_max": max(m["staleness_max"] for m in history),
        }
    out["ratio"] = out["0"]["wall_s"] / out["1"]["wall_s"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--work", default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("--model", default=None, help="checkpoint for (a) (default: the tiny model)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--sglang-url", default=None, help="a running SGLang server on the same checkpoint")
    args = parser.parse_args(argv)

    import torch

    # One intra-op thread: on the shared 2-core machine a second spinning thread slows every tiny op.
    torch.set_num_threads(args.threads)
    console = Console()
    work = Path(args.work or tempfile.mkdtemp(prefix="paravt-bench-rollout-"))
    data, model_dir = prepare(work)
    group = bench_group(data, args.model or model_dir, args)
    table = Table(
        title=f"(a) one group of {args.group} episodes, tiny Qwen3-VL on CPU (median of {args.reps})"
    )
    for col in ("mode", "wall (s)", "generated tokens", "tokens/s"):
        table.add_column(col, justify="right" if col != "mode" else "left")
    modes = [("concurrent", "concurrent + coalesced (ours)"), ("sequential", "one at a time")]
    if args.sglang_url:
        modes.append(("sglang", "SGLang server, concurrent + coalesced"))
    for mode, label in modes:
        table.add_row(
            label,
            f"{statistics.median(group['all_times_s'][mode]):.2f}",
            str(group["tokens"][mode]),
            f"{group['tokens_per_s'][mode]:.1f}",
        )
    console.print(table)
    console.print(f"ratio one-at-a-time / coalesced: [bold]{group['ratio']:.2f}x[/bold]")
    if args.sglang_url:
        ratio = group["sglang_over_transformers_tokens_per_s"]
        console.print(f"tokens/s SGLang / transformers generate: [bold]{ratio:.2f}x[/bold]")

    stale = bench_staleness(data, model_dir, args, work)
    table = Table(title=f"(b) {args.steps} RL steps of `paravt rl` (configs/rl/tiny.yaml)")
    for col in ("max_staleness", "wall (s)", "rollout (s)", "learner (s)", "sync (s)", "max staleness seen"):
        table.add_column(col, justify="right")
    for key in ("0", "1"):
        r = stale[key]
        table.add_row(
            key,
            f"{r['wall_s']:.1f}",
            f"{r['rollout_s']:.1f}",
            f"{r['learner_s']:.1f}",
            f"{r['sync_s']:.2f}",
            str(r["staleness_max"]),
        )
    console.print(table)
    console.print(f"ratio synchronous / max_staleness=1: [bold]{stale['ratio']:.2f}x[/bold]")
    loopback = bench_loopback()
    print_loopback(loopback, console)
    result = {
        "benchmark": "rollout",
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "group": group,
        "staleness": stale,
        "loopback_server": loopback,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
