"""The SFT step never waits on the host inside its micro-batch loop, with the same numbers.

- Reads of tensor values back into Python made by the project's code (``HostReads``: on a GPU each is a
  device sync) are counted over whole ``train()`` runs of 2 and 3 steps: the difference is what one step of
  3 micro-batches costs. Before the change it was one ``float(loss)`` per micro-batch, the norm's ``float``,
  the pack's ``nonzero`` / ``tolist`` per micro-batch; now it is the step's one read at its end.
- The logged losses and gradient norms equal, bit for bit, those of the loop as it was written before (a
  Python float per micro-batch), rebuilt here from the trainer's own pieces with the same seeds.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from paravt_core.config import SftConfig, load_config
from paravt_core.models import load
from paravt_core.sft.data import SftRows, StreamPosition, read_rows, sft_files
from paravt_core.sft.inputs import MediaSpec
from paravt_core.sft.packing import PackedLoss
from paravt_core.sft.trainer import Feed, make_optimizer, make_scheduler, train
from paravt_core.train.attention import set_implementation
from paravt_core.train.dist import Dist, seed_everything
from paravt_core.train.fsdp import CoreOptions, grad_norm_and_clip, prepare
from paravt_core.train.syncs import HostReads
from tests.support.paths import ROOT

REPO = ROOT
TINY = REPO / "configs" / "sft" / "tiny.yaml"


def _cfg(model: str, data: str, out: Path, steps: int, accum: int = 3) -> SftConfig:
    return load_config(
        SftConfig,
        str(TINY),
        [
            f"model.uri={model}",
            f"data.input={data}",
            f"output={out}",
            f"work_dir={out}-work",
            f"trainer.steps={steps}",
            f"trainer.grad_accum={accum}",
            "checkpoint.every=100",
            "data.num_workers=0",
        ],
    )


def _reads(cfg: SftConfig) -> HostReads:
    with HostReads() as reads:
        train(cfg, log=lambda *_: None)
    return reads


def test_one_read_per_step_whatever_the_micro_batches(
    tiny_model_dir: str, sft_data_output: str, tmp_path: Path
):
    two = _reads(_cfg(tiny_model_dir, sft_data_output, tmp_path / "two", steps=2))
    three = _reads(_cfg(tiny_model_dir, sft_data_output, tmp_path / "three", steps=3))
    per_step = three.sites - two.sites
    assert sum(per_step.values()) == 1, (
        f"reads of device values in one step of 3 micro-batches: {dict(per_step)}"
    )
    (site,) = per_step
    assert site.startswith("paravt_core/sft/trainer.py:"), site


def _reference_losses(cfg: SftConfig) -> list[tuple[float, float]]:
    """The step as it was written before the host reads were gathered: ``float(loss)`` after every micro-batch, a float norm."""
    seed_everything(cfg.trainer.seed)
    messages, row_ids = read_rows(sft_files(cfg.data.input, cfg.data.include))
    loaded = load(cfg.model.uri, device="cpu", dtype=torch.float32)
    prepare(loaded.model, CoreOptions(activation_checkpointing=False), trainable=True)
    set_implementation(loaded.model, cfg.model.attn_implementation)  # the trainer's attention
    model = PackedLoss(loaded.model, chunk=cfg.train.logprob_chunk)
    model.train()
    optimizer, scheduler = make_optimizer(model, cfg), None
    scheduler = make_scheduler(optimizer, cfg)
    rows = SftRows(messages, row_ids, loaded.processor, loaded.config, MediaSpec(**cfg.media.model_dump()), 0)
    feed = Feed(rows, cfg, Dist(), StreamPosition(), {})
    out = []
    for _ in range(cfg.trainer.steps):
        seqs = [feed.next_sequence() for _ in range(cfg.trainer.grad_accum)]
        targets = float(sum(s.loss_tokens for s in seqs))
        loss_sum = 0.0
        for seq in seqs:
            loss = model(seq)
            (loss * 1 / max(targets, 1.0)).backward()
            loss_sum += float(loss.detach())
        norm = grad_norm_and_clip(model, cfg.trainer.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        out.append((loss_sum / max(targets, 1.0), norm))
    return out


def test_logged_losses_equal_the_per_micro_batch_loop(
    tiny_model_dir: str, sft_data_output: str, tmp_path: Path
):
    cfg = _cfg(tiny_model_dir, sft_data_output, tmp_path / "run", steps=3)
    records = train(cfg, log=lambda *_: None).records
    expected = _reference_losses(cfg)
    got = [(r["loss"], r["grad_norm"]) for r in records]
    assert all(math.isfinite(x) for pair in got for x in pair)
    assert got == expected  # exact: same float64 sums in the same order, the same float32 norm
