"""Model FLOPs against the 6N rule on the packs a past GPU run trained, rebuilt on the CPU.

    python benchmarks/flops_of_run.py [--work build/gpu-check] [--steps 5] [--model 2b|8b]

The 2026-11-26 run of docs/gpu-runs.md recorded its MFU under the old rule (6 x parameters x tokens/s).
Its data is deterministic: the synthetic set (``synthesize(videos=8, seconds=20, seed=0)`` through the data
stage, what ``scripts/gpu_profile.py --prepare-only`` builds under ``--work``), packed by the SFT recipe
(``configs/sft/qwen3vl_8b.yaml``) on one rank. This rebuilds the same packs with the trainer's own ``Feed``
and prints, per step, the model FLOPs per token (``paravt_core/train/flops.py``), the hardware FLOPs
(recompute counted) and both over 6N: the ratios ``paravt_core/plan/report.py``'s ``LEGACY_6N_RATIOS``
converts that run's marker with (step 2 is the run's recorded median step; its 31,468 tokens match the
run's 5.48 s x 5,742 tokens/s).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def model_config(name: str):  # noqa: ANN201
    from transformers import Qwen3VLConfig

    from paravt_bench.qwen3vl_2b import QWEN3VL_2B_TEXT, QWEN3VL_2B_VISION
    from paravt_core.plan.report import load_model_config

    if name == "8b":
        return load_model_config()
    return Qwen3VLConfig(
        text_config=QWEN3VL_2B_TEXT, vision_config=QWEN3VL_2B_VISION, tie_word_embeddings=True
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", default="build/gpu-check", help="model and data (shared with gpu-check)")
    parser.add_argument("--steps", type=int, default=5, help="optimizer steps to rebuild")
    parser.add_argument("--model", choices=("2b", "8b"), default="2b", help="shapes to count at")
    args = parser.parse_args()

    from paravt_bench.gpu_inputs import prepare
    from paravt_core.config import SftConfig, load_config
    from paravt_core.models import load_processor_only
    from paravt_core.plan.report import param_parts
    from paravt_core.sft.data import SftRows, StreamPosition, read_rows, sft_files
    from paravt_core.sft.inputs import MediaSpec
    from paravt_core.sft.trainer import Feed
    from paravt_core.train.dist import Dist
    from paravt_core.train.flops import model_shapes, pack_facts, six_n_flops, step_flops

    tiny_dir, data_dir = prepare(Path(args.work), tiny=True)  # the 2B model's processor is the tiny one's
    cfg = load_config(
        SftConfig,
        str(ROOT / "configs" / "sft" / "qwen3vl_8b.yaml"),
        [f"model.uri={tiny_dir}", f"data.input={data_dir}", "data.num_workers=0", "output=unused"],
    )
    loaded = load_processor_only(cfg.model.uri)
    messages, row_ids = read_rows(sft_files(cfg.data.input, cfg.data.include))
    spec = MediaSpec(**cfg.media.model_dump())
    rows = SftRows(messages, row_ids, loaded.processor, loaded.config, spec, cfg.data.seed)
    feed = Feed(rows, cfg, Dist(), StreamPosition(), {})
    config = model_config(args.model)
    shapes, parameters = model_shapes(config), param_parts(config)["total"]
    for step in range(1, args.steps + 1):
        facts = [pack_facts(feed.next_sequence()) for _ in range(cfg.trainer.grad_accum)]
        flops = step_flops(shapes, facts, checkpointing=cfg.model.gradient_checkpointing)
        tokens = sum(f.tokens for f in facts)
        line = {
            "step": step,
            "tokens": tokens,
            "loss_tokens": sum(f.loss_tokens for f in facts),
            "patches": sum(f.patches for f in facts),
            "model_gflop_per_token": flops.model / tokens / 1e9,
            "hardware_gflop_per_token": flops.hardware / tokens / 1e9,
            "six_n_gflop_per_token": six_n_flops(parameters, 1) / 1e9,
            "model_over_6n": flops.model / six_n_flops(parameters, tokens),
            "hardware_over_6n": flops.hardware / six_n_flops(parameters, tokens),
        }
        print(json.dumps(line))


if __name__ == "__main__":
    main()
