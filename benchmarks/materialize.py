"""Materialize benchmark: our columnar stage vs the row-by-row approach vs a plain read + write.

One run generates an SFT-shaped parquet (``messages`` JSON with the system prompt, multi-call tool traces
and 2-4 media references per row, ~1-3 KB a row), then times on the same file:

- ours:        ``paravt_core.data.materialize.materialize_file`` (validation of the messages shape and
               the path rewrite, columnar, batch by batch; file-existence checks off: there are no media);
- ours-rewrite: the same without the structural validation (``validate.check_structure`` off);
- row-by-row:  the public release's approach, written here from its description: read the table,
               ``to_pylist`` every column, ``json.loads`` each row, walk the parts in Python, rewrite,
               ``json.dumps``, rebuild the table, write;
- plain:       ``pq.read_table`` + ``pq.write_table`` of the same file (the floor for any rewrite).

It checks that ours and the row-by-row outputs decode to the same messages, prints rows/s and the two
ratios (targets: ours >= 20x row-by-row, ours <= 2x plain) and writes the numbers as JSON.

    .venv/bin/python benchmarks/materialize.py                 # 250K rows
    .venv/bin/python benchmarks/materialize.py --rows 20000    # quick
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from paravt_core.data.materialize import Target, materialize_file
from paravt_core.data.schema import MEDIA_PART_TYPES, SENTINEL_PREFIXES

PREFIX = "/mnt/paravt/media"
TARGET_VS_ROW = 20.0
TARGET_VS_PLAIN = 2.0

SYSTEM_PROMPT = (
    "You are a helpful assistant that answers questions about long videos. You first see a sparse overview "
    "of the whole video: frames labelled with their timestamps. When the overview is not enough, call the "
    "crop_video tool, possibly several times in one turn, to look closely at a time window. Think inside "
    "<think></think>, put each call inside <tool_call></tool_call>, and give the final answer inside "
    "<answer></answer>.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "<tools>\n"
    + json.dumps(
        {
            "type": "function",
            "function": {
                "name": "crop_video",
                "description": "Look closely at the video between start and end (seconds) and report.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "start": {"type": "number", "description": "window start in seconds"},
                        "end": {"type": "number", "description": "window end in seconds"},
                    },
                    "required": ["start", "end"],
                },
            },
        }
    )
    + "\n</tools>"
)
_WORDS = [
    "the", "a", "person", "red", "square", "moves", "left", "right", "kitchen", "opens", "door", "walks",
    "table", "cup", "picks", "up", "puts", "down", "camera", "pans", "towards", "window", "blue", "circle",
    "appears", "after", "before", "while", "then", "video", "scene", "shows", "man", "woman", "dog", "car",
    "street", "green", "triangle", "fades", "out", "enters", "room", "holds", "phone", "laptop", "book",
]  # fmt: skip


def _sentence(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(lo, hi))).capitalize() + "."


def make_row(rng: random.Random, i: int) -> str:
    """One SFT ``messages`` JSON string: system prompt, question with video, 1-3 tool rounds, answer."""
    prefix = rng.choice(SENTINEL_PREFIXES)
    src = f"{prefix}videor1_{i % 7}/" if prefix == "longvt_source/" else prefix
    video = f"{src}{i:07d}.mp4"
    duration = rng.randint(60, 3600)
    user = [
        {"type": "video_url", "video_url": {"url": video}},
        {"type": "text", "text": f"{_sentence(rng, 8, 20)} (A) {_sentence(rng, 2, 5)} (B) "
                                 f"{_sentence(rng, 2, 5)} (C) {_sentence(rng, 2, 5)}"},
    ]  # fmt: skip
    msgs: list[dict] = [
        {"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]},
        {"role": "user", "content": user},
    ]
    n_media = rng.randint(2, 4)
    rounds = max(1, n_media - 1)
    for r in range(rounds):
        calls = []
        for _ in range(rng.randint(1, 2)):
            start = rng.randint(0, duration - 10)
            calls.append(json.dumps({"name": "crop_video", "arguments": {"start": start, "end": start + 10}}))
        text = f"<think>{_sentence(rng, 6, 18)}</think>" + "".join(
            f"<tool_call>{c}</tool_call>" for c in calls
        )
        msgs.append({"role": "assistant", "content": [{"type": "text", "text": text}]})
        reply: list[dict] = [
            {"type": "text", "text": f"<tool_response>{_sentence(rng, 6, 15)}</tool_response>"}
        ]
        if r < n_media - 1:
            kind = MEDIA_PART_TYPES[1] if r % 2 == 0 else MEDIA_PART_TYPES[0]
            ext = "jpg" if kind == "image_url" else "mp4"
            reply.insert(0, {"type": kind, kind: {"url": f"{src}{i:07d}_{r}.{ext}"}})
        msgs.append({"role": "user", "content": reply})
    answer = f"<think>{_sentence(rng, 4, 10)}</think><answer>{rng.choice('ABC')}</answer>"
    msgs.append({"role": "assistant", "content": [{"type": "text", "text": answer}]})
    return json.dumps(msgs, ensure_ascii=False)


def generate(path: Path, rows: int, seed: int = 0, chunk: int = 50_000) -> None:
    """Write the benchmark parquet (row groups of ``chunk`` rows)."""
    rng = random.Random(seed)
    schema = pa.schema([("id", pa.string()), ("messages", pa.string()), ("source", pa.string()),
                        ("num_turns", pa.int32())])  # fmt: skip
    with pq.ParquetWriter(path, schema) as writer:
        for lo in range(0, rows, chunk):
            ids = range(lo, min(rows, lo + chunk))
            msgs = [make_row(rng, i) for i in ids]
            writer.write_table(
                pa.table(
                    {
                        "id": [f"bench-{i:07d}" for i in ids],
                        "messages": msgs,
                        "source": [f"videor1_{i % 7}" for i in ids],
                        "num_turns": pa.array([m.count('"role"') for m in msgs], pa.int32()),
                    },
                    schema=schema,
                )
            )


# ------------------------------------------------------------------------------------------ contenders


def _materialize_url(url: str) -> str:
    for prefix in SENTINEL_PREFIXES:
        if url.startswith(prefix):
            return f"{PREFIX}/{url}"
    return url


def row_by_row(src: Path, dst: Path) -> None:
    """The release's approach: to_pylist every column, json.loads/walk/json.dumps each row, rebuild, write."""
    table = pq.read_table(src)
    columns = {name: table.column(name).to_pylist() for name in table.schema.names}
    out = []
    for text in columns["messages"]:
        messages = json.loads(text)
        for message in messages:
            for part in message.get("content", []):
                for kind in MEDIA_PART_TYPES:
                    if part.get("type") == kind and "url" in (part.get(kind) or {}):
                        part[kind] = {**part[kind], "url": _materialize_url(part[kind]["url"])}
        out.append(json.dumps(messages, ensure_ascii=False))
    columns["messages"] = out
    pq.write_table(pa.table(columns, schema=table.schema), dst)


def plain(src: Path, dst: Path) -> None:
    pq.write_table(pq.read_table(src), dst)


def ours(src: Path, dst: Path, check_structure: bool = True) -> None:
    target = Target(prefix=PREFIX, checker=None, present=None, check_structure=check_structure)
    report = materialize_file(str(src), target, str(dst), str(dst) + ".rejected.parquet")
    if report.rejected or report.kept != report.rows:
        raise SystemExit(f"ours rejected rows of a clean file: {report.reasons}")


def timed(fn: Callable[[], None]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process, all threads)."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def same_output(a: Path, b: Path, sample: int = 2000) -> None:
    """Ours and the row-by-row reference must decode to the same messages (every column compared)."""
    ta, tb = pq.read_table(a), pq.read_table(b)
    assert ta.schema == tb.schema, (ta.schema, tb.schema)
    assert ta.num_rows == tb.num_rows
    step = max(1, ta.num_rows // sample)
    idx = pa.array(range(0, ta.num_rows, step))
    for name in ta.schema.names:
        va, vb = ta.column(name).take(idx).to_pylist(), tb.column(name).take(idx).to_pylist()
        if name == "messages":
            va, vb = [json.loads(x) for x in va], [json.loads(x) for x in vb]
        assert va == vb, f"column {name} differs"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=250_000)
    ap.add_argument(
        "--repeats", type=int, default=3, help="interleaved runs of ours and plain (median reported)"
    )
    ap.add_argument("--ref-repeats", type=int, default=1, help="runs of the row-by-row reference")
    ap.add_argument("--workdir", default=None, help="where the parquets go (default: a temp dir)")
    ap.add_argument("--json", default=None, help="write the results here (default: <workdir>/results.json)")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="paravt-bench-") as tmp:
        work = Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        src = work / "paravt_sft_bench.parquet"
        t0 = time.perf_counter()
        generate(src, args.rows)
        gen_s = time.perf_counter() - t0
        size = src.stat().st_size
        text_bytes = pq.read_table(src, columns=["messages"]).column("messages").chunk(0).nbytes
        print(f"generated {args.rows} rows ({size / 1e6:.0f} MB parquet) in {gen_s:.1f}s", file=sys.stderr)

        plain(src, work / "warmup.parquet")  # page cache and allocator warm for everyone
        contenders: dict[str, Callable[[], None]] = {
            "plain": lambda: plain(src, work / "plain.parquet"),
            "ours": lambda: ours(src, work / "ours.parquet"),
            "ours-rewrite": lambda: ours(src, work / "ours_rw.parquet", False),
        }
        wall: dict[str, list[float]] = {name: [] for name in [*contenders, "row-by-row"]}
        cpu: dict[str, list[float]] = {name: [] for name in wall}
        # interleaved rounds, so a change in the machine's load hits every contender alike
        for i in range(max(args.repeats, args.ref_repeats)):
            for name, fn in contenders.items():
                if i < args.repeats:
                    w, c = timed(fn)
                    wall[name].append(w)
                    cpu[name].append(c)
            if i < args.ref_repeats:
                w, c = timed(lambda: row_by_row(src, work / "ref.parquet"))
                wall["row-by-row"].append(w)
                cpu["row-by-row"].append(c)
        same_output(work / "ours.parquet", work / "ref.parquet")
        same_output(work / "ours_rw.parquet", work / "ref.parquet")
        results = wall

        med = {name: statistics.median(ts) for name, ts in results.items()}
        med_cpu = {name: statistics.median(ts) for name, ts in cpu.items()}
        summary = {
            "rows": args.rows,
            "parquet_bytes": size,
            "messages_bytes_first_row_group": text_bytes,
            "seconds": med,
            "all_seconds": results,
            "cpu_seconds": med_cpu,
            "all_cpu_seconds": cpu,
            "cpu_ours_vs_row_by_row": med_cpu["row-by-row"] / med_cpu["ours"],
            "cpu_ours_vs_plain": med_cpu["ours"] / med_cpu["plain"],
            "rows_per_s": {name: args.rows / s for name, s in med.items()},
            "ours_vs_row_by_row": med["row-by-row"] / med["ours"],
            "ours_vs_plain": med["ours"] / med["plain"],
            "ours_rewrite_vs_row_by_row": med["row-by-row"] / med["ours-rewrite"],
            "ours_rewrite_vs_plain": med["ours-rewrite"] / med["plain"],
            "targets": {"vs_row_by_row_at_least": TARGET_VS_ROW, "vs_plain_at_most": TARGET_VS_PLAIN},
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "pyarrow": pa.__version__,
                "load_avg": os.getloadavg(),
            },  # fmt: skip
        }
        print(f"{'':14}{'seconds':>10}{'rows/s':>12}{'cpu s':>10}")
        for name in ("plain", "ours", "ours-rewrite", "row-by-row"):
            print(f"{name:14}{med[name]:>10.2f}{args.rows / med[name]:>12,.0f}{med_cpu[name]:>10.2f}")
        print(
            f"ours vs row-by-row: {summary['ours_vs_row_by_row']:.1f}x faster (target >= {TARGET_VS_ROW:g}x)\n"
            f"ours vs plain read+write: {summary['ours_vs_plain']:.2f}x the time (target <= {TARGET_VS_PLAIN:g}x)\n"
            f"ours-rewrite (no structural validation): {summary['ours_rewrite_vs_row_by_row']:.1f}x faster than "
            f"row-by-row, {summary['ours_rewrite_vs_plain']:.2f}x plain\n"
            f"in CPU seconds (all threads): ours {summary['cpu_ours_vs_row_by_row']:.1f}x less than row-by-row, "
            f"{summary['cpu_ours_vs_plain']:.2f}x plain"
        )
        out = Path(args.json) if args.json else work / "results.json"
        if args.json or args.workdir:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(summary, indent=2))
            print(f"results: {out}")
        else:
            print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
