"""The RL learner step as it was before its host reads were gathered on the device (commit 76a24ce), written out plainly
for the equality test (tests/unit/test_rl_step_equal.py) and the timing (benchmarks/rl_step_host.py).

One process, no padding passes. Per forward pass the prox and reference log-probs come back to the host one
sample at a time; per trained pass the loss is read as a Python float and the statistics are computed with
one ``float()`` each; the norm is a float. The policy loss is the decoupled PPO loss of docs/method.md §5 written here
again (not ``paravt_core.rl.loss``), so a change in the production loss's terms shows too. Only the pure
advantage math (pinned by tests/unit/test_rl_math.py) and the packing are shared with production.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from paravt_core.rl.advantages import sequence_advantages, token_advantages
from paravt_core.rl.learner import Learner, pack_groups, pack_sample, trace_sequence, vision_tokens_ok
from paravt_core.rl.rollout import Sample
from paravt_core.sft.packing import PackedBatch, pack

STAT_KEYS = ("clip_fraction", "dropped_fraction", "approx_kl", "behav_kl")


def ppo_loss(
    logp: torch.Tensor,
    prox: torch.Tensor,
    behav: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_eps: float,
    cap: float | None,
    n_tokens: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """docs/method.md §5 per trained token: max(-A r, -A clip(r)) * w, w = exp(prox - behav) kept where w <= cap;
    summed and divided by the step's trained tokens. Statistics: means over this pass's trained tokens."""
    m = mask.to(torch.bool)
    ratio = torch.where(m, torch.exp(logp - prox), torch.zeros_like(logp))
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps)
    weight = torch.exp(prox - behav)
    keep = m if cap is None else m & (weight <= cap)
    weight = torch.where(keep, weight, torch.zeros_like(weight))
    loss = (torch.maximum(unclipped, clipped) * weight).sum() / max(n_tokens, 1.0)
    count = max(float(m.sum()), 1.0)
    with torch.no_grad():
        stats = {
            "clip_fraction": float(((clipped > unclipped) & m).sum()) / count,
            "dropped_fraction": float((m & ~keep).sum()) / count,
            "approx_kl": float(((logp - prox) * m).sum()) / count,
            "behav_kl": float(((prox - behav) * m).sum()) / count,
            "tokens": float(m.sum()),
        }
    return loss, stats


def _host_logprobs(root: torch.nn.Module, batch: PackedBatch, temperature: float) -> list[torch.Tensor]:
    param = next(root.parameters())
    full = root(batch.to(param.device, dtype=param.dtype), temperature)
    return [part.cpu() for part in torch.split(full, batch.lengths)]  # one read per sample


def _pad(rows: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    out = torch.zeros(len(rows), width, dtype=rows[0].dtype)
    for i, row in enumerate(rows):
        out[i, : row.shape[0]] = row
    return out


def reference_step(learner: Learner, samples: Sequence[Sample]) -> dict[str, float]:
    """One optimizer step on ``learner``'s policy, the old way; returns loss, statistics, grad_norm, kl_ref
    and forward_passes. Uses the learner's modules, optimizer and settings only."""
    assert not learner.dist.sharded, "the reference is the one-process step"
    config = learner.model.config
    video = getattr(config, "video_token_id", None)
    episodes, seqs, owners = [], [], []
    for sample in samples:
        if not sample.trainable:
            continue
        seq = trace_sequence(sample.episode.main, config.image_token_id, video)
        if vision_tokens_ok(config, seq) and len(seq) <= learner.pack_tokens:
            episodes.append(sample)
            seqs.append(seq)
    owners = list(range(len(episodes)))
    for e, sample in enumerate(episodes):
        for trace in sample.episode.subagent_traces:
            sub = trace_sequence(trace, config.image_token_id, video)
            if sum(trace.loss_mask) and len(sub) <= learner.pack_tokens and vision_tokens_ok(config, sub):
                seqs.append(sub)
                owners.append(e)
    a, lc, T = learner.advantage, learner.loss_cfg, learner.temperature
    episode_adv, _ = sequence_advantages(
        torch.tensor([s.reward.total for s in episodes], dtype=torch.float32),
        torch.tensor([s.group for s in episodes]),
        bias=a.reward_bias,
        scale=a.reward_scale,
        clip=a.reward_clip,
        group_eps=a.group_eps,
    )
    groups = pack_groups([len(s) for s in seqs], learner.pack_tokens)
    packs = [pack([pack_sample(config, seqs[i]) for i in g]) for g in groups]
    prox_of, ref_of = {}, {}
    with torch.no_grad(), learner.autocast():
        for group, batch in zip(groups, packs, strict=True):
            prox_of.update(zip(group, _host_logprobs(learner.root, batch, T), strict=True))
            ref_of.update(zip(group, _host_logprobs(learner.reference, batch, T), strict=True))
    width = max(len(s) for s in seqs)
    mask = _pad([s.loss_mask for s in seqs], width)
    behav = _pad([s.behav_logp for s in seqs], width)
    prox = _pad([prox_of[i] for i in range(len(seqs))], width)
    ref = _pad([ref_of[i] for i in range(len(seqs))], width)
    adv = token_advantages(
        episode_adv[torch.tensor(owners)],
        behav,
        ref,
        mask,
        kl_ctl=a.kl_ctl,
        kl_clamp=a.kl_clamp,
        batch_norm=a.batch_norm,
        batch_eps=a.batch_eps,
    )
    n_tokens = float(mask.sum())
    learner.optimizer.zero_grad(set_to_none=True)
    totals = dict.fromkeys(("loss", *STAT_KEYS), 0.0)
    for group, batch in zip(groups, packs, strict=True):
        with learner.autocast():
            logp = torch.cat(_host_logprobs(learner.root, batch, T))[None]

        def flat(t: torch.Tensor, group: list[int] = group, batch: PackedBatch = batch) -> torch.Tensor:
            return torch.cat([t[i, :n] for i, n in zip(group, batch.lengths, strict=True)])[None]

        loss, stats = ppo_loss(
            logp,
            flat(prox),
            flat(behav),
            flat(adv),
            flat(mask),
            clip_eps=lc.clip_eps,
            cap=lc.behav_weight_cap,
            n_tokens=n_tokens,
        )
        loss.backward()
        totals["loss"] += float(loss.detach())  # one read per micro-batch, as the old step did
        for key in STAT_KEYS:
            totals[key] += stats[key] * stats["tokens"] / max(n_tokens, 1.0)
    params = [p for g in learner.optimizer.param_groups for p in g["params"]]
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, learner.optim_cfg.grad_clip))
    learner.optimizer.step()
    return {
        **totals,
        "grad_norm": grad_norm,
        "kl_ref": float(((behav - ref) * mask).sum()) / max(n_tokens, 1.0),
        "forward_passes": float(len(groups)),
        "trained_tokens": n_tokens,
    }
