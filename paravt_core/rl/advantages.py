"""GRPO advantages of PARA-GRPO (docs/method.md §5). Pure tensor functions: no I/O, no engines, no distributed.

Shapes: B sequences (episodes), T token positions (padded), G groups. ``mask`` [B, T] is 1 exactly on
the trained (main-agent generated) tokens; prompt, tool-response and padding positions are 0 and get no
KL reward and no advantage.

1. shaped reward      R'_i = clip((R_i + bias) * scale, -clip, clip)                       [B]
2. group-normalized   A_i = (R'_i - mean_g) / (std_g + eps), std unbiased (n - 1); a group of one or of
                      equal rewards gives 0                                                 [B]
3. KL reward          k_it = -kl_ctl * clamp(logp_behav_it - logp_ref_it, -c, c) on mask     [B, T]
4. reward-to-go       A_it = A_i + sum_{t' >= t, mask} k_it'   (gamma = lambda = 1, no critic)  [B, T]
5. batch-normalized   A_it = (A_it - mu) / (sigma + eps) with mu, sigma the token-weighted mean and
                      (population) std over every masked token of the batch                 [B, T]
"""

from __future__ import annotations

import torch


def shape_rewards(rewards: torch.Tensor, bias: float = -0.2, scale: float = 10.0, clip: float = 20.0):
    """R' = clip((R + bias) * scale, -clip, clip). rewards: [B] -> [B]."""
    return ((rewards + bias) * scale).clamp(-clip, clip)


def group_normalize(values: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """(x - group mean) / (unbiased group std + eps). values, group_ids: [B] -> [B]."""
    values = values.to(torch.float64)
    _, inverse, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    n = counts.to(torch.float64)  # [G]
    sums = torch.zeros_like(n).index_add_(0, inverse, values)
    mean = sums / n  # [G]
    centered = values - mean[inverse]  # [B]
    sq = torch.zeros_like(n).index_add_(0, inverse, centered * centered)
    std = torch.where(n > 1, (sq / (n - 1).clamp(min=1)).sqrt(), torch.zeros_like(n))
    out = centered / (std[inverse] + eps)
    return torch.where(n[inverse] > 1, out, torch.zeros_like(out)).to(torch.float32)


def kl_rewards(
    behav_logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, kl_ctl: float, clamp: float = 10.0
) -> torch.Tensor:
    """-kl_ctl * clamp(logp_behav - logp_ref, -clamp, clamp) on masked tokens, 0 elsewhere. [B, T]."""
    kl = (behav_logp - ref_logp).clamp(-clamp, clamp)
    return -kl_ctl * kl * mask.to(kl.dtype)


def reward_to_go(seq_advantages: torch.Tensor, token_rewards: torch.Tensor, mask: torch.Tensor):
    """A_it = A_i + sum over masked t' >= t of token_rewards. seq [B], tokens/mask [B, T] -> [B, T]."""
    m = mask.to(token_rewards.dtype)
    r = token_rewards * m
    later = torch.flip(torch.cumsum(torch.flip(r, dims=[1]), dim=1), dims=[1])  # inclusive suffix sums
    return (seq_advantages[:, None] + later) * m


def batch_normalize(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Token-weighted (x - mean) / (std + eps) over masked entries; unmasked entries -> 0. [B, T]."""
    m = mask.to(torch.float64)
    x = values.to(torch.float64)
    count = m.sum().clamp(min=1.0)
    mean = (x * m).sum() / count
    var = (((x - mean) * m) ** 2).sum() / count
    return ((x - mean) / (var.sqrt() + eps) * m).to(values.dtype)


def sequence_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    bias: float = -0.2,
    scale: float = 10.0,
    clip: float = 20.0,
    group_eps: float = 1e-5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Steps 1-2 on episodes: (group-normalized advantage [B], shaped reward [B])."""
    shaped = shape_rewards(rewards.to(torch.float32), bias, scale, clip)
    return group_normalize(shaped, group_ids, group_eps), shaped


def token_advantages(
    seq_advantages: torch.Tensor,
    behav_logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    kl_ctl: float = 0.01,
    kl_clamp: float = 10.0,
    batch_norm: bool = True,
    batch_eps: float = 1e-5,
) -> torch.Tensor:
    """Steps 3-5 on training sequences: seq [S], tokens [S, T] -> advantages [S, T]. A sub-agent sequence
    carries the advantage of its episode."""
    kl = kl_rewards(behav_logp.float(), ref_logp.float(), mask, kl_ctl, kl_clamp)
    adv = reward_to_go(seq_advantages, kl, mask)
    return batch_normalize(adv, mask, batch_eps) if batch_norm else adv


def compute_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    behav_logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    bias: float = -0.2,
    scale: float = 10.0,
    clip: float = 20.0,
    group_eps: float = 1e-5,
    kl_ctl: float = 0.01,
    kl_clamp: float = 10.0,
    batch_norm: bool = True,
    batch_eps: float = 1e-5,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Token advantages [B, T] (one sequence per episode), and statistics for the metrics (steps 1-5)."""
    seq, shaped = sequence_advantages(
        rewards, group_ids, bias=bias, scale=scale, clip=clip, group_eps=group_eps
    )
    adv = token_advantages(
        seq,
        behav_logp,
        ref_logp,
        mask,
        kl_ctl=kl_ctl,
        kl_clamp=kl_clamp,
        batch_norm=batch_norm,
        batch_eps=batch_eps,
    )
    m = mask.to(torch.float32)
    tokens = float(m.sum())
    stats = {
        "shaped_reward_mean": float(shaped.mean()) if shaped.numel() else 0.0,
        "kl_behav_ref_mean": float(((behav_logp - ref_logp) * m).sum() / max(tokens, 1.0)),
        "zero_advantage_groups": float(zero_groups(seq, group_ids)),
        "trained_tokens": tokens,
    }
    return adv, stats


def zero_groups(seq: torch.Tensor, group_ids: torch.Tensor) -> int:
    """Groups whose sequence advantages are all 0 (no learning signal: equal rewards)."""
    return sum(bool((seq[group_ids == g] == 0).all()) for g in torch.unique(group_ids))
