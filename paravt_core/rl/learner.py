"""The PARA-GRPO learner step: episodes -> training sequences -> log-probs -> advantages -> loss -> AdamW.

A training sequence is one episode's main-agent ``Trace`` taken as it is: the exact token ids, the loss mask
(1 only on main-agent generated tokens), the behaviour log-probs recorded at sampling time and the very
pixels the rollout encoded (SPEC §3: identical frames for rollout and learner). Nothing is re-rendered.

Per step: log-probs of every sequence under the current weights before the update (prox) and under the
frozen reference, both at the sampling temperature (log_softmax(logits / T)); the advantages and the
decoupled PPO loss of ``advantages.py`` / ``loss.py``; gradients accumulated one sequence at a time with the
loss normalized by the step's total trained tokens (a global token mean); grad-norm clip; one AdamW step.

One unpadded sequence per forward pass for now: the SFT stage's packing (per-sample M-RoPE ids,
block-diagonal attention) is the planned replacement once it lands on main.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from paravt_core.config import AdvantageConfig, OptimConfig, PolicyLossConfig

from .advantages import compute_advantages
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
    reward: float
    group: int
    policy_version: int

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


def to_sequence(sample: Sample, image_token_id: int, video_token_id: int | None) -> TrainSequence:
    trace = sample.episode.main
    if trace is None:
        raise ValueError("episode has no main trace")
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
        reward=sample.reward.total,
        group=sample.group,
        policy_version=sample.policy_version,
    )


def sequence_logprobs(model: Any, seq: TrainSequence, temperature: float) -> torch.Tensor:
    """log p(token_t | tokens_<t) at ``temperature`` for every position ([L]; position 0 gets 0)."""
    device = next(model.parameters()).device
    inputs: dict[str, Any] = {
        "input_ids": seq.input_ids[None].to(device),
        "attention_mask": torch.ones(1, len(seq), dtype=torch.long, device=device),
        "mm_token_type_ids": seq.mm_token_type_ids[None].to(device),
    }
    if seq.pixel_values is not None:
        inputs["pixel_values"] = seq.pixel_values.to(device=device, dtype=model.dtype)
        inputs["image_grid_thw"] = seq.image_grid_thw.to(device)
    logits = model(**inputs).logits[0, :-1].float()  # [L-1, V]: logits[t] predicts token t+1
    logp = torch.log_softmax(logits / max(temperature, 1e-6), dim=-1)
    picked = logp.gather(-1, inputs["input_ids"][0, 1:, None]).squeeze(-1)  # [L-1]
    return torch.cat([picked.new_zeros(1), picked]).cpu()


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
    ):
        self.model, self.reference = model, reference
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
        self.merge = int(getattr(config.vision_config, "spatial_merge_size", 2)) ** 2

    def _vision_tokens_match(self, seq: TrainSequence) -> bool:
        """False when the model itself generated image / video placeholder tokens: the forward pass would
        try to put image features there (a random or broken policy does this; the sample is skipped)."""
        pads = int((seq.input_ids == self.image_token_id).sum())
        expected = (
            0 if seq.image_grid_thw is None else int(seq.image_grid_thw.prod(dim=-1).sum()) // self.merge
        )
        videos = 0 if self.video_token_id is None else int((seq.input_ids == self.video_token_id).sum())
        return pads == expected and videos == 0

    def step(self, samples: Sequence[Sample]) -> dict[str, float]:
        """One optimizer step on the trainable samples; returns the learner metrics."""
        started = time.perf_counter()
        usable = [s for s in samples if s.trainable]
        if not usable:
            return {"trained_sequences": 0.0, "learner_s": time.perf_counter() - started}
        seqs = [to_sequence(s, self.image_token_id, self.video_token_id) for s in usable]
        kept = [s for s in seqs if self._vision_tokens_match(s)]
        skipped_vision = len(seqs) - len(kept)
        seqs = kept
        if not seqs:
            return {"trained_sequences": 0.0, "skipped_vision_tokens": float(skipped_vision)}
        self.model.eval()  # no dropout: prox and the trained forward see the same function
        with torch.no_grad():
            prox = [sequence_logprobs(self.model, s, self.temperature) for s in seqs]
            ref = [sequence_logprobs(self.reference, s, self.temperature) for s in seqs]
        width = max(len(s) for s in seqs)
        mask = _pad([s.loss_mask for s in seqs], width)
        behav = _pad([s.behav_logp for s in seqs], width)
        prox_t, ref_t = _pad(prox, width), _pad(ref, width)
        rewards = torch.tensor([s.reward for s in seqs], dtype=torch.float32)
        groups = torch.tensor([s.group for s in seqs])
        a = self.advantage
        adv, adv_stats = compute_advantages(
            rewards,
            groups,
            behav,
            ref_t,
            mask,
            bias=a.reward_bias,
            scale=a.reward_scale,
            clip=a.reward_clip,
            group_eps=a.group_eps,
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
        for i, seq in enumerate(seqs):
            n = len(seq)
            logp = sequence_logprobs(self.model, seq, self.temperature)
            loss, stats = decoupled_ppo_loss(
                logp[None],
                prox_t[i : i + 1, :n],
                behav[i : i + 1, :n],
                adv[i : i + 1, :n],
                mask[i : i + 1, :n],
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
            "zero_advantage_groups": adv_stats["zero_advantage_groups"],
            "learner_s": time.perf_counter() - started,
        }

    def weights(self) -> dict[str, torch.Tensor]:
        """A detached copy of the current weights (what the rollout engine loads)."""
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}
