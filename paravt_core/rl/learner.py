"""The PARA-GRPO learner step: episodes -> training sequences -> log-probs -> advantages -> loss -> AdamW.

A training sequence is one episode's main-agent ``Trace`` taken as it is: the exact token ids, the loss mask
(1 only on main-agent generated tokens), the behaviour log-probs recorded at sampling time and the very
pixels the rollout encoded (docs/method.md §3: identical frames for rollout and learner). Nothing is re-rendered.
With ``agent.subagent.train`` each sub-agent trace is a sequence of its own that carries its episode's
advantage (the group statistics still count each episode once).

Per step: log-probs of every sequence under the current weights before the update (prox) and under the
frozen reference, both at the sampling temperature (log_softmax(logits / T)); the advantages and the
decoupled PPO loss of ``advantages.py`` / ``loss.py``; gradients accumulated one sequence at a time with the
loss normalized by the step's total trained tokens (a global token mean); grad-norm clip; one AdamW step.

Sequences are packed like SFT (``paravt_core.sft.packing``: each keeps its own M-RoPE ids, attention is
block-diagonal, no sample sees another) into forward passes of at most ``pack_tokens`` tokens; only the
trained positions go through ``lm_head``.

Model preparation comes from the training core shared with SFT (``paravt_core.train``): the vision tower frozen
(``train.freeze_vision``), activation checkpointing with torch's wrapper on every decoder layer (it recomputes
in the backward although the root stays in ``eval()`` mode: no dropout, so prox and the trained forward see
the same function), log-probs through ``lm_head`` in chunks of positions (``train.logprob_chunk``; no
full-vocabulary float32 logits), and under ``torchrun`` FSDP2 for the policy (bf16 compute over float32
master weights and float32 gradient reductions when ``dtype`` is bfloat16 on GPUs) and for the frozen
reference (sharded in its own dtype: never a full copy per rank).

Memory rule for long episodes: a sequence longer than ``pack_tokens`` is refused and counted
(``skipped_too_long``): every forward pass stays within the memory plan measured for ``pack_tokens``.

Every rank holds the whole step's
samples; rank r trains sequences r, r + N, ...; prox / reference log-probs are all-gathered so that the
advantages (group and batch statistics) are those of the whole batch; the loss is divided by the global
trained-token count and multiplied by N (FSDP averages gradients over ranks), which makes the update that of
one process on the whole batch. Ranks run the same number of forward passes (padding with zero-weight ones)
because FSDP's collectives run in every forward and backward.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from paravt_core.agent.segments import Trace
from paravt_core.config import DEFAULT_SDPA_BACKEND, AdvantageConfig, PolicyLossConfig, SdpaBackend
from paravt_core.rl.config import OptimConfig
from paravt_core.sft.packing import IGNORE, PackedBatch, encode_media, mrope_position_ids, pack, target_hidden
from paravt_core.sft.packing import Sample as PackSample
from paravt_core.train.attention import describe, set_implementation
from paravt_core.train.dist import Dist
from paravt_core.train.fsdp import CoreOptions, assemble, build, clip_grads, make_adamw
from paravt_core.train.logprobs import target_logprobs
from paravt_core.train.media import require_media_path

from .advantages import sequence_advantages, token_advantages, zero_groups
from .loss import STATS, decoupled_ppo_terms, stats_of
from .rollout import Sample


@dataclass
class TrainSequence:
    input_ids: torch.Tensor  # [L] long
    loss_mask: torch.Tensor  # [L] float, 1 on trained tokens
    behav_logp: torch.Tensor  # [L] float, behaviour log-probs (0 off the mask)
    mm_token_type_ids: torch.Tensor  # [L] long: 0 text, 1 image, 2 video
    pixel_values: torch.Tensor | None
    image_grid_thw: torch.Tensor | None

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


def trace_sequence(trace: Trace, image_token_id: int, video_token_id: int | None) -> TrainSequence:
    """A main-agent or sub-agent trace as a training sequence (its tokens, mask, log-probs, pixels)."""
    ids = torch.tensor(trace.token_ids, dtype=torch.long)
    types = torch.zeros_like(ids)
    types[ids == image_token_id] = 1
    if video_token_id is not None:
        types[ids == video_token_id] = 2
    return TrainSequence(
        input_ids=ids,
        loss_mask=torch.tensor(trace.loss_mask, dtype=torch.float32),
        behav_logp=torch.tensor(trace.logprobs, dtype=torch.float32),
        mm_token_type_ids=types,
        pixel_values=trace.pixel_values,
        image_grid_thw=trace.image_grid_thw,
    )


def vision_tokens_ok(config: Any, seq: TrainSequence) -> bool:
    """False when the model itself generated image / video placeholder tokens: the forward pass would try
    to put image features there (a random or broken policy does this; such a sample is skipped)."""
    merge = int(config.vision_config.spatial_merge_size) ** 2
    pads = int((seq.input_ids == config.image_token_id).sum())
    expected = 0 if seq.image_grid_thw is None else int(seq.image_grid_thw.prod(dim=-1).sum()) // merge
    video = getattr(config, "video_token_id", None)
    return pads == expected and (video is None or not bool((seq.input_ids == video).any()))


def pack_sample(config: Any, seq: TrainSequence) -> PackSample:
    """The SFT packer's view of a training sequence: labels on the trained tokens, its own M-RoPE ids."""
    labels = torch.where(seq.loss_mask > 0, seq.input_ids, torch.full_like(seq.input_ids, IGNORE))
    return PackSample(
        input_ids=seq.input_ids,
        labels=labels,
        mm_token_type_ids=seq.mm_token_type_ids,
        position_ids=mrope_position_ids(config, seq.input_ids, seq.mm_token_type_ids, seq.image_grid_thw),
        pixel_values=seq.pixel_values,
        image_grid_thw=seq.image_grid_thw,
    )


class PolicyLogprobs(torch.nn.Module):
    """``forward(batch, temperature)``: log p(token_t | its own tokens_<t) at ``temperature`` of every position
    of the packed ``batch`` ([tokens], 0 where there is no trained target).

    The root module sharded with FSDP2 (like SFT's ``PackedLoss``: everything the forward runs happens inside
    it); ``always_run_vision`` under FSDP (see ``encode_media``). State-dict keys: ``inner.`` + the model's.
    """

    def __init__(self, inner: torch.nn.Module, always_run_vision: bool = False, chunk: int = 1024):
        super().__init__()
        require_media_path(inner)
        self.inner = inner
        self.always_run_vision = always_run_vision
        self.chunk = chunk

    def forward(self, batch: PackedBatch, temperature: float) -> torch.Tensor:
        encoded, zero = encode_media(self.inner, batch, always=self.always_run_vision)
        keep, hidden = target_hidden(self.inner, batch, encoded)
        picked = target_logprobs(  # position p predicts token p + 1
            hidden,
            self.inner.lm_head.weight,
            batch.targets[0][keep],
            temperature=max(temperature, 1e-6),
            chunk=self.chunk,
        )
        full = torch.zeros(batch.tokens, dtype=picked.dtype, device=picked.device)
        return full.index_put((keep + 1,), picked) + zero


def packed_logprobs(root: PolicyLogprobs, batch: PackedBatch, temperature: float) -> list[torch.Tensor]:
    """Per packed sample, its trained tokens' log-probs under ``root`` ([L_i] each, 0 elsewhere), on the host."""
    return [part.cpu() for part in torch.split(device_logprobs(root, batch, temperature), batch.lengths)]


def device_logprobs(root: PolicyLogprobs, batch: PackedBatch, temperature: float) -> torch.Tensor:
    """:func:`packed_logprobs` left on the device, the samples one after the other ([tokens]): no read-back."""
    param = next(root.parameters())
    return root(batch.to(param.device, dtype=param.dtype), temperature)


def to_host(parts: list[torch.Tensor]) -> list[torch.Tensor]:
    """Device tensors to the host in one copy (one wait for the device instead of one per tensor)."""
    if not parts:
        return []
    return list(torch.split(torch.cat(parts).cpu(), [int(p.shape[0]) for p in parts]))


def pack_groups(lengths: Sequence[int], limit: int) -> list[list[int]]:
    """Consecutive indices grouped so that each group's total length stays within ``limit`` (a longer
    sequence gets a group of its own)."""
    groups: list[list[int]] = []
    total = 0
    for i, n in enumerate(lengths):
        if groups and total + n <= limit:
            groups[-1].append(i)
            total += n
        else:
            groups.append([i])
            total = n
    return groups


def _pad(rows: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    out = torch.zeros(len(rows), width, dtype=rows[0].dtype)
    for i, row in enumerate(rows):
        out[i, : row.shape[0]] = row
    return out


_CKPT_PREFIX = "_checkpoint_wrapped_module."  # torch's activation-checkpoint wrapper in parameter names


def _cast(tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    return tensor.to(dtype) if dtype is not None and tensor.is_floating_point() else tensor


def state_checksum(state: dict[str, torch.Tensor]) -> str:
    """SHA-256 over every tensor of a state dict (sorted keys): equal weights <=> equal checksums."""
    digest = hashlib.sha256()
    for key in sorted(state):
        _digest(digest, key, state[key])
    return digest.hexdigest()


def _digest(digest: Any, key: str, tensor: torch.Tensor) -> None:
    host = tensor.detach().to("cpu").contiguous()
    digest.update(key.encode())
    digest.update(host.view(torch.uint8).numpy().tobytes() if host.numel() else b"")


DEFAULT_ATTENTION = "packed_sdpa"  # each packed sample's own causal block (paravt_core.train.attention)


def _wrapper(d: Dist, logprob_chunk: int, attn_implementation: str, sdpa_backend: SdpaBackend) -> Any:
    """``inner -> PolicyLogprobs(inner)`` with the language model's attention set to ``attn_implementation``
    (its SDPA calls under ``sdpa_backend`` with ``packed_sdpa``)."""

    def wrap(inner: Any) -> PolicyLogprobs:
        set_implementation(inner, attn_implementation, sdpa_backend)
        return PolicyLogprobs(inner, always_run_vision=d.sharded, chunk=logprob_chunk)

    return wrap


class Learner:
    """``model`` / ``reference``: Hugging Face models (prepared and, under torchrun, sharded in place here) or
    ``PolicyLogprobs`` roots already built by :meth:`from_uris` / ``paravt_core.train.fsdp.build``."""

    def __init__(
        self,
        model: Any,
        reference: Any,
        *,
        temperature: float,
        advantage: AdvantageConfig,
        loss: PolicyLossConfig,
        optim: OptimConfig,
        pack_tokens: int = 8192,
        dist: Dist | None = None,
        opts: CoreOptions | None = None,
        logprob_chunk: int = 1024,
        attn_implementation: str = DEFAULT_ATTENTION,
        sdpa_backend: SdpaBackend = DEFAULT_SDPA_BACKEND,
    ):
        self.dist = d = dist or Dist()
        opts = opts or CoreOptions()

        wrap = _wrapper(d, logprob_chunk, attn_implementation, sdpa_backend)
        self.root = model if isinstance(model, PolicyLogprobs) else assemble(model, d, wrap, opts)
        # frozen; under torchrun sharded like the policy (its own dtype, no float32 masters)
        self.reference = (
            reference
            if isinstance(reference, PolicyLogprobs)
            else assemble(reference, d, wrap, opts, trainable=False)
        )
        self.model = self.root.inner  # the Hugging Face policy
        self.root.eval()  # no dropout: prox and the trained forward see the same function
        self.reference.eval()
        # one process on a GPU with mixed precision: bf16 autocast over the float32 weights (like SFT)
        single_bf16 = opts.mixed_precision and not d.sharded and d.device.type == "cuda"
        self.autocast = (
            (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if single_bf16 else contextlib.nullcontext
        )
        self.pack_tokens = pack_tokens
        self.temperature = temperature if temperature > 0 else 1.0
        self.advantage, self.loss_cfg, self.optim_cfg = advantage, loss, optim
        self.optimizer = make_adamw(self.root, optim.lr, optim.weight_decay, tuple(optim.betas))
        self.params = [p for g in self.optimizer.param_groups for p in g["params"]]
        config = self.model.config
        self.image_token_id = config.image_token_id
        self.video_token_id = getattr(config, "video_token_id", None)
        self.attention = describe(attn_implementation, sdpa_backend, d.device.type)
        if d.rank == 0:  # the SDPA kernels chosen, said once (cuDNN's plan per sample length)
            from paravt_core.stage import console

            console.print(f"rl: {self.attention}", highlight=False)

    @classmethod
    def from_uris(
        cls,
        policy_uri: str,
        reference_uri: str,
        d: Dist,
        opts: CoreOptions,
        *,
        dtype: torch.dtype,
        logprob_chunk: int = 1024,
        **kwargs: Any,
    ) -> tuple[Learner, Any]:
        """(the learner, the policy's ``Loaded``: processor, config and — in one process — the model).

        Loaded within host memory (``paravt_core.train.fsdp.build``); the policy's parameters are float32
        masters when ``opts.mixed_precision``, else ``dtype``; the reference is kept in ``dtype``."""

        attention = (
            kwargs.get("attn_implementation", DEFAULT_ATTENTION),
            kwargs.get("sdpa_backend", DEFAULT_SDPA_BACKEND),
        )
        wrap = _wrapper(d, logprob_chunk, *attention)
        master = torch.float32 if opts.mixed_precision else dtype
        root, loaded = build(policy_uri, d, wrap, opts, dtype=master)
        reference, _ = build(reference_uri, d, wrap, opts, dtype=dtype, trainable=False)
        learner = cls(root, reference, dist=d, opts=opts, logprob_chunk=logprob_chunk, **kwargs)
        return learner, loaded

    def _packs(self, seqs: list[TrainSequence], mine: list[int]) -> tuple[list[list[int]], list[PackedBatch]]:
        """This rank's packed forward passes (global sequence indices per pass), padded to the largest
        count over ranks with zero-weight repeats of its first pass (FSDP: same number of passes)."""
        config = self.model.config
        groups = [[mine[i] for i in g] for g in pack_groups([len(seqs[i]) for i in mine], self.pack_tokens)]
        packs = [pack([pack_sample(config, seqs[i]) for i in g]) for g in groups]
        pad = (
            packs[0] if packs else pack([pack_sample(config, seqs[0])])
        )  # a rank with no sequence of its own
        most = max(self.dist.gather(len(packs)))
        return groups, packs + [pad] * (most - len(packs))

    def step(self, samples: Sequence[Sample]) -> dict[str, float]:
        """One optimizer step on the trainable samples (every rank passes the same samples); returns the
        learner metrics of the whole batch."""
        started = time.perf_counter()
        d = self.dist
        config = self.model.config
        episodes, seqs, skipped_vision, too_long = [], [], 0, 0
        for sample in samples:
            if not sample.trainable:
                continue
            main = trace_sequence(sample.episode.main, self.image_token_id, self.video_token_id)
            if not vision_tokens_ok(config, main):
                skipped_vision += 1
                continue
            if len(main) > self.pack_tokens:  # beyond the memory plan of one forward pass: refused, counted
                too_long += 1
                continue
            episodes.append(sample)
            seqs.append(main)
        if not seqs:
            return {
                "trained_sequences": 0.0,
                "skipped_vision_tokens": float(skipped_vision),
                "skipped_too_long": float(too_long),
            }
        a = self.advantage
        # Steps 1-2 on episodes: the group statistics count each rollout once.
        episode_adv, _ = sequence_advantages(
            torch.tensor([s.reward.total for s in episodes], dtype=torch.float32),
            torch.tensor([s.group for s in episodes]),
            bias=a.reward_bias,
            scale=a.reward_scale,
            clip=a.reward_clip,
            group_eps=a.group_eps,
        )
        owners = list(range(len(episodes)))
        for e, sample in enumerate(episodes):  # sub-agent generations, when subagent.train is on
            for trace in sample.episode.subagent_traces:
                if sum(trace.loss_mask) == 0:
                    continue
                sub = trace_sequence(trace, self.image_token_id, self.video_token_id)
                if len(sub) > self.pack_tokens:
                    too_long += 1
                elif vision_tokens_ok(config, sub):
                    seqs.append(sub)
                    owners.append(e)
                else:
                    skipped_vision += 1
        mine = list(range(d.rank, len(seqs), d.world))
        groups, packs = self._packs(seqs, mine)
        prox_of: dict[int, torch.Tensor] = {}
        ref_of: dict[int, torch.Tensor] = {}
        passes: list[torch.Tensor] = []  # per pass: policy then reference log-probs, on the device
        with torch.no_grad(), self.autocast():
            for batch in packs:
                passes.append(device_logprobs(self.root, batch, self.temperature))
                # the sharded reference runs on padding passes too: its collectives run on every rank
                passes.append(device_logprobs(self.reference, batch, self.temperature))
        host = to_host(passes)  # one read for all passes
        for n, group in enumerate(groups):
            lengths = packs[n].lengths
            prox_of.update(zip(group, torch.split(host[2 * n], lengths), strict=True))
            ref_of.update(zip(group, torch.split(host[2 * n + 1], lengths), strict=True))
        for other in d.gather((prox_of, ref_of)):  # every rank: the log-probs of the whole batch
            prox_of.update(other[0])
            ref_of.update(other[1])
        width = max(len(s) for s in seqs)
        mask = _pad([s.loss_mask for s in seqs], width)
        behav = _pad([s.behav_logp for s in seqs], width)
        prox_t = _pad([prox_of[i] for i in range(len(seqs))], width)
        ref_t = _pad([ref_of[i] for i in range(len(seqs))], width)
        adv = token_advantages(
            episode_adv[torch.tensor(owners)],
            behav,
            ref_t,
            mask,
            kl_ctl=a.kl_ctl,
            kl_clamp=a.kl_clamp,
            batch_norm=a.batch_norm,
            batch_eps=a.batch_eps,
        )
        n_tokens = float(mask.sum())  # the global count: every rank sees every sequence's mask
        self.optimizer.zero_grad(set_to_none=True)
        device = next(self.root.parameters()).device
        pin = device.type == "cuda"
        losses, sums = [], []  # per trained pass, on the device: read once after the loop
        for n, batch in enumerate(packs):
            rows = groups[n] if n < len(groups) else groups[0] if groups else [0]
            with self.autocast():
                logp = device_logprobs(self.root, batch, self.temperature)[None]  # [1, L_pack]

            def flat(t: torch.Tensor, rows: list[int] = rows, batch: PackedBatch = batch) -> torch.Tensor:
                host = torch.cat([t[i, :n] for i, n in zip(rows, batch.lengths, strict=True)])[None]
                return (host.pin_memory() if pin else host).to(device, non_blocking=True)

            loss, terms = decoupled_ppo_terms(
                logp,
                flat(prox_t),
                flat(behav),
                flat(adv),
                flat(mask),
                clip_eps=self.loss_cfg.clip_eps,
                behav_weight_cap=self.loss_cfg.behav_weight_cap,
                n_tokens=n_tokens,
            )
            if n >= len(groups):  # a padding pass: the same collectives, no contribution
                (0.0 * loss).backward()
                continue
            (loss * d.world).backward()  # FSDP averages gradients over ranks: the sum is the global mean
            losses.append(loss.detach().to(torch.float64).reshape(1))
            sums.append(terms)
        norm = clip_grads(self.root, self.optim_cfg.grad_clip)
        self.optimizer.step()
        # the step's one read: every pass's loss and statistic sums, and the norm
        values = torch.cat([*losses, *sums, norm.detach().to(torch.float64).reshape(1)]).tolist()
        grad_norm = values[-1]
        keys = ("loss", "clip_fraction", "dropped_fraction", "approx_kl", "behav_kl")
        totals = dict.fromkeys(keys, 0.0)
        width = len(STATS) + 1
        for k, value in enumerate(values[: len(losses)]):  # the same float arithmetic, in the same order
            totals["loss"] += value
            stats = stats_of(values[len(losses) + k * width : len(losses) + (k + 1) * width])
            for key in keys[1:]:
                totals[key] += stats[key] * stats["tokens"] / max(n_tokens, 1.0)
        reduced = d.sum([totals[k] for k in keys] + [float(len(groups))])
        totals = dict(zip(keys, reduced[: len(keys)], strict=True))
        kl_ref = float(((behav - ref_t) * mask).sum()) / max(n_tokens, 1.0)
        return {
            **totals,
            "grad_norm": grad_norm,
            "kl_ref": kl_ref,
            "trained_sequences": float(len(seqs)),
            "skipped_vision_tokens": float(skipped_vision),
            "skipped_too_long": float(too_long),
            "trained_tokens": n_tokens,
            "forward_passes": reduced[-1],
            "subagent_sequences": float(len(seqs) - len(episodes)),
            "zero_advantage_groups": float(
                zero_groups(episode_adv, torch.tensor([s.group for s in episodes]))
            ),
            "learner_s": time.perf_counter() - started,
        }

    def weights(self, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """The full current weights with the model's own keys (what the rollout engine loads), floating ones
        in ``dtype`` (None: as kept); collective under FSDP, where only rank 0 receives them (the others get
        ``{}``). Sharded: one parameter at a time is gathered on the device and converted there, and only its
        ``dtype`` copy goes to rank 0's host - never the float32 model in host memory (8B: 16 GB in bf16,
        not 32 GB in float32 beside it). For a disk push or the in-process engine; the NCCL push streams
        :meth:`weight_buckets` instead (no host copy at all)."""
        if not self.dist.sharded:
            return {k: _cast(v.detach(), dtype).clone() for k, v in self.model.state_dict().items()}
        out = {}
        for name, tensor in self._state():  # the same order on every rank
            full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor  # all-gather (device)
            full = _cast(full.detach(), dtype)
            if self.dist.rank == 0:
                out[name] = full.to("cpu", copy=True)
            del full
        return out

    def _state(self) -> list[tuple[str, torch.Tensor]]:
        """The root's state (sharded DTensors under FSDP: nothing gathered) under the model's own keys."""
        return [
            (n.replace(_CKPT_PREFIX, "").removeprefix("inner."), t) for n, t in self.root.state_dict().items()
        ]

    def weight_buckets(
        self, max_bytes: int, dtype: torch.dtype | None = None, skip: set[str] | frozenset[str] = frozenset()
    ) -> tuple[int, Iterator[list[tuple[str, torch.Tensor]]]]:
        """The weights (all but ``skip``) for the NCCL push, bucket by bucket: (number of buckets, the
        buckets). Each bucket (at most ``max_bytes`` in ``dtype``, ``weight_sync.buckets``) is made when the
        iterator reaches it: its parameters gathered (``full_tensor``: an all-gather on the device, collective
        on every rank, which must iterate to the end too) and cast on the device, one at a time; rank 0 gets
        the device tensors (a parameter itself when nothing changes), the other ranks empty lists. Nothing goes
        to the host, and rank 0 holds one bucket beside its shards, not the model."""
        from .weight_sync import buckets

        plan = buckets([(n, t) for n, t in self._state() if n not in skip], max_bytes, dtype)
        return len(plan), self._gathered(plan, dtype)

    def _gathered(
        self, plan: list[list[tuple[str, torch.Tensor]]], dtype: torch.dtype | None
    ) -> Iterator[list[tuple[str, torch.Tensor]]]:
        lead = self.dist.rank == 0
        for bucket in plan:
            out = []
            for name, tensor in bucket:
                full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
                full = _cast(full.detach(), dtype)  # the float32 gather dropped as soon as it is cast
                if lead:
                    out.append((name, full))
                del full
            yield out

    def weights_checksum(self, dtype: torch.dtype | None = None) -> str | None:
        """``state_checksum(self.weights(dtype))`` without the full copy: one tensor at a time gathered, cast on
        the device and hashed on the host (collective; rank 0 gets the checksum, the others None)."""
        digest = hashlib.sha256()
        for name, tensor in sorted(self._state(), key=lambda kv: kv[0]):
            full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
            full = _cast(full.detach(), dtype)
            if self.dist.rank == 0:
                _digest(digest, name, full)
            del full
        return digest.hexdigest() if self.dist.rank == 0 else None

    def frozen_names(self) -> set[str]:
        """Names (the model's own keys) of the parameters that never change (e.g. the frozen vision tower)."""
        return {
            n.replace(_CKPT_PREFIX, "").removeprefix("inner.")
            for n, p in self.root.named_parameters()
            if not p.requires_grad
        }
