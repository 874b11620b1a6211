"""The SFT training loop: plain PyTorch, one code path for one CPU process and ``torchrun`` on N GPUs.

- Launch: ``paravt sft --config c.yaml`` (one process) or ``torchrun --nproc-per-node N -m paravt_core.cli sft
  --config c.yaml``. Model loading, freezing (``train.freeze_vision``), activation checkpointing, FSDP2
  sharding and the optimizer's parameter groups come from the training core shared with RL
  (``paravt_core.train``), NCCL on GPUs and gloo on CPUs.
- Step: ``trainer.grad_accum`` packed sequences per rank, each ``token_losses(...) * world / T`` backpropagated
  where ``T`` is the number of target tokens of the whole step over all ranks (FSDP averages gradients over
  ranks, so this is the exact token-weighted mean of the global batch); then gradient clipping, AdamW
  (no decay on norms and biases), the warmup + cosine schedule of ``transformers``.
- GPU: bf16 compute (FSDP2 ``MixedPrecisionPolicy`` with float32 master weights and reductions; autocast in a
  single process) and activation checkpointing. CPU: float32.
- Checkpoints every ``checkpoint.every`` steps (``paravt_core/checkpoint.py``); a restarted run continues from the newest
  complete one with the same data position, RNG and metrics, so its per-step losses are those of an
  uninterrupted run.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch
from torch.profiler import record_function

from paravt_core import checkpoint, faults
from paravt_core.config import SftConfig, config_to_dict
from paravt_core.sft.data import (
    Dropped,
    RankIndices,
    SftDataError,
    SftRows,
    StreamPosition,
    read_rows,
    sample_stream,
    scan_rows,
    sft_files,
)
from paravt_core.sft.inputs import REASONS, MediaSpec
from paravt_core.sft.packing import Bin, PackedBatch, PackedLoss, Packer, Sample, pack
from paravt_core.tracking import Tracker
from paravt_core.tracking.progress import StepProgress, is_terminal, sft_numbers
from paravt_core.tracking.scalars import mfu, mfu_6n, peak_tflops, sft_scalars
from paravt_core.train.attention import describe, set_implementation
from paravt_core.train.dist import Dist, seed_everything, setup_distributed
from paravt_core.train.flops import PackFacts, model_shapes, pack_facts, step_flops
from paravt_core.train.fsdp import CoreOptions, build, clip_grads, make_adamw
from paravt_core.user_errors import ParavtUserError


class SftError(ParavtUserError, RuntimeError):
    """The run cannot go on (too many bad rows, an incompatible checkpoint); the message says why.
    ``metrics``: what the stage records in ``metrics.json`` for a failed run (the gate's counts)."""

    def __init__(self, message: str, metrics: dict[str, Any] | None = None):
        super().__init__(message)
        self.metrics = metrics or {}


def make_optimizer(model: torch.nn.Module, cfg: SftConfig) -> torch.optim.AdamW:
    t = cfg.trainer
    return make_adamw(model, t.lr, t.weight_decay, t.betas, t.eps)


def make_scheduler(optimizer: torch.optim.Optimizer, cfg: SftConfig) -> Any:
    from transformers import get_cosine_schedule_with_warmup

    steps = cfg.trainer.steps
    return get_cosine_schedule_with_warmup(optimizer, math.ceil(cfg.trainer.warmup_ratio * steps), steps)


# ------------------------------------------------------------------------------------------ data feed


class Feed:
    """Samples of this rank -> packed sequences; counts drops and tracks which rows are done."""

    def __init__(self, rows: SftRows, cfg: SftConfig, d: Dist, position: StreamPosition, pending: dict):
        self.rows = rows
        self.packer = Packer(cfg.packing.length, cfg.packing.max_open, cfg.packing.close_slack)
        self.ready: list[list[Sample]] = []
        self.dropped: Counter[str] = Counter()
        self.done: list[int] = []  # rows of this rank done since the last sync
        self.bad_in_a_row = 0
        # Rows that waited in sequences at checkpoint time go back into the same sequences (same rank
        # count); with another rank count they are simply not done yet and come back through the stream.
        same_world = pending.get("world") == d.world
        mine = pending.get(str(d.rank)) if same_world else None
        if mine:
            self.ready = [[self._restore(i) for i in b] for b in mine["ready"]]
            for b in mine["open"]:
                bin_ = Bin()
                for i in b:
                    bin_.add(self._restore(i))
                self.packer.open.append(bin_)
        held = [
            i
            for key, bins in pending.items()
            if key != "world" and same_world
            for group in bins.values()
            for b in group
            for i in b
        ]
        sampler = RankIndices(position, d.rank, d.world, exclude=held)
        self.stream = sample_stream(rows, sampler, cfg.data.num_workers, cfg.data.prefetch_factor)

    def _restore(self, index: int) -> Sample:
        item = self.rows[index]
        if isinstance(item, Dropped):  # the same row was fine when it was packed: data changed under us
            raise SftError(f"row {item.row_id} could be used before the restart but now fails: {item.detail}")
        return item

    def next_sequence(self) -> PackedBatch:
        while not self.ready:
            item = next(self.stream)
            if isinstance(item, Dropped) or not self.packer.fits(item):
                self.dropped[item.reason if isinstance(item, Dropped) else "too_long"] += 1
                self.done.append(item.index)
                self.bad_in_a_row += 1
                if self.bad_in_a_row > self.rows.n_rows:
                    raise SftError(f"no row of the input can be trained on (dropped: {dict(self.dropped)})")
                continue
            self.bad_in_a_row = 0
            self.ready.extend(self.packer.add(item))
        return pack(self.ready.pop(0))

    def pending(self) -> dict[str, list[list[int]]]:
        return {"ready": [[s.index for s in b] for b in self.ready], "open": self.packer.pending()}


class NextPacks:
    """The next step's packs, made on one background thread while the device computes this step.

    A queue of one step: :meth:`request` starts making the next ``n`` packs (samples from the loader's
    workers, packing, page-locked copies when ``pin``), :meth:`take` waits for them. The feed is only ever
    used by one thread at a time; the trainer requests no step ahead of a checkpoint, so what a checkpoint
    records of the feed is exactly what the steps trained. ``facts``: what the MFU's FLOP count needs of the
    packs :meth:`take` returned last (``paravt_core.train.flops``), read here from their host tensors, off
    the step's thread."""

    def __init__(self, feed: Feed, n: int, pin: bool):
        self.feed, self.n, self.pin = feed, n, pin
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sft-packs")
        self._next: Future | None = None
        self.facts: list[PackFacts] = []

    def _make(self) -> tuple[list[PackedBatch], Counter[str], list[PackFacts]]:
        before = Counter(self.feed.dropped)
        seqs = [self.feed.next_sequence() for _ in range(self.n)]
        facts = [pack_facts(s) for s in seqs]
        if self.pin:
            seqs = [s.pin_memory() for s in seqs]
        return seqs, self.feed.dropped - before, facts

    def request(self) -> None:
        if self._next is None:
            self._next = self._pool.submit(self._make)

    def take(self) -> tuple[list[PackedBatch], Counter[str]]:
        """(this step's packs, the rows dropped while making them)."""
        self.request()
        future, self._next = self._next, None
        seqs, drops, self.facts = future.result()
        return seqs, drops

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    batches: list[PackedBatch],
    d: Dist,
    autocast: Any,
    max_grad_norm: float,
    new_drops: Counter[str],
) -> tuple[list[float], float]:
    """One optimizer step over ``batches`` (already on the device) -> (sums over ranks of [loss, target
    tokens, tokens, samples, packs, drops per reason...], the gradient norm before clipping).

    The host never waits inside: each micro-batch's loss is added to a device accumulator (float64, as the
    Python floats were), the step's target count reaches the device as a non-blocking copy (one all-reduce
    under torchrun), and the values come back once, in one read at the end of the step."""
    local = [float(sum(b.loss_tokens for b in batches)), float(sum(b.tokens for b in batches))]
    if d.sharded:  # the global target count, all-reduced on the device
        targets = d.sum_tensor(d.to_device(local[:1], torch.float32)).clamp(min=1.0).reshape(())
    else:
        targets = max(local[0], 1.0)
    device = batches[0].input_ids.device
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    for batch in batches:
        with record_function("sft/forward"), autocast:
            loss = model(batch)
        with record_function("sft/backward"):
            (loss * d.world / targets).backward()
        loss_sum += loss.detach()
    with record_function("sft/clip"):
        norm = clip_grads(model, max_grad_norm)
    with record_function("sft/optimizer"):
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    with record_function("sft/log"):
        counts = [*local, float(sum(len(b.lengths) for b in batches)), float(len(batches))]
        counts += [float(new_drops.get(r, 0)) for r in REASONS]
        sums = d.sum_tensor(torch.cat([loss_sum.reshape(1), d.to_device(counts)]))
        values = torch.cat([sums, norm.detach().to(torch.float64).reshape(1)]).tolist()  # the step's one read
    return values[:-1], values[-1]


# ------------------------------------------------------------------------------------------ loop


@dataclass
class TrainResult:
    records: list[dict[str, Any]]
    rows_used: int
    dropped: dict[str, int]
    final_uri: str
    resumed_from: str | None
    world: int


def _check_bad_rows(cfg: SftConfig, rows_used: int, dropped: Counter, final: bool) -> None:
    seen = rows_used + sum(dropped.values())
    if seen == 0 or (not final and seen < cfg.data.bad_gate_min_rows):
        return
    share = sum(dropped.values()) / seen
    if share > cfg.data.max_bad_fraction:
        reasons = ", ".join(f"{k}={v}" for k, v in sorted(dropped.items()))
        raise SftError(
            f"{sum(dropped.values())} of {seen} rows dropped ({share:.1%} > data.max_bad_fraction="
            f"{cfg.data.max_bad_fraction:.1%}): {reasons}",
            {"gate": "bad_rows", "rows_seen": seen, "rows_used": rows_used, "rows_dropped": dict(dropped)},
        )


def preflight_gate(cfg: SftConfig, messages: Any, row_ids: list[str]) -> None:
    """The bad-row gate on what is known before a model is loaded (:func:`scan_rows`): a run whose rows
    are mostly unusable fails in seconds, naming the reasons and a few rows, instead of after training."""
    bad = scan_rows(messages, row_ids)
    share = len(bad) / len(row_ids)
    if share <= cfg.data.max_bad_fraction:
        return
    counts = Counter(b.reason for b in bad)
    reasons = ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
    examples = "; ".join(f"row {b.row_id}: {b.reason}: {b.detail[:100]}" for b in bad[:3])
    raise SftError(
        f"{len(bad)} of {len(row_ids)} rows dropped before training ({share:.1%} > data.max_bad_fraction="
        f"{cfg.data.max_bad_fraction:.1%}): {reasons} (e.g. {examples}); fix the data or data.input",
        {
            "gate": "preflight",
            "rows_seen": len(row_ids),
            "rows_used": 0,
            "rows_dropped": dict(counts),
            "bad_rows": [{"row_id": b.row_id, "reason": b.reason, "detail": b.detail} for b in bad[:20]],
        },
    )


def train(
    cfg: SftConfig,
    log: Any = print,
    *,
    on_step: Callable[[int, dict[str, Any]], None] | None = None,
    save_checkpoints: bool = True,
) -> TrainResult:
    """Run (or resume) the SFT loop of ``cfg``; every rank calls it.

    ``on_step(step, record)``: called after each step (the GPU profile advances its profiler there);
    ``save_checkpoints=False``: no checkpoint and no final model (the profile measures steps only)."""
    d = setup_distributed(cfg.train.dist_timeout_s)
    staging = os.path.join(cfg.work_dir, f"rank{d.rank}")
    os.makedirs(staging, exist_ok=True)
    seed_everything(cfg.trainer.seed + d.rank)

    files = sft_files(cfg.data.input, cfg.data.include)  # the data gate before the model is loaded
    messages, row_ids = read_rows(files)
    preflight_gate(cfg, messages, row_ids)
    bf16 = cfg.model.bf16 and d.device.type == "cuda"
    opts = CoreOptions(
        freeze_vision=cfg.train.freeze_vision,
        mixed_precision=bf16,
        activation_checkpointing=cfg.model.gradient_checkpointing,
        compile_layers=cfg.train.compile_layers,
    )

    def wrap(inner: Any) -> PackedLoss:
        set_implementation(inner, cfg.model.attn_implementation, cfg.model.sdpa_backend)
        return PackedLoss(inner, always_run_vision=d.sharded, chunk=cfg.train.logprob_chunk)

    model, loaded = build(cfg.model.uri, d, wrap, opts, dtype=torch.float32)
    if d.rank == 0:  # the SDPA kernels chosen, said once (cuDNN's plan per length)
        log(describe(cfg.model.attn_implementation, cfg.model.sdpa_backend, d.device.type))
    # the recipe's dtype: a bf16 recipe's final is bf16 (what the server serves), whatever the masters' dtype
    save_dtype = torch.bfloat16 if cfg.model.bf16 else torch.float32
    model.train()
    optimizer = make_optimizer(model, cfg)
    scheduler = make_scheduler(optimizer, cfg)

    spec = MediaSpec(**cfg.media.model_dump())
    rows = SftRows(messages, row_ids, loaded.processor, loaded.config, spec, cfg.data.seed)

    resumed_from = checkpoint.latest_complete(cfg.output)
    position, pending, records = StreamPosition(), {}, []
    rows_used, dropped, start, state = 0, Counter(), 0, {}
    if resumed_from is not None:
        state = checkpoint.load(resumed_from, model, optimizer, staging_root=staging, scheduler=scheduler)
        if state["n_rows"] != rows.n_rows or state["data_seed"] != cfg.data.seed:
            raise SftError(
                f"checkpoint {resumed_from} was written for {state['n_rows']} rows with data.seed="
                f"{state['data_seed']}, this run has {rows.n_rows} rows and seed {cfg.data.seed}: use a new "
                "output or the same data"
            )
        start, records = state["step"], state["metrics"]
        position = StreamPosition.from_dict(state["position"])
        pending, rows_used, dropped = state["pending"], state["rows_used"], Counter(state["dropped"])
        if d.rank == 0:
            log(
                f"resuming from {resumed_from} (step {start}, world size {state['pending']['world']} -> {d.world})"
            )
    feed = Feed(rows, cfg, d, position, pending)

    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16) if bf16 and not d.sharded else contextlib.nullcontext()
    )
    tracker, per_token = _tracker(cfg, d, model, start, state.get("tracking"))
    shapes = model_shapes(loaded.config)
    packs = NextPacks(feed, cfg.trainer.grad_accum, pin=d.device.type == "cuda")
    progress = _progress(d.rank == 0, cfg, start)
    try:
        for step in range(start + 1, cfg.trainer.steps + 1):
            t0 = time.perf_counter()
            saves = save_checkpoints and (step % cfg.checkpoint.every == 0 or step == cfg.trainer.steps)
            with record_function("sft/data_wait"):
                seqs, new_drops = packs.take()
            lr = scheduler.get_last_lr()[0]
            with record_function("sft/h2d"):
                batches = [s.to(d.device) for s in seqs]
            if step < cfg.trainer.steps and not saves:  # a checkpoint records the feed as of this step
                packs.request()
            sums, norm = train_step(
                model, optimizer, scheduler, batches, d, autocast, cfg.trainer.max_grad_norm, new_drops
            )
            with record_function("sft/log"):
                for seq in seqs:
                    feed.done.extend(seq.indices)
                rows_used += int(sums[3])
                dropped.update({r: int(v) for r, v in zip(REASONS, sums[5:], strict=True) if v})
                elapsed = time.perf_counter() - t0
                record = {
                    "step": step,
                    "loss": sums[0] / max(sums[1], 1.0),
                    "lr": lr,
                    "grad_norm": norm,
                    "tokens": int(sums[2]),
                    "loss_tokens": int(sums[1]),
                    "sequences": int(sums[4]),
                    "tokens_per_s": sums[2] / elapsed,
                    "padding_share": 1.0 - sums[2] / (sums[4] * cfg.packing.length),
                    "rows_used": rows_used,
                    "rows_dropped": sum(dropped.values()),
                    "step_time_s": elapsed,
                }
                # model FLOPs of this rank's packs (recompute apart), from host facts: no device read
                flops = step_flops(
                    shapes,
                    packs.facts,
                    vision_trained=not cfg.train.freeze_vision,
                    checkpointing=cfg.model.gradient_checkpointing,
                )
                record["model_flops"], record["hardware_flops"] = flops.model, flops.hardware
                if d.device.type == "cuda":  # this rank's peak since the start (ranks are alike under FSDP)
                    record["peak_mem_gib"] = torch.cuda.max_memory_allocated(d.device) / 2**30
                records.append(record)
                parameters, world, peak = per_token
                tracker.log(
                    step,
                    sft_scalars(
                        record,
                        mfu(flops.model, elapsed, 1, peak),  # this rank's FLOPs over its own GPU
                        mfu_6n(record["tokens_per_s"], parameters, world, peak),
                    ),
                )
                _check_bad_rows(cfg, rows_used, dropped, final=False)
                if progress is not None:
                    progress.update(step, record)
            if saves:
                tracker.checkpoint()  # events up to this step are on the output before the checkpoint is
                _save(
                    cfg,
                    d,
                    feed,
                    position,
                    step,
                    model,
                    optimizer,
                    scheduler,
                    records,
                    rows_used,
                    dropped,
                    rows,
                    tracker.state(),
                )
            if on_step is not None:
                on_step(step, record)
            faults.check("sft", step)  # resilience tests: fail here once, like a preempted pod
    except BaseException:
        tracker.checkpoint()  # what was logged so far is on the output; a resumed run drops the uncheckpointed steps
        raise
    finally:
        packs.close()
        if progress is not None:
            progress.close()
    _check_bad_rows(cfg, rows_used, dropped, final=True)
    if not save_checkpoints:
        tracker.close()
        return TrainResult(records, rows_used, dict(dropped), "", resumed_from, d.world)
    final = checkpoint.save_final(
        cfg.output, model, loaded.processor, staging_root=staging, dtype=save_dtype, submodule="inner"
    )
    tracker.close(final)
    return TrainResult(records, rows_used, dict(dropped), final, resumed_from, d.world)


def _tracker(
    cfg: SftConfig, d: Dist, model: torch.nn.Module, start: int, state: dict | None
) -> tuple[Tracker, tuple[int, int, float]]:
    """Rank 0's tracker (the others: a disabled one) and what the MFU figures need besides the step's FLOPs:
    (parameters and world for ``mfu_6n``, the device's peak TFLOP/s: ``tracking.peak_tflops`` or the data
    sheet's by the device's name; 0 on a CPU: no MFU)."""
    tracker = Tracker.open(
        cfg.tracking,
        stage="sft",
        output=cfg.output,
        work_dir=os.path.join(cfg.work_dir, "tracking"),
        resume_step=start,
        last_step=cfg.trainer.steps,
        state=state,
        config=config_to_dict(cfg),
        enabled=d.rank == 0,
    )
    name = torch.cuda.get_device_name(d.device) if d.device.type == "cuda" else ""
    parameters = sum(p.numel() for p in model.parameters())  # global sizes, also of FSDP2's sharded DTensors
    return tracker, (parameters, d.world, peak_tflops(name, cfg.tracking.peak_tflops))


def _save(
    cfg, d, feed, position, step, model, optimizer, scheduler, records, rows_used, dropped, rows, tracking
) -> None:
    for done in d.gather(feed.done):
        position.mark(done)
    feed.done = []
    pending: dict[str, Any] = {str(r): p for r, p in enumerate(d.gather(feed.pending()))}
    pending["world"] = d.world
    state = {
        "step": step,
        "world_size": d.world,
        "position": position.to_dict(),
        "pending": pending,
        "rows_used": rows_used,
        "dropped": dict(dropped),
        "n_rows": rows.n_rows,
        "data_seed": cfg.data.seed,
        "metrics": records,
        "tracking": tracking,  # the tracker runs a resumed run continues (the MLflow run id)
    }
    staging = os.path.join(cfg.work_dir, f"rank{d.rank}")
    checkpoint.save(
        cfg.output,
        step,
        model,
        optimizer,
        state,
        staging_root=staging,
        keep_last=cfg.checkpoint.keep_last,
        scheduler=scheduler,
    )


class _Bar:
    """Rank 0's progress bar: step, loss, tokens/s."""

    def __init__(self, total: int, start: int):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        from paravt_core.stage import console

        self.progress = Progress(
            TextColumn("sft"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeRemainingColumn(),
            console=console,
        )
        self.task = self.progress.add_task("sft", total=total, completed=start, info="")
        self.progress.start()

    def update(self, step: int, record: dict[str, Any]) -> None:
        info = f"loss {record['loss']:.4f}  {record['tokens_per_s']:.0f} tok/s  lr {record['lr']:.2e}"
        self.progress.update(self.task, completed=step, info=info)

    def close(self) -> None:
        self.progress.stop()


class _Lines:
    """Rank 0's progress where stderr is not a terminal (pod logs): plain lines (``tracking.progress``)."""

    def __init__(self, cfg: SftConfig, start: int):
        t = cfg.tracking
        self.lines = StepProgress("sft", cfg.trainer.steps, start, t.log_every, t.progress_every_s)

    def update(self, step: int, record: dict[str, Any]) -> None:
        self.lines.update(step, sft_numbers(record))

    def close(self) -> None:
        pass


def _progress(enabled: bool, cfg: SftConfig, start: int) -> _Bar | _Lines | None:
    if not enabled:
        return None
    return _Bar(cfg.trainer.steps, start) if is_terminal() else _Lines(cfg, start)


__all__ = ["Dist", "SftDataError", "SftError", "TrainResult", "setup_distributed", "train"]
