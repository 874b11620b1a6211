"""GPU check of the SFT stage: a random-initialized model with Qwen3-VL-2B's shapes, a few FSDP2 steps.

    python benchmarks/sft_gpu_check.py build build/gpu/qwen3vl-2b-random [--config-from Qwen/Qwen3-VL-2B-Instruct]
    torchrun --nproc-per-node 1 -m paravt_core.cli sft --config configs/sft/qwen3vl_8b.yaml \\
        model.uri=build/gpu/qwen3vl-2b-random data.input=build/gpu/data output=build/gpu/sft \\
        trainer.steps=3 checkpoint.every=3
    python benchmarks/sft_gpu_check.py report build/gpu/sft

``build`` writes the model with random weights (nothing is downloaded; with ``--config-from`` only the hub's
``config.json`` is read, for the exact published shapes) plus the tiny model's tokenizer and processor (patch
16 / merge 2 like Qwen3-VL). ``report`` prints tokens/s (steps after the first), peak memory and MFU: the
model FLOPs of each step's batch that the trainer records (``paravt_core/train/flops.py``: decoder and
attention fwd + bwd, lm_head on the trained positions, the frozen vision tower forward only; recompute not
counted) over the step time and the peak bf16 FLOP/s of the GPU (rank 0's packs on rank 0's GPU), with HFU
(recompute counted) and ``mfu_6n``, the older 6 x parameters x tokens/s rule, beside it.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

# H100 / H200 SXM dense bf16 (data sheet): the convention MFU is quoted against. An 8192³ bf16 matmul on a
# lent H200 measured 769-798 TFLOP/s (2026); pass --gpu-tflops to quote against another peak.
H100_BF16_DENSE_TFLOPS = 989.0


def report(output: str, gpu_tflops: float) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    out = Path(output)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((out / "metrics.json").read_text())
    config = AutoConfig.from_pretrained(out / "final")
    with torch.device("meta"):
        params = sum(p.numel() for p in AutoModelForImageTextToText.from_config(config).parameters())
    from paravt_core.train.flops import six_n_flops, utilisation

    timed = records[1:] or records
    tokens_per_s = statistics.median(r["tokens_per_s"] for r in timed)
    world = summary.get("world_size", 1)
    # per step: rank 0's model (hardware) FLOPs over rank 0's step time and one GPU's peak
    mfu = statistics.median(utilisation(r["model_flops"], r["step_time_s"], 1, gpu_tflops) for r in timed)
    hfu = statistics.median(utilisation(r["hardware_flops"], r["step_time_s"], 1, gpu_tflops) for r in timed)
    mfu_6n = utilisation(six_n_flops(params, 1) * tokens_per_s, 1.0, world, gpu_tflops)
    result = {
        "steps": len(records),
        "world_size": world,
        "parameters": params,
        "tokens_per_s": tokens_per_s,
        "tokens_per_s_per_gpu": tokens_per_s / world,
        "peak_mem_gib": max(r.get("peak_mem_gib", 0.0) for r in records),
        "mfu": mfu,
        "hfu": hfu,
        "mfu_6n": mfu_6n,
        "losses": [r["loss"] for r in records],
        "padding_share": summary.get("padding_share"),
    }
    print(json.dumps(result, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("out")
    b.add_argument("--config-from", default=None, help="hub id whose config.json gives the shapes")
    r = sub.add_parser("report")
    r.add_argument("output", help="the sft stage's output directory")
    r.add_argument(
        "--gpu-tflops",
        type=float,
        default=H100_BF16_DENSE_TFLOPS,
        help="peak dense bf16 TFLOP/s per GPU (default: the H100 / H200 data sheet's 989)",
    )
    args = parser.parse_args()
    if args.cmd == "build":
        from paravt_bench.qwen3vl_2b import build  # report needs only the stage's output

        build(args.out, args.config_from)
    else:
        report(args.output, args.gpu_tflops)


if __name__ == "__main__":
    main()
