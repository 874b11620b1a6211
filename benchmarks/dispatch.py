"""Parallel tool dispatch: one turn with 5 crop calls, batched vs one sub-agent at a time.

Both runs use the same episode code (``AgentConfig.dispatch``): ``batched`` decodes all crops of the turn
together and generates all sub-agent reports in one engine call; ``sequential`` (the reference) crops and
generates one call after the other. The main agent's turn is scripted (the tiny model is random); the
sub-agents are the real tiny Qwen3-VL on CPU with greedy decoding, so both runs must write identical
reports. Prints both times of the tool phase, the ratio, and writes JSON.

    .venv/bin/python benchmarks/dispatch.py [--reps 5] [--tokens 64] [--out dispatch.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from paravt_core.agent.config import AgentConfig  # noqa: E402
from paravt_core.agent.episode import arun_episode  # noqa: E402
from paravt_core.agent.parsing import format_tool_call  # noqa: E402
from paravt_core.engines.scripted import RoutedEngine, ScriptedEngine  # noqa: E402
from paravt_core.engines.transformers_engine import TransformersEngine  # noqa: E402
from paravt_core.models import build_tiny_model, load  # noqa: E402
from paravt_core.synth import Event, write_video  # noqa: E402

WINDOWS = [(0.0, 2.0), (2.5, 4.5), (5.0, 7.0), (7.5, 9.5), (10.0, 12.0)]


def make_inputs(work: Path) -> tuple[str, str]:
    model_dir = build_tiny_model(str(work / "tiny"), seed=0)
    video = work / "clip.mp4"
    events = [
        Event("circle", "red", 2.0, 5.0, (10, 10, 60, 60)),
        Event("square", "blue", 7.0, 10.0, (40, 20, 100, 80)),
    ]
    write_video(video, events, 12.0, 4.0, (128, 96))
    return model_dir, str(video)


def main_turn() -> list[str]:
    calls = "\n".join(format_tool_call("crop_video", {"start_time": s, "end_time": e}) for s, e in WINDOWS)
    return ["Five segments to check.</think>\n" + calls, "<answer>B</answer>"]


async def one_run(real: TransformersEngine, video: str, cfg: AgentConfig):
    engine = RoutedEngine(ScriptedEngine(real.processor, main_turn()), real)
    result = await arun_episode({"video": video, "question": "Which shape appears first?"}, engine, cfg)
    assert result.finish_reason == "answer", result.finish_reason
    turn = result.turns[0]
    reports = [c.subagent.generated_text() for c in turn.calls]
    return turn.tools_s, reports, engine.subagent_batches


def run(args: argparse.Namespace) -> dict:
    import torch

    console = Console()
    # One intra-op thread: the tiny model's ops are far too small to split, and on a shared 2-core machine
    # a second spinning thread makes every op wait for a busy core (both modes slow down 10x or more).
    torch.set_num_threads(args.threads)
    work = Path(args.work or tempfile.mkdtemp(prefix="paravt-bench-dispatch-"))
    model_dir, video = (args.model, args.video) if args.model and args.video else make_inputs(work)
    loaded = load(model_dir)
    real = TransformersEngine(loaded.model, loaded.processor)
    base = {
        "overview_frames": 8,
        "max_pixels": 128 * 96,
        "min_pixels": 32 * 32,
        "temperature": 0.0,
        "max_new_tokens": 256,
        "subagent": {"temperature": 0.0, "max_new_tokens": args.tokens},
        "crop": {"max_frames": 16},
    }
    cfgs = {
        mode: AgentConfig.model_validate({**base, "dispatch": mode}) for mode in ("batched", "sequential")
    }
    times: dict[str, list[float]] = {m: [] for m in cfgs}
    reports: dict[str, list[str]] = {}
    batches: dict[str, list[int]] = {}
    for cfg in cfgs.values():  # warm-up: first-call allocations, decoder handles, caches
        asyncio.run(one_run(real, video, cfg))
    for _ in range(args.reps):
        for mode, cfg in cfgs.items():  # interleaved, so machine noise hits both alike
            seconds, texts, sizes = asyncio.run(one_run(real, video, cfg))
            times[mode].append(seconds)
            reports[mode], batches[mode] = texts, sizes
    same = reports["batched"] == reports["sequential"]
    med = {m: statistics.median(v) for m, v in times.items()}
    ratio = med["sequential"] / med["batched"]
    out = {
        "benchmark": "dispatch",
        "calls": len(WINDOWS),
        "subagent_max_new_tokens": args.tokens,
        "report_tokens": [len(real.tokenizer(r)["input_ids"]) for r in reports["batched"]],
        "reps": args.reps,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "batched_s": med["batched"],
        "sequential_s": med["sequential"],
        "ratio": ratio,
        "same_outputs": same,
        "engine_calls": {m: batches[m] for m in batches},
        "reports": reports,
        "all_times_s": times,
    }
    table = Table(title=f"one turn, {len(WINDOWS)} crop calls, tiny Qwen3-VL on CPU (median of {args.reps})")
    table.add_column("dispatch")
    table.add_column("sub-agent engine calls")
    table.add_column("tool phase (s)", justify="right")
    table.add_row("batched (ours)", str(batches["batched"]), f"{med['batched']:.3f}")
    table.add_row("one at a time (reference)", str(batches["sequential"]), f"{med['sequential']:.3f}")
    console.print(table)
    console.print(f"ratio sequential / batched: [bold]{ratio:.2f}x[/bold]   identical greedy reports: {same}")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2))
        console.print(f"written to {args.out}")
    if not same:
        console.print("[red]batched and sequential reports differ[/red]")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=64, help="sub-agent max_new_tokens")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--model", default=None, help="model dir (default: build the tiny model)")
    parser.add_argument("--video", default=None, help="video (default: synthesize one)")
    parser.add_argument("--work", default=None, help="scratch dir (default: a temp dir)")
    parser.add_argument("--out", default=None, help="write the numbers as JSON here")
    result = run(parser.parse_args(argv))
    return 0 if result["same_outputs"] else 1


if __name__ == "__main__":
    sys.exit(main())
