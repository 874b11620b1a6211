"""Rollout requests to a continuously batching server: independent (one request per episode turn, ours for
SGLang: ``engines/independent.py``) vs lock-step (every turn of the step's episodes coalesced into one body:
``engines/coalesce.py``, the in-process engine's mode), both through the real ``SGLangEngine`` client.

The server is a loopback stand-in for SGLang's scheduler: it answers ``/generate`` in SGLang's response shape
after a per-request latency (a generation length: 20 ms + an exponential with mean 250 ms, drawn from the
request's episode and turn, so both modes see the very same latencies), and runs the requests of one body
concurrently, answering when the last is done - what continuous batching does. Lock-step then takes the sum
over turns of the slowest episode's latency; independent takes the slowest episode's own sum. Both expected
values are printed next to the measured ones.

    .venv/bin/python benchmarks/rollout_server.py [--episodes 32] [--turns 4] [--reps 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paravt_core.engines.base import GenerationRequest, SamplingParams  # noqa: E402
from paravt_core.engines.coalesce import CoalescingEngine  # noqa: E402
from paravt_core.engines.independent import IndependentEngine  # noqa: E402
from paravt_core.engines.sglang_engine import SGLangEngine  # noqa: E402


def latency_s(seed: int, episode: int, turn: int) -> float:
    return 0.020 + random.Random(seed * 1_000_003 + episode * 1009 + turn).expovariate(1 / 0.250)


class LoopbackServer:
    """``/generate`` with per-request latency; a body's requests run concurrently (continuous batching)."""

    def __init__(self, seed: int):
        self.seed = seed
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as uvicorn serves SGLang
            disable_nagle_algorithm = (
                True  # else headers and body in two sends meet delayed ACKs: +40 ms a reply
            )

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                waits = [latency_s(server.seed, ids[0], ids[1]) for ids in body["input_ids"]]
                time.sleep(
                    max(waits)
                )  # every request of the body generates at once; the body ends with the last
                out = [
                    {
                        "text": "x",
                        "output_ids": [7],
                        "meta_info": {
                            "id": rid,
                            "finish_reason": {"type": "stop", "matched": 7},
                            "prompt_tokens": len(ids),
                            "completion_tokens": 1,
                            "output_token_logprobs": [[-0.1, 7, None]],
                            "e2e_latency": wait,
                        },
                    }
                    for ids, rid, wait in zip(body["input_ids"], body["rid"], waits, strict=True)
                ]
                data = json.dumps(out).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class Server(ThreadingHTTPServer):
            request_queue_size = (
                1024  # listen backlog: the default 5 drops concurrent connects (1 s SYN retry)
            )

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


async def _rollout(engine, episodes: int, turns: int) -> None:
    engine.reserve(episodes)

    async def episode(e: int) -> None:
        async with engine.track(e, reserved=True):
            for t in range(turns):
                await engine.generate(
                    [GenerationRequest(input_ids=[e, t], sampling=SamplingParams(max_new_tokens=1))]
                )

    await asyncio.gather(*(episode(e) for e in range(episodes)))


def bench_loopback(episodes: int = 32, turns: int = 4, reps: int = 2, seed: int = 0) -> dict:
    server = LoopbackServer(seed)
    try:
        times: dict[str, list[float]] = {"independent": [], "lockstep": []}
        calls: dict[str, int] = {}
        for _ in range(reps):
            for mode in ("independent", "lockstep"):
                client = SGLangEngine(server.url, max_batch_size=episodes)
                engine = (
                    IndependentEngine(client, max_concurrency=episodes, seed=None)
                    if mode == "independent"
                    else CoalescingEngine(client, seed=None)
                )
                t0 = time.perf_counter()
                asyncio.run(_rollout(engine, episodes, turns))
                times[mode].append(time.perf_counter() - t0)
                calls[mode] = engine.batches
    finally:
        server.close()
    lat = [[latency_s(seed, e, t) for t in range(turns)] for e in range(episodes)]
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "episodes": episodes,
        "turns": turns,
        "reps": reps,
        "independent_s": med["independent"],
        "lockstep_s": med["lockstep"],
        "expected_independent_s": max(sum(row) for row in lat),
        "expected_lockstep_s": sum(max(lat[e][t] for e in range(episodes)) for t in range(turns)),
        "requests_per_call": {k: episodes * turns / calls[k] for k in calls},
        "ratio": med["lockstep"] / med["independent"],
        "all_times_s": times,
    }


def print_loopback(result: dict, console) -> None:
    from rich.table import Table

    table = Table(
        title=f"(c) {result['episodes']} episodes x {result['turns']} turns against a continuously batching "
        f"loopback server (per-request latency 20 ms + Exp(250 ms); median of {result['reps']})"
    )
    for col in ("mode", "wall (s)", "expected (s)", "requests per HTTP call"):
        table.add_column(col, justify="right" if col != "mode" else "left")
    table.add_row(
        "independent (ours for SGLang)",
        f"{result['independent_s']:.3f}",
        f"{result['expected_independent_s']:.3f}",
        f"{result['requests_per_call']['independent']:.1f}",
    )
    table.add_row(
        "lock-step (coalesced)",
        f"{result['lockstep_s']:.3f}",
        f"{result['expected_lockstep_s']:.3f}",
        f"{result['requests_per_call']['lockstep']:.1f}",
    )
    console.print(table)
    console.print(f"ratio lock-step / independent: [bold]{result['ratio']:.2f}x[/bold]")


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    result = bench_loopback(args.episodes, args.turns, args.reps)
    print_loopback(result, Console())
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
