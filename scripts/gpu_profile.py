"""`make gpu-profile`: a few SFT steps at Qwen3-VL-2B's shapes under torch.profiler, one prepared command.

    python scripts/gpu_profile.py                     # GPU: the recipe (configs/sft/qwen3vl_8b.yaml), FSDP2 on 1 GPU
    python scripts/gpu_profile.py --prepare-only      # CPU machine: build the synthetic data to carry
    python scripts/gpu_profile.py --tiny --docs none  # CPU: the same on the tiny model (the test runs this)

The model has random weights with Qwen3-VL-2B's shapes (``paravt_bench/qwen3vl_2b.py``; nothing is
downloaded), the data is the synthetic set through the data stage (both under ``--work``, shared with
``make gpu-check``; built when absent). The real ``paravt sft`` loop runs in this process (as one torchrun
rank with FSDP2 and bf16 on a GPU, as one plain process on a CPU), without checkpoints, for ``--warmup``
steps unprofiled then ``--steps`` steps under ``torch.profiler``. The trainer's ``record_function`` ranges
(``sft/data_wait``, ``sft/h2d``, ``sft/forward``, ``sft/backward``, ``sft/clip``, ``sft/optimizer``,
``sft/log``) show where each step's time goes; on CUDA ``torch.cuda.set_sync_debug_mode("warn")`` counts
every synchronizing call (and where it came from), on any device ``HostReads`` counts the project code's own
reads of tensor values.

Writes under ``--out`` (default build/gpu-profile): ``trace.json.gz`` (Chrome / Perfetto trace of the
profiled steps), ``summary.json`` and ``summary.md`` (GPU busy share, seconds per range, the ten heaviest
kernels, syncs per step, tokens/s, MFU), and appends ``summary.md`` to ``--docs`` (default
docs/gpu-runs.md on a GPU, nothing on a CPU).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gzip
import json
import os
import re
import shutil
import socket
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from paravt_bench.gpu_inputs import prepare, relocate  # noqa: E402, F401 - relocate: named here by the tests

RANGES = ("sft/data_wait", "sft/h2d", "sft/forward", "sft/backward", "sft/clip", "sft/optimizer", "sft/log")
# H100 / H200 SXM dense bf16, the data sheet's peak that MFU is quoted against (the convention; the figure
# sft_gpu_check.py and tracking.peak_tflops default to). A lent H200's 8192³ bf16 matmul measured 769-798.
H100_BF16_DENSE_TFLOPS = 989.0
SYNC_WARNING = "called a synchronizing CUDA operation"
# attention kernels by name: flash (FA2 / FA3 and the CPU op), cuDNN's fused attention, memory-efficient (fmha)
ATTENTION_KERNEL = re.compile(r"flash|fmha|cudnn|attention|sdpa|mha", re.IGNORECASE)


def loader_sweep(cfg: Any, workers: list[int], samples: int) -> list[dict]:
    """Tokens/s that the loader makes with each worker count (``cfg.data.prefetch_factor`` samples in flight per
    worker), ``samples`` samples each after the first (start-up): what ``data.num_workers`` must reach to feed
    the step (tokens per step / step time)."""
    from paravt_core.models import load_processor_only
    from paravt_core.sft.data import (
        Dropped,
        RankIndices,
        SftRows,
        StreamPosition,
        read_rows,
        sample_stream,
        sft_files,
    )
    from paravt_core.sft.inputs import MediaSpec

    loaded = load_processor_only(cfg.model.uri)
    messages, row_ids = read_rows(sft_files(cfg.data.input, cfg.data.include))
    rows = SftRows(messages, row_ids, loaded.processor, loaded.config, MediaSpec(**cfg.media.model_dump()), 0)
    out = []
    for n in workers:
        stream = sample_stream(rows, RankIndices(StreamPosition(), 0, 1), n, cfg.data.prefetch_factor)
        next(stream)
        t0, tokens = time.perf_counter(), 0
        for _ in range(samples):
            item = next(stream)
            tokens += 0 if isinstance(item, Dropped) else len(item)
        seconds = time.perf_counter() - t0
        out.append({"workers": n, "tokens_per_s": tokens / seconds, "samples_per_s": samples / seconds})
        del stream
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _merged_busy(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of the union of ``intervals`` clipped to [lo, hi] (microseconds)."""
    busy, end = 0.0, lo
    for a, b in sorted(intervals):
        a, b = max(a, end), min(b, hi)
        if b > a:
            busy += b - a
            end = b
    return busy


def summarize(
    prof: Any,
    records: list[dict],
    syncs: list[dict],
    params: int,
    device: str,
    steps: int,
    peak_tflops: float = H100_BF16_DENSE_TFLOPS,
) -> dict:
    """The summary's numbers from the profiler's events and the trainer's records of the profiled steps;
    MFU over ``peak_tflops`` per GPU (``tracking.peak_tflops``, else the data sheet's by device name)."""
    from torch.autograd import DeviceType

    events = prof.events()
    step_events = [e for e in events if e.name.startswith("ProfilerStep")]
    lo = min(e.time_range.start for e in step_events)
    hi = max(e.time_range.end for e in step_events)
    ranges = {name: 0.0 for name in RANGES}
    kernels: Counter[str] = Counter()
    intervals = []
    for e in events:
        if e.name in ranges and e.device_type == DeviceType.CPU:
            ranges[e.name] += e.time_range.elapsed_us() / 1e6
        elif e.device_type == DeviceType.CUDA:
            kernels[e.name] += e.time_range.elapsed_us() / 1e6
            intervals.append((e.time_range.start, e.time_range.end))
    if not any(e.device_type == DeviceType.CUDA for e in events):  # a CPU run: the heaviest ops instead
        for avg in prof.key_averages():
            if avg.key not in ranges and not avg.key.startswith("ProfilerStep"):
                kernels[avg.key] = avg.self_cpu_time_total / 1e6
    window = (hi - lo) / 1e6
    tokens = sum(r["tokens"] for r in records)
    seconds = sum(r["step_time_s"] for r in records)
    tokens_per_s = tokens / seconds if seconds else 0.0
    cuda = device.startswith("cuda")
    # MFU: the trainer's model FLOPs of each step's batch (paravt_core/train/flops.py); HFU adds recompute
    from paravt_core.train.flops import six_n_flops, utilisation

    peak = peak_tflops if cuda else 0.0
    model_flops = sum(r.get("model_flops", 0.0) for r in records)
    hardware_flops = sum(r.get("hardware_flops", 0.0) for r in records)
    return {
        "device": device,
        "profiled_steps": steps,
        "window_s": window,
        "gpu_busy_share": _merged_busy(intervals, lo, hi) / (hi - lo) if cuda and hi > lo else None,
        "range_s_per_step": {k.removeprefix("sft/"): v / steps for k, v in ranges.items()},
        "heaviest_kernels": [{"name": n, "s_per_step": s / steps} for n, s in kernels.most_common(10)],
        # which attention kernel ran (flash, cuDNN, memory-efficient): often not among the ten heaviest
        "attention_kernels": [
            {"name": n, "s_per_step": s / steps}
            for n, s in kernels.most_common()
            if ATTENTION_KERNEL.search(n)
        ][:10],  # fmt: skip
        "syncs_per_step": [s["cuda_syncs"] for s in syncs] if cuda else None,
        "sync_sites": dict(sum((Counter(s["cuda_sites"]) for s in syncs), Counter()).most_common(10)),
        "host_reads_per_step": [s["host_reads"] for s in syncs],
        "tokens_per_step": [r["tokens"] for r in records],
        "step_time_s": [r["step_time_s"] for r in records],
        "losses": [r["loss"] for r in records],
        "tokens_per_s": tokens_per_s,
        "parameters": params,
        "mfu": utilisation(model_flops, seconds, 1, peak),
        "hfu": utilisation(hardware_flops, seconds, 1, peak),
        # the older 6 x parameters x tokens rule (docs/gpu-runs.md's first numbers), kept apart
        "mfu_6n": utilisation(six_n_flops(params, tokens), seconds, 1, peak),
        "model_flops_per_token": model_flops / tokens if tokens else 0.0,
        "hardware_flops_per_token": hardware_flops / tokens if tokens else 0.0,
        "peak_mem_gib": max((r.get("peak_mem_gib", 0.0) for r in records), default=0.0),
        "peak_tflops": peak or None,
    }


def markdown(summary: dict, env: dict) -> str:
    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f} %"

    s = summary
    lines = [
        f"## {env['date']}: `make gpu-profile` on {env['device_name']}",
        "",
        f"torch {env['torch']}, transformers {env['transformers']}; {env['config']} with "
        f"{' '.join(env['overrides'])}; {s['profiled_steps']} steps profiled after {env['warmup']} unprofiled.",
        "",
        f"- tokens/s {s['tokens_per_s']:,.0f}, MFU {pct(s['mfu'])} (model FLOPs of the batch, "
        f"{s['model_flops_per_token'] / 1e9:.2f} GFLOP/token), HFU {pct(s['hfu'])} (with recompute, "
        f"{s['hardware_flops_per_token'] / 1e9:.2f}), 6N rule {pct(s['mfu_6n'])} (6 x "
        f"{s['parameters'] / 1e9:.2f} B parameters), all over {s['peak_tflops'] or 0:.0f} TFLOP/s; "
        f"GPU busy {pct(s['gpu_busy_share'])} "
        f"of {s['window_s']:.2f} s, peak memory {s['peak_mem_gib']:.2f} GiB",
        f"- step time {', '.join(f'{t:.2f}' for t in s['step_time_s'])} s; losses "
        f"{', '.join(f'{x:.4f}' for x in s['losses'])}",
        f"- syncs per step (CUDA sync debug mode): {s['syncs_per_step']}; reads of tensor values by "
        f"paravt_core per step: {s['host_reads_per_step']}",
        "",
        "| range | s per step |",
        "|---|---|",
        *[f"| {k} | {v:.3f} |" for k, v in s["range_s_per_step"].items()],
        "",
        "| heaviest kernels | s per step |",
        "|---|---|",
        *[f"| `{k['name'][:90]}` | {k['s_per_step']:.3f} |" for k in s["heaviest_kernels"]],
    ]
    if s.get("loader"):
        need = sum(s["tokens_per_step"]) / max(sum(s["step_time_s"]), 1e-9)
        lines += ["", f"| loader workers | tokens/s (the step consumed {need:,.0f}) |", "|---|---|"]
        lines += [f"| {x['workers']} | {x['tokens_per_s']:,.0f} |" for x in s["loader"]]
    if s["sync_sites"]:
        lines += ["", "| sync site | count |", "|---|---|"]
        lines += [f"| `{k}` | {v} |" for k, v in s["sync_sites"].items()]
    marker = {
        "date": env["date"],
        "device": env["device_name"],
        "rule": "model",  # paravt plan reads mfu / hfu under this rule (paravt_core/plan/report.py)
        "mfu": s["mfu"],
        "hfu": s["hfu"],
        "mfu_6n": s["mfu_6n"],
        "tokens_per_s": s["tokens_per_s"],
    }
    lines += ["", f"<!-- gpu-run: {json.dumps(marker)} -->", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", default="build/gpu-check", help="model and data (shared with gpu-check)")
    parser.add_argument("--out", default="build/gpu-profile", help="trace and summary")
    parser.add_argument("--tiny", action="store_true", help="the tiny model and configs/sft/tiny.yaml (CPU)")
    parser.add_argument("--steps", type=int, default=2, help="profiled steps")
    parser.add_argument("--warmup", type=int, default=1, help="steps run before the profiled ones")
    parser.add_argument("--docs", default="auto", help="file to append the summary to ('none'; 'auto': "
                        "docs/gpu-runs.md on a GPU, none on a CPU)")  # fmt: skip
    parser.add_argument("--loader-workers", default="auto", help="worker counts to time the loader with, "
                        "comma-separated ('auto': 2,4,8,12 on a GPU, 0,1 on a CPU; 'none')")  # fmt: skip
    parser.add_argument("--prepare-only", action="store_true", help="build model and data, then stop")
    parser.add_argument("overrides", nargs="*", help="SFT config overrides (key=value), after the script's")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        parser.error("--steps must be >= 1 and --warmup >= 0")

    import torch
    import transformers
    from torch.profiler import ProfilerActivity, profile, schedule

    from paravt_core.config import SftConfig, load_config
    from paravt_core.sft.trainer import train
    from paravt_core.train.syncs import HostReads

    work, out = Path(args.work), Path(args.out)
    model_dir, data_dir = prepare(work, args.tiny)
    if args.prepare_only:
        print(f"model {model_dir}, data {data_dir}")
        return 0
    cuda = torch.cuda.is_available()
    config = ROOT / "configs" / "sft" / ("tiny.yaml" if args.tiny else "qwen3vl_8b.yaml")
    total = args.warmup + args.steps
    overrides = [f"trainer.steps={total}", "checkpoint.every=1000000", *args.overrides]
    cfg = load_config(
        SftConfig,
        str(config),
        [
            f"model.uri={model_dir}",
            f"data.input={data_dir}",
            f"output={out / 'sft'}",
            f"work_dir={out / 'sft-work'}",
        ]
        + overrides,
    )
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if cuda:  # one torchrun rank in this process: FSDP2 + bf16 mixed precision, as the recipe runs
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1")
        os.environ["MASTER_PORT"] = str(_free_port())

    syncs: list[dict] = []
    # HostReads sees every torch call through Python: on a GPU that host cost would distort the step, and
    # the sync debug mode counts the real syncs there; on a CPU it is the only count there is.
    reads = HostReads() if not cuda else contextlib.nullcontext()
    caught: list[warnings.WarningMessage] = []
    state = {"reads": 0, "warnings": 0}
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    prof = profile(activities=activities, schedule=schedule(wait=args.warmup, warmup=0, active=args.steps))

    def on_step(step: int, record: dict) -> None:
        if step > args.warmup:
            sites = Counter(f"{Path(w.filename).name}:{w.lineno}" for w in caught[state["warnings"] :]
                            if SYNC_WARNING in str(w.message))  # fmt: skip
            syncs.append({"cuda_syncs": sum(sites.values()), "cuda_sites": sites,
                          "host_reads": None if cuda else reads.total - state["reads"]})  # fmt: skip
        state["reads"], state["warnings"] = 0 if cuda else reads.total, len(caught)
        prof.step()

    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught_now:
        warnings.simplefilter("always")
        caught = caught_now
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            with prof, reads:
                result = train(cfg, log=lambda *_: None, on_step=on_step, save_checkpoints=False)
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode(0)
            if torch.distributed.is_initialized():
                torch.distributed.destroy_process_group()
    records = result.records[args.warmup :]
    sweep = args.loader_workers if args.loader_workers != "auto" else ("2,4,8,12" if cuda else "0,1")
    loader = [] if sweep == "none" else loader_sweep(cfg, [int(w) for w in sweep.split(",")], 48)
    with torch.device("meta"):
        from transformers import AutoConfig, AutoModelForImageTextToText

        params = sum(
            p.numel()
            for p in AutoModelForImageTextToText.from_config(
                AutoConfig.from_pretrained(model_dir)
            ).parameters()
        )
    device = f"cuda:{torch.cuda.current_device()}" if cuda else "cpu"
    from paravt_core.tracking.scalars import peak_tflops

    peak = peak_tflops(torch.cuda.get_device_name(0), cfg.tracking.peak_tflops) if cuda else 0.0
    summary = summarize(prof, records, syncs, params, device, args.steps, peak)
    summary["wall_s"] = time.perf_counter() - started
    # the SDPA kernels asked for: model.sdpa_backend reaches packed_sdpa's calls only (train/attention.py)
    packed = cfg.model.attn_implementation == "packed_sdpa"
    summary["sdpa_backend"] = cfg.model.sdpa_backend if packed else "auto"
    summary["loader"] = loader
    trace = out / "trace.json"
    prof.export_chrome_trace(str(trace))
    with open(trace, "rb") as src, gzip.open(str(trace) + ".gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    trace.unlink()
    env = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "device_name": torch.cuda.get_device_name(0) if cuda else "CPU",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "config": str(config.relative_to(ROOT)),
        "overrides": overrides,
        "warmup": args.warmup,
    }
    (out / "summary.json").write_text(json.dumps({**summary, "environment": env}, indent=2))
    text = markdown(summary, env)
    (out / "summary.md").write_text(text)
    docs = (ROOT / "docs" / "gpu-runs.md" if cuda else None) if args.docs == "auto" else args.docs
    if docs not in (None, "none"):
        with open(docs, "a") as f:
            f.write("\n" + text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
