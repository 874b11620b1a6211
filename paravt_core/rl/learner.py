"""The PARA-GRPO learner step: episodes -> training sequences -> log-probs -> advantages -> loss -> AdamW.

A training sequence is one episode's main-agent ``Trace`` taken as it is: the exact token ids, the loss mask
(1 only on main-agent generated tokens), the behaviour log-probs recorded at sampling time and the very
pixels the rollout encoded (SPEC §3: identical frames for rollout and learner). Nothing is re-rendered.
With ``agent.subagent.train`` each sub-agent trace is a sequence of its own that carries its episode's
advantage (the group statistics still count each episode once).

Per step: log-probs of every sequence under the current weights before the update (prox) and under the
frozen reference, both at the sampling temperature (log_softmax(logits / T)); the advantages and the
decoupled PPO loss of ``advantages.py`` / ``loss.py``; gradients accumulated one sequence at a time with the
loss normalized by the step's total trained tokens (a global token mean); grad-norm clip; one AdamW step.

Sequences are packed like SFT (``paravt_core.sft.packing``: each keeps its own M-RoPE ids, attention is
block-diagonal, no sample sees another) into forward passes of at most ``pack_tokens`` tokens; only the
trained positions go through ``lm_head``.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from paravt_core.agent.segments import Trace
from paravt_core.config import AdvantageConfig, PolicyLossConfig
from paravt_core.rl.config import OptimConfig
from paravt_core.sft.packing import IGNORE, PackedBatch, mrope_position_ids, pack, target_logits
from paravt_core.sft.packing import Sample as PackSample

from .advantages import sequence_advantages, token_advantages, zero_groups
from .loss import decoupled_ppo_loss
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


def packed_logprobs(model: Any, batch: PackedBatch, temperature: float) -> list[torch.Tensor]:
    """Per packed sample, log p(token_t | its own tokens_<t) at ``temperature`` on its trained tokens
    ([L_i] each, 0 elsewhere). Only trained positions are projected to the vocabulary."""
    device = next(model.parameters()).device
    batch = batch.to(device, dtype=model.dtype)
    keep, logits = target_logits(model, batch, **batch.model_inputs())
    logp = torch.log_softmax(logits / max(temperature, 1e-6), dim=-1)
    picked = logp.gather(-1, batch.targets[0][keep, None]).squeeze(-1)  # position p predicts token p + 1
    full = torch.zeros(batch.tokens, dtype=picked.dtype, device=picked.device)
    full = full.index_put((keep + 1,), picked)
    return [part.cpu() for part in torch.split(full, batch.lengths)]


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


def state_checksum(state: dict[str, torch.Tensor]) -> str:
    """SHA-256 over every tensor of a state dict (sorted keys): equal weights <=> equal checksums."""
    digest = hashlib.sha256()
    for key in sorted(state):
        tensor = state[key].detach().to("cpu").contiguous()
        digest.update(key.encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


class Learner:
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
    ):
        self.model, self.reference = model, reference
        self.pack_tokens = pack_tokens
        self.temperature = temperature if temperature > 0 else 1.0
        self.advantage, self.loss_cfg, self.optim_cfg = advantage, loss, optim
        for p in reference.parameters():
            p.requires_grad_(False)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.params, lr=optim.lr, weight_decay=optim.weight_decay, betas=tuple(optim.betas)
        )
        config = model.config
        self.image_token_id = config.image_token_id
        self.video_token_id = getattr(config, "video_token_id", None)

    def step(self, samples: Sequence[Sample]) -> dict[str, float]:
        """One optimizer step on the trainable samples; returns the learner metrics."""
        started = time.perf_counter()
        config = self.model.config
        episodes, seqs, skipped_vision = [], [], 0
        for sample in samples:
            if not sample.trainable:
                continue
            main = trace_sequence(sample.episode.main, self.image_token_id, self.video_token_id)
            if not vision_tokens_ok(config, main):
                skipped_vision += 1
                continue
            episodes.append(sample)
            seqs.append(main)
        if not seqs:
            return {"trained_sequences": 0.0, "skipped_vision_tokens": float(skipped_vision)}
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
                if vision_tokens_ok(config, sub):
                    seqs.append(sub)
                    owners.append(e)
                else:
                    skipped_vision += 1
        self.model.eval()  # no dropout: prox and the trained forward see the same function
        packed = [pack_sample(self.model.config, s) for s in seqs]
        packs = [pack([packed[i] for i in g]) for g in pack_groups([len(s) for s in seqs], self.pack_tokens)]
        with torch.no_grad():
            prox = [lp for batch in packs for lp in packed_logprobs(self.model, batch, self.temperature)]
            ref = [lp for batch in packs for lp in packed_logprobs(self.reference, batch, self.temperature)]
        width = max(len(s) for s in seqs)
        mask = _pad([s.loss_mask for s in seqs], width)
        behav = _pad([s.behav_logp for s in seqs], width)
        prox_t, ref_t = _pad(prox, width), _pad(ref, width)
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
        n_tokens = float(mask.sum())
        self.optimizer.zero_grad(set_to_none=True)
        totals = {
            "loss": 0.0,
            "clip_fraction": 0.0,
            "dropped_fraction": 0.0,
            "approx_kl": 0.0,
            "behav_kl": 0.0,
        }
        at = 0
        for batch in packs:
            rows = range(at, at + len(batch.lengths))
            at += len(batch.lengths)
            logp = torch.cat(packed_logprobs(self.model, batch, self.temperature))[None]  # [1, L_pack]

            def flat(t: torch.Tensor, rows: range = rows, batch: PackedBatch = batch) -> torch.Tensor:
                return torch.cat([t[i, :n] for i, n in zip(rows, batch.lengths, strict=True)])[None]

            loss, stats = decoupled_ppo_loss(
                logp,
                flat(prox_t),
                flat(behav),
                flat(adv),
                flat(mask),
                clip_eps=self.loss_cfg.clip_eps,
                behav_weight_cap=self.loss_cfg.behav_weight_cap,
                n_tokens=n_tokens,
            )
            loss.backward()
            totals["loss"] += float(loss.detach())
            for key in ("clip_fraction", "dropped_fraction", "approx_kl", "behav_kl"):
                totals[key] += stats[key] * stats["tokens"] / max(n_tokens, 1.0)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.optim_cfg.grad_clip)
        self.optimizer.step()
        kl_ref = float(((behav - ref_t) * mask).sum()) / max(n_tokens, 1.0)
        return {
            **totals,
            "grad_norm": float(grad_norm),
            "kl_ref": kl_ref,
            "trained_sequences": float(len(seqs)),
            "skipped_vision_tokens": float(skipped_vision),
            "trained_tokens": n_tokens,
            "forward_passes": float(len(packs)),
            "subagent_sequences": float(len(seqs) - len(episodes)),
            "zero_advantage_groups": float(
                zero_groups(episode_adv, torch.tensor([s.group for s in episodes]))
            ),
            "learner_s": time.perf_counter() - started,
        }

    def weights(self) -> dict[str, torch.Tensor]:
        """A detached copy of the current weights (what the rollout engine loads)."""
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}
