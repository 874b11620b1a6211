"""Tests written for mutants that `make mutation` found alive (docs/mutation.md); values worked out by hand."""

from __future__ import annotations

import pytest
import torch

from paravt_core.rl.loss import decoupled_ppo_loss


def test_one_token_loss_and_stats_divide_by_one() -> None:
    """One trained token, A = 2, logp = prox = behav: ratio 1, pg = -2, w = 1 -> loss = -2 / 1 token;
    statistics over 1 token: ratio_mean 1, nothing clipped (ratio 1 is inside [0.8, 1.2], both pg terms are
    equal: equal is not clipped), nothing dropped."""
    zeros = torch.zeros(1, 1)
    loss, stats = decoupled_ppo_loss(zeros, zeros, zeros, torch.full((1, 1), 2.0), torch.ones(1, 1))
    assert loss.item() == pytest.approx(-2.0)
    assert stats["ratio_mean"] == pytest.approx(1.0)
    assert stats["clip_fraction"] == 0.0
    assert stats["dropped_fraction"] == 0.0 and stats["tokens"] == 1.0


def test_every_statistic_by_hand() -> None:
    """Two trained tokens and a masked one (its values must count nowhere), A = 1:
    token 0: logp 0.1, prox 0.3, behav 0.0 -> ratio e^-0.2 = 0.818731 (inside [0.8, 1.2]), w = e^0.3;
    token 1: logp -0.1, prox -0.4, behav -0.9 -> ratio e^0.3 = 1.349859 (clipped to 1.2), w = e^0.5;
    token 2 (mask 0): logp 3, prox -1, behav 2.
    approx_kl = ((0.1 - 0.3) + (-0.1 + 0.4)) / 2 = 0.05; behav_kl = (0.3 + 0.5) / 2 = 0.4;
    ratio_mean = (0.818731 + 1.349859) / 2 = 1.084295; clip_fraction 1/2; dropped 0 (both w <= 5);
    loss = (-e^-0.2 x e^0.3 - 1.2 x e^0.5) / 2 = (-1.105171 - 1.978466) / 2 = -1.541818."""
    logp = torch.tensor([[0.1, -0.1, 3.0]])
    prox = torch.tensor([[0.3, -0.4, -1.0]])
    behav = torch.tensor([[0.0, -0.9, 2.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, stats = decoupled_ppo_loss(logp, prox, behav, torch.ones(1, 3), mask)
    assert loss.item() == pytest.approx(-1.541818, abs=1e-5)
    assert stats == pytest.approx(
        {
            "clip_fraction": 0.5,
            "dropped_fraction": 0.0,
            "approx_kl": 0.05,
            "behav_kl": 0.4,
            "ratio_mean": 1.084295,
            "tokens": 2.0,
        },
        abs=1e-5,
    )


def test_gating_without_choices_says_why() -> None:
    from paravt_core.rl.gating import draw_nframes

    with pytest.raises(ValueError, match=r"^nFrames gating needs at least one frame count$"):
        draw_nframes("row", 0, ())
