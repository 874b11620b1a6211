"""Decoupled PPO policy loss of PARA-GRPO (docs/method.md §5). Pure tensor function: no I/O, no distributed.

Per trained token t (``mask`` = 1), with logp from the current weights (theta), the proximal policy
(prox: the weights at the start of this step) and the behaviour policy (behav: what sampled the token):

    ratio_t = exp(logp_theta - logp_prox)
    pg_t    = max(-A_t * ratio_t, -A_t * clip(ratio_t, 1 - eps, 1 + eps))
    w_t     = exp(logp_prox - logp_behav)                 (behaviour importance weight)
    keep_t  = w_t <= cap                                  (tokens too far off-policy are dropped)
    loss    = sum_t mask_t * keep_t * w_t * pg_t / n_tokens

``n_tokens`` is the number of trained tokens of the whole global batch (dropped ones included): a global
token mean, so a sequence weighs by its length and micro-batches / ranks add up to the same loss. No
entropy bonus. With synchronous rollouts prox = behav up to numerics, so w = 1 and this is GRPO's
clipped loss.
"""

from __future__ import annotations

import torch

STATS = ("clip_fraction", "dropped_fraction", "approx_kl", "behav_kl", "ratio_mean")


def decoupled_ppo_loss(
    logp: torch.Tensor,
    prox_logp: torch.Tensor,
    behav_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_eps: float = 0.2,
    behav_weight_cap: float | None = 5.0,
    n_tokens: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """(scalar loss, statistics). All inputs [B, T]; ``n_tokens`` defaults to ``mask.sum()``."""
    loss, sums = decoupled_ppo_terms(
        logp,
        prox_logp,
        behav_logp,
        advantages,
        mask,
        clip_eps=clip_eps,
        behav_weight_cap=behav_weight_cap,
        n_tokens=n_tokens,
    )
    return loss, stats_of(sums.tolist())


def stats_of(sums: list[float]) -> dict[str, float]:
    """The statistics from :func:`decoupled_ppo_terms`' sums (read back): each a mean over trained tokens."""
    count = max(sums[-1], 1.0)
    return {**{k: v / count for k, v in zip(STATS, sums[:-1], strict=True)}, "tokens": sums[-1]}


def decoupled_ppo_terms(
    logp: torch.Tensor,
    prox_logp: torch.Tensor,
    behav_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_eps: float = 0.2,
    behav_weight_cap: float | None = 5.0,
    n_tokens: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(scalar loss, float64 sums over trained tokens of [clipped, dropped, logp - prox, prox - behav, ratio,
    1]) left on the loss's device: nothing is read back when ``n_tokens`` is given (the learner's step reads
    the sums of all its passes at once)."""
    m = mask.to(torch.bool)
    prox = prox_logp.detach()
    behav = behav_logp.detach()
    adv = advantages.detach()
    ratio = torch.where(m, torch.exp(logp - prox), torch.zeros_like(logp))
    clipped = ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps)
    pg_unclipped = -adv * ratio
    pg_clipped = -adv * clipped
    pg = torch.maximum(pg_unclipped, pg_clipped)

    weight = torch.exp(prox - behav)
    keep = m if behav_weight_cap is None else m & (weight <= behav_weight_cap)
    weight = torch.where(keep, weight, torch.zeros_like(weight))
    total_tokens = float(m.sum()) if n_tokens is None else float(n_tokens)
    loss = (pg * weight).sum() / max(total_tokens, 1.0)

    with torch.no_grad():
        parts = [
            ((pg_clipped > pg_unclipped) & m).sum(),
            (m & ~keep).sum(),
            ((logp - prox) * m).sum(),
            ((prox - behav) * m).sum(),
            (ratio * m).sum(),
            m.sum(),
        ]
        sums = torch.stack([x.to(torch.float64) for x in parts])
    return loss, sums
