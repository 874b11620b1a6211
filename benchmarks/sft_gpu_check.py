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
import tempfile
from pathlib import Path

# Qwen/Qwen3-VL-2B-Instruct's published shapes as we read them from its config.json; pass --config-from on a
# machine with hub access to use the hub's config instead.
QWEN3VL_2B_TEXT = {
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 262144,
    "rms_norm_eps": 1e-6,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 5_000_000.0,
        "mrope_section": [24, 20, 20],
        "mrope_interleaved": True,
    },
}
QWEN3VL_2B_VISION = {
    "depth": 24,
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_heads": 16,
    "out_hidden_size": 2048,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "num_position_embeddings": 2304,
    "deepstack_visual_indexes": [5, 11, 17],
}
# H100 / H200 SXM dense bf16 (data sheet): the convention MFU is quoted against. An 8192³ bf16 matmul on a
# lent H200 measured 769-798 TFLOP/s (2026); pass --gpu-tflops to quote against another peak.
H100_BF16_DENSE_TFLOPS = 989.0


def build(out: str, config_from: str | None) -> None:
    import torch
    from transformers import AutoConfig, AutoProcessor, Qwen3VLConfig, Qwen3VLForConditionalGeneration

    from paravt_core.models import build_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        build_tiny_model(tmp)
        processor = AutoProcessor.from_pretrained(tmp)
    tok = processor.tokenizer
    ids = {
        t: tok.convert_tokens_to_ids(t)
        for t in ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")
    }
    if config_from:
        config = AutoConfig.from_pretrained(config_from)
    else:
        config = Qwen3VLConfig(
            text_config=QWEN3VL_2B_TEXT, vision_config=QWEN3VL_2B_VISION, tie_word_embeddings=True
        )
    # the tiny tokenizer's ids for the media tokens (all below the 151936-entry vocabulary)
    config.image_token_id, config.video_token_id = ids["<|image_pad|>"], ids["<|video_pad|>"]
    config.vision_start_token_id, config.vision_end_token_id = ids["<|vision_start|>"], ids["<|vision_end|>"]
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):  # random init of 2 B: seconds on a GPU
        model = Qwen3VLForConditionalGeneration(config).to(torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(out)
    processor.save_pretrained(out)
    print(f"{out}: random Qwen3-VL, {params / 1e9:.2f} B parameters (bf16)")


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
        build(args.out, args.config_from)
    else:
        report(args.output, args.gpu_tflops)


if __name__ == "__main__":
    main()
