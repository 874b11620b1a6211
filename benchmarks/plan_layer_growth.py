"""Is the plan's per-decoder-layer "activation" growth real? Same medium Qwen3-VL shapes (layers whose
parameters dominate), the real SFT step on rank 0 of 2 REAL gloo ranks (MemTracker, real tensors) vs the
plan's fake mode (FSDPMemTracker, fake tensors, fake process group of 2), at two layer counts; prints the
peaks and the growth per layer (and one layer's bf16 parameter bytes for scale).

It found the fake-mode excess (+13 % at 6 layers, from gradient clipping): DTensor's shape propagation ran in
the plan's own fake mode and the tracker counted its global-shape placeholders; ``fake.fake_world`` now gives
it a fake mode of its own. Printed since (1024 tokens, layers 2 and 6): fake == real to the byte in every
category (0.2806 / 0.5935 GiB), 0.0782 GiB per layer in both (the layer's sharded params, grads, AdamW states).

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 .venv/bin/python benchmarks/plan_layer_growth.py [L1 L2 LENGTH]
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from paravt_core.config import SftConfig, load_config
from paravt_core.models import build_tiny_model
from paravt_core.plan import memory, steps

SFT_8B = "configs/sft/qwen3vl_8b.yaml"
OVERRIDES = ["media.video_max_frames=8", "media.video_max_pixels=4096"]


def medium_config(model_dir: str, layers: int):
    from transformers import AutoConfig

    c = AutoConfig.from_pretrained(model_dir)
    t = c.text_config
    t.hidden_size, t.intermediate_size, t.num_hidden_layers = 1024, 3072, layers
    c.vision_config.out_hidden_size = 1024
    return c


def layer_bf16_bytes(model_dir: str) -> int:
    from transformers import Qwen3VLForConditionalGeneration

    with torch.device("meta"):
        m = Qwen3VLForConditionalGeneration._from_config(medium_config(model_dir, 1))
    return 2 * sum(p.numel() for p in m.model.language_model.layers[0].parameters())


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, model_dir: str, port: int, layers: int, length: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        cfg = load_config(SftConfig, SFT_8B, OVERRIDES)
        step = steps.prepare_sft(medium_config(model_dir, layers), cfg, length, world=2)
        step.warmup()
        # FSDPMemTracker on real tensors (MemTracker's grad hooks refuse the frozen vision tower here)
        from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

        tracker = FSDPMemTracker(step.root, step.optimizer)
        with tracker:
            step.step()
        snap = memory._peak_snapshot(tracker)
        if rank == 0:
            with open(out, "w") as f:
                f.write(repr(snap))
    finally:
        dist.destroy_process_group()


def real_peak(model_dir: str, layers: int, length: int) -> int:
    out = os.path.join(model_dir, f"real_{layers}")
    mp.spawn(_rank, args=(model_dir, _port(), layers, length, out), nprocs=2)
    import ast

    return ast.literal_eval(open(out).read())


def fake_peak(model_dir: str, layers: int, length: int) -> memory.StepMemory:
    cfg = load_config(SftConfig, SFT_8B, OVERRIDES)
    return memory.measure(steps.prepare_sft, 2, medium_config(model_dir, layers), cfg, length)


def main() -> None:
    l1, l2, length = (int(a) for a in sys.argv[1:4]) if len(sys.argv) > 3 else (2, 6, 1024)
    model_dir = build_tiny_model(tempfile.mkdtemp(), seed=0)
    gib = 2**30
    print(f"one layer bf16 params: {layer_bf16_bytes(model_dir) / gib:.4f} GiB")
    fakes = {n: fake_peak(model_dir, n, length) for n in (l1, l2)}
    for n, f in fakes.items():
        print(
            f"fake L={n}: peak {f.peak_bytes / gib:.4f} GiB",
            {k: round(v / gib, 4) for k, v in f.tracker.items()},
        )
    reals = {n: real_peak(model_dir, n, length) for n in (l1, l2)}
    for n, r in reals.items():
        print(f"real L={n}: peak {r['Total'] / gib:.4f} GiB", {k: round(v / gib, 4) for k, v in r.items()})
    d = l2 - l1
    print(
        f"growth per layer: fake {(fakes[l2].peak_bytes - fakes[l1].peak_bytes) / d / gib:.4f} GiB, "
        f"real {(reals[l2]['Total'] - reals[l1]['Total']) / d / gib:.4f} GiB"
    )


if __name__ == "__main__":
    main()
