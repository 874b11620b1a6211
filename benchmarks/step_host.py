"""`make bench-step-host`: the host's share of one SFT step, before and after issue 32's step, side by side.

The model's compute is replaced by a zero-cost stand-in (one parameter, a loss of 0 x it), so what is left of
a step is the host's work: samples from the loader, packing, copies, the reductions, the reads, logging. The
recipe's settings (configs/sft/qwen3vl_8b.yaml: 4 packs of 8,192 tokens, its media limits) on the synthetic
data, with the tiny model's processor (Qwen3-VL's patch 16 / merge 2).

- before: the loop as it was (commit 34364d3): packs built in the main thread at the start of each step, a
  Python float per micro-batch, a float norm;
- after: ``paravt_core.sft.trainer``'s ``NextPacks`` (next step's packs on a background thread) and
  ``train_step`` (one read per step).

"Host cost" is the main thread's CPU time per step (``time.thread_time``): on a GPU that is the time in which
the main thread cannot queue kernels. Waiting for the background thread is not CPU time, and is hidden when
the background thread's time per step (printed) is below the GPU's step time. Both are set against the step
time that 40 % MFU gives at 2B and 8B shapes on one H100 (``paravt plan``'s FLOPs per token, recompute
included); the goal is under 5 %.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STEPS = 6  # measured steps per side, after one warm-up step


class ZeroCost(torch.nn.Module):
    """The stand-in: a loss with a graph through one parameter and no model compute."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, batch) -> torch.Tensor:  # noqa: ANN001
        return (self.w * 0.0).sum() + batch.input_ids.shape[1] * 0.0


def _setup(cfg):  # noqa: ANN001, ANN202
    from paravt_core.models import load
    from paravt_core.sft.data import SftRows, StreamPosition, read_rows, sft_files
    from paravt_core.sft.inputs import MediaSpec
    from paravt_core.sft.trainer import Feed, make_optimizer, make_scheduler
    from paravt_core.train.dist import Dist

    messages, row_ids = read_rows(sft_files(cfg.data.input, cfg.data.include))
    loaded = load(cfg.model.uri, device="cpu", dtype=torch.float32)
    rows = SftRows(messages, row_ids, loaded.processor, loaded.config, MediaSpec(**cfg.media.model_dump()), 0)
    model = ZeroCost()
    optimizer = make_optimizer(model, cfg)
    return (
        Feed(rows, cfg, Dist(), StreamPosition(), {}),
        model,
        optimizer,
        make_scheduler(optimizer, cfg),
        Dist(),
    )


def before(cfg) -> tuple[list[float], list[float]]:  # noqa: ANN001
    """The step of commit 34364d3, written out: (main-thread CPU s, wall s) per step."""
    from paravt_core.sft.inputs import REASONS
    from paravt_core.train.fsdp import grad_norm_and_clip

    feed, model, optimizer, scheduler, d = _setup(cfg)
    cpu, wall = [], []
    for _ in range(STEPS + 1):
        c0, w0 = time.thread_time(), time.perf_counter()
        from collections import Counter

        drops_before = Counter(feed.dropped)
        seqs = [feed.next_sequence() for _ in range(cfg.trainer.grad_accum)]
        local = [float(sum(s.loss_tokens for s in seqs)), float(sum(s.tokens for s in seqs))]
        global_targets, _ = d.sum(local)
        loss_sum = 0.0
        for seq in seqs:
            loss = model(seq.to(d.device))
            (loss * d.world / max(global_targets, 1.0)).backward()
            loss_sum += float(loss.detach())
        norm = grad_norm_and_clip(model, cfg.trainer.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        new_drops = feed.dropped - drops_before
        d.sum([loss_sum, *local, float(len(seqs))] + [float(new_drops.get(r, 0)) for r in REASONS])
        assert norm == norm
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - w0)
    return cpu[1:], wall[1:]


def after(cfg) -> tuple[list[float], list[float], list[float]]:  # noqa: ANN001
    """The trainer's step: (main-thread CPU s, wall s, background thread s) per step."""
    from paravt_core.sft.trainer import NextPacks, train_step

    feed, model, optimizer, scheduler, d = _setup(cfg)
    made: list[float] = []

    class Timed(NextPacks):
        def _make(self):  # noqa: ANN202
            t0 = time.perf_counter()
            out = super()._make()
            made.append(time.perf_counter() - t0)
            return out

    packs = Timed(feed, cfg.trainer.grad_accum, pin=False)
    cpu, wall = [], []
    try:
        for _ in range(STEPS + 1):
            c0, w0 = time.thread_time(), time.perf_counter()
            seqs, drops = packs.take()
            batches = [s.to(d.device) for s in seqs]
            packs.request()
            train_step(model, optimizer, scheduler, batches, d, contextlib.nullcontext(), 1.0, drops)
            cpu.append(time.thread_time() - c0)
            wall.append(time.perf_counter() - w0)
    finally:
        packs.close()
    return cpu[1:], wall[1:], made[1 : STEPS + 1]


def step_at_40_mfu(model_config, cfg) -> float:  # noqa: ANN001
    """Seconds of one step (grad_accum packs of packing.length tokens) on one H100 at 40 % MFU."""
    from paravt_core.plan.report import GPUS, flops_per_token

    length = cfg.packing.length
    tokens = cfg.trainer.grad_accum * length
    return tokens * flops_per_token(model_config, length) * 4.0 / (GPUS["h100-80g"].bf16_flops * 0.40)


def main() -> None:
    from transformers import Qwen3VLConfig

    from paravt_bench.gpu_inputs import prepare
    from paravt_bench.qwen3vl_2b import QWEN3VL_2B_TEXT, QWEN3VL_2B_VISION
    from paravt_core.config import SftConfig, load_config
    from paravt_core.plan.report import load_model_config

    model_dir, data_dir = prepare(ROOT / "build" / "bench-step-host", tiny=True)
    cfg = load_config(
        SftConfig,
        str(ROOT / "configs" / "sft" / "qwen3vl_8b.yaml"),
        [f"model.uri={model_dir}", f"data.input={data_dir}", "data.num_workers=2", "output=unused"],
    )
    old_cpu, old_wall = before(cfg)
    new_cpu, new_wall, made = after(cfg)
    targets = {
        "2B": step_at_40_mfu(
            Qwen3VLConfig(text_config=QWEN3VL_2B_TEXT, vision_config=QWEN3VL_2B_VISION), cfg
        ),
        "8B": step_at_40_mfu(load_model_config(), cfg),
    }
    med = statistics.median
    print(
        f"host cost of one SFT step ({cfg.trainer.grad_accum} packs of {cfg.packing.length} tokens), median of {STEPS}:"
    )
    print(f"  before: main thread {med(old_cpu) * 1e3:8.1f} ms CPU ({med(old_wall) * 1e3:.1f} ms wall)")
    print(f"  after:  main thread {med(new_cpu) * 1e3:8.1f} ms CPU ({med(new_wall) * 1e3:.1f} ms wall; "
          f"background packing {med(made) * 1e3:.1f} ms per step)")  # fmt: skip
    print(f"  before / after: {med(old_cpu) / max(med(new_cpu), 1e-9):.1f}x")
    for name, step in targets.items():
        old, new, bg = med(old_cpu) / step, med(new_cpu) / step, med(made) / step
        verdict = "under" if new < 0.05 else "OVER"
        print(f"  {name}: step at 40 % MFU on one H100 {step:.2f} s -> host share before {old:.1%}, after {new:.1%} "
              f"({verdict} 5 %); background packing {bg:.0%} of the step ({'hidden' if bg < 1 else 'NOT hidden'})")  # fmt: skip


if __name__ == "__main__":
    main()
