"""nFrames gating, GRPO advantages and the decoupled PPO loss (docs/method.md §5), checked against hand-worked values
and against plain-Python loop references on random inputs."""

from __future__ import annotations

import hashlib
import math
import statistics
import subprocess
import sys
from collections import Counter

import pytest
import torch

from paravt_core.rl.advantages import (
    batch_normalize,
    compute_advantages,
    group_normalize,
    kl_rewards,
    reward_to_go,
    shape_rewards,
)
from paravt_core.rl.gating import draw_nframes, nframes_for
from paravt_core.rl.loss import decoupled_ppo_loss

# ------------------------------------------------------------------------------------------------ gating


def test_gating_is_the_documented_hash():
    # K = choices[first 8 bytes of sha256("<seed>:<row id>") as a big-endian int mod 5]
    for row_id in ("row-0", "row-1", "charades/abc#3"):
        index = int.from_bytes(hashlib.sha256(f"7:{row_id}".encode()).digest()[:8], "big") % 5
        assert draw_nframes(row_id, seed=7) == (4, 8, 16, 32, 64)[index]


def test_gating_same_k_in_another_process_with_another_hash_seed():
    ids = [f"row-{i}" for i in range(50)]
    here = [draw_nframes(i, seed=3) for i in ids]
    code = (
        "from paravt_core.rl.gating import draw_nframes;"
        "print(','.join(str(draw_nframes(f'row-{i}', seed=3)) for i in range(50)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123", **_env()},
    )
    assert [int(k) for k in out.stdout.strip().split(",")] == here


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}


def test_gating_roughly_uniform_and_seed_dependent():
    counts = Counter(draw_nframes(f"id-{i}") for i in range(5000))
    assert set(counts) == {4, 8, 16, 32, 64}
    # 1000 expected per value; binomial sd = sqrt(5000 * 0.2 * 0.8) ~ 28, so +-150 is > 5 sd
    assert all(850 <= c <= 1150 for c in counts.values()), counts
    changed = sum(draw_nframes(f"id-{i}", 0) != draw_nframes(f"id-{i}", 1) for i in range(1000))
    assert changed > 600  # independent draws differ 80% of the time


def test_gating_off_is_64_and_custom_choices():
    assert nframes_for("row-1", enabled=False) == 64
    assert nframes_for("row-1", enabled=True, choices=[8]) == 8
    assert nframes_for("row-1", enabled=True) == draw_nframes("row-1")


# -------------------------------------------------------------------------------------------- advantages


def test_shape_rewards_by_hand():
    r = torch.tensor([1.0, 0.0, 3.0, -5.0])
    # (1 - .2) * 10 = 8; (0 - .2) * 10 = -2; (3 - .2) * 10 = 28 -> 20; (-5 - .2) * 10 = -52 -> -20
    assert shape_rewards(r).tolist() == pytest.approx([8.0, -2.0, 20.0, -20.0])


def test_group_normalize_by_hand():
    values = torch.tensor([8.0, -2.0, 8.0, -2.0, 4.0, 4.0, 7.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 2])
    out = group_normalize(values, groups, eps=1e-5)
    # group 0: mean 3, deviations +-5, unbiased var = 4 * 25 / 3 -> std 5.773503; 5 / (5.773503 + 1e-5)
    a = 5 / (math.sqrt(100 / 3) + 1e-5)
    assert out.tolist() == pytest.approx(
        [a, -a, a, -a, 0.0, 0.0, 0.0], abs=1e-6
    )  # equal rewards and n=1 -> 0


def test_kl_rewards_by_hand():
    behav = torch.tensor([[-1.0, -2.0, -0.5, -3.0]])
    ref = torch.tensor([[-1.5, -1.0, -20.0, -3.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    # diffs 0.5, -1.0, 19.5 -> clamp 10; x -0.01 -> -0.005, 0.01, -0.1; last token not generated -> 0
    assert kl_rewards(behav, ref, mask, kl_ctl=0.01).tolist()[0] == pytest.approx([-0.005, 0.01, -0.1, 0.0])


def test_reward_to_go_skips_prompt_and_tool_tokens():
    seq = torch.tensor([2.0])
    k = torch.tensor([[9.0, -0.01, 0.02, 9.0, -0.03]])  # 9s sit on untrained positions and must not count
    mask = torch.tensor([[0, 1, 1, 0, 1]])  # prompt, gen, gen, tool, gen
    # pos1: 2 + (-.01 + .02 - .03) = 1.98; pos2: 2 + (.02 - .03) = 1.99; pos4: 2 - .03 = 1.97
    assert reward_to_go(seq, k, mask).tolist()[0] == pytest.approx([0.0, 1.98, 1.99, 0.0, 1.97])


def test_batch_normalize_token_weighted_by_hand():
    values = torch.tensor([[1.0, 2.0, 100.0], [3.0, 6.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    # masked values 1, 2, 3, 6: mean 3; deviations -2, -1, 0, 3; var (4 + 1 + 0 + 9) / 4 = 3.5
    s = math.sqrt(3.5) + 1e-5
    expected = [[-2 / s, -1 / s, 0.0], [0.0, 3 / s, 0.0]]
    assert batch_normalize(values, mask).tolist() == [pytest.approx(row) for row in expected]


def test_compute_advantages_end_to_end_by_hand():
    rewards = torch.tensor([1.0, 0.0])  # one group of 2
    mask = torch.tensor([[0, 1, 1], [0, 1, 0]])
    behav = torch.tensor([[0.0, -1.0, -1.0], [0.0, -1.0, 0.0]])
    ref = torch.tensor([[0.0, -2.0, -1.0], [0.0, -1.0, 0.0]])
    adv, stats = compute_advantages(rewards, torch.tensor([0, 0]), behav, ref, mask, batch_norm=False)
    # R' = 8, -2; mean 3; unbiased std = sqrt((25 + 25) / 1) = 7.0711 -> A = +-5 / (7.0711 + 1e-5)
    a = 5 / (math.sqrt(50) + 1e-5)
    # KL rewards: seq 0 pos 1: -0.01 * (-1 - -2) = -0.01; pos 2: 0; seq 1: 0
    # reward-to-go: seq 0 pos 1 = a - 0.01, pos 2 = a; seq 1 pos 1 = -a
    assert adv.tolist() == [
        pytest.approx([0.0, a - 0.01, a], abs=1e-6),
        pytest.approx([0.0, -a, 0.0], abs=1e-6),
    ]
    assert stats["trained_tokens"] == 3.0 and stats["zero_advantage_groups"] == 0.0


def _advantages_loop(rewards, groups, behav, ref, mask, kl_ctl=0.01, eps=1e-5):
    """Plain-Python reference of steps 1-5 (one token at a time)."""
    shaped = [max(-20.0, min(20.0, (r + -0.2) * 10.0)) for r in rewards]
    seq = []
    for i, g in enumerate(groups):
        members = [shaped[j] for j, h in enumerate(groups) if h == g]
        if len(members) < 2:
            seq.append(0.0)
            continue
        seq.append((shaped[i] - statistics.mean(members)) / (statistics.stdev(members) + eps))
    adv = []
    for i in range(len(rewards)):
        row = []
        for t in range(len(mask[i])):
            if not mask[i][t]:
                row.append(None)
                continue
            later = sum(
                -kl_ctl * max(-10.0, min(10.0, behav[i][u] - ref[i][u]))
                for u in range(t, len(mask[i]))
                if mask[i][u]
            )
            row.append(seq[i] + later)
        adv.append(row)
    flat = [x for row in adv for x in row if x is not None]
    mean = sum(flat) / len(flat)
    std = math.sqrt(sum((x - mean) ** 2 for x in flat) / len(flat))
    return [[0.0 if x is None else (x - mean) / (std + eps) for x in row] for row in adv]


@pytest.mark.parametrize("seed", range(20))
def test_advantages_vectorized_equal_the_loop(seed):
    g = torch.Generator().manual_seed(seed)
    n_groups, n, width = 3, 4, 9
    b = n_groups * n
    rewards = torch.randint(0, 4, (b,), generator=g).float() / 2  # ties on purpose: equal-reward groups
    groups = torch.arange(n_groups).repeat_interleave(n)
    behav = -torch.rand(b, width, generator=g) * 5
    ref = behav + torch.randn(b, width, generator=g) * 8  # some |diff| > 10 to hit the clamp
    mask = (torch.rand(b, width, generator=g) > 0.4).int()
    mask[:, 0] = 1  # at least one trained token per row
    adv, _ = compute_advantages(rewards, groups, behav, ref, mask)
    expected = _advantages_loop(
        rewards.tolist(), groups.tolist(), behav.tolist(), ref.tolist(), mask.tolist()
    )
    assert torch.allclose(adv, torch.tensor(expected), atol=1e-4)


# ------------------------------------------------------------------------------------------------- loss


def _loss(logp, prox, behav, adv, mask, **kw):
    t = lambda x: torch.tensor([x], dtype=torch.float64)  # noqa: E731
    return decoupled_ppo_loss(t(logp), t(prox), t(behav), t(adv), torch.tensor([mask]), **kw)


def test_each_clip_branch_by_hand():
    ln = math.log
    # ratios forced to 1.5 / 0.5 by logp - prox; prox = behav -> w = 1
    logp = [ln(1.5), ln(0.5), ln(1.5), ln(0.5)]
    adv = [1.0, 1.0, -1.0, -1.0]
    # A=+1, r=1.5: max(-1.5, -1.2) = -1.2 (clipped)   A=+1, r=0.5: max(-0.5, -0.8) = -0.5 (unclipped)
    # A=-1, r=1.5: max(1.5, 1.2) = 1.5 (unclipped)    A=-1, r=0.5: max(0.5, 0.8) = 0.8 (clipped)
    loss, stats = _loss(logp, [0.0] * 4, [0.0] * 4, adv, [1, 1, 1, 1])
    assert float(loss) == pytest.approx((-1.2 - 0.5 + 1.5 + 0.8) / 4)  # 0.15
    assert stats["clip_fraction"] == pytest.approx(0.5)
    assert stats["dropped_fraction"] == 0.0


def test_behaviour_weight_multiplies_and_the_cap_drops():
    ln = math.log
    # both tokens ratio 1 (logp = prox); w = exp(prox - behav) = 3 and 6; A = 2
    # token 1: -2 * 1 * 3 = -6; token 2: w = 6 > 5 -> dropped; prompt token (mask 0) ignored
    loss, stats = _loss(
        [ln(0.5), ln(0.5), 0.0],
        [ln(0.5), ln(0.5), 5.0],
        [ln(0.5 / 3), ln(0.5 / 6), -50.0],
        [2.0, 2.0, 99.0],
        [1, 1, 0],
    )
    assert float(loss) == pytest.approx(-6 / 2)  # the dropped token still counts in the token mean
    assert stats["dropped_fraction"] == pytest.approx(0.5)
    no_cap, _ = _loss([0.0, 0.0], [0.0, 0.0], [-ln(3), -ln(6)], [2.0, 2.0], [1, 1], behav_weight_cap=None)
    assert float(no_cap) == pytest.approx((-6 - 12) / 2)


def test_gradients_flow_only_through_unclipped_tokens():
    ln = math.log
    logp = torch.tensor([[ln(0.5), ln(1.5)]], dtype=torch.float64, requires_grad=True)
    zeros = torch.zeros(1, 2, dtype=torch.float64)
    loss, _ = decoupled_ppo_loss(logp, zeros, zeros, torch.ones(1, 2, dtype=torch.float64), torch.ones(1, 2))
    loss.backward()
    # unclipped token: d(-A r / n)/d logp = -A r / n = -0.5 / 2; clipped token: 0
    assert logp.grad.tolist()[0] == pytest.approx([-0.25, 0.0])


def test_global_token_mean_across_micro_batches():
    g = torch.Generator().manual_seed(0)
    logp, prox, behav, adv = (torch.randn(4, 6, generator=g) * 0.1 for _ in range(4))
    mask = (torch.rand(4, 6, generator=g) > 0.3).int()
    whole, _ = decoupled_ppo_loss(logp, prox, behav, adv, mask)
    n = float(mask.sum())
    parts = sum(
        decoupled_ppo_loss(
            logp[i : i + 2], prox[i : i + 2], behav[i : i + 2], adv[i : i + 2], mask[i : i + 2], n_tokens=n
        )[0]
        for i in (0, 2)
    )
    assert float(parts) == pytest.approx(float(whole))


def _loss_loop(logp, prox, behav, adv, mask, eps=0.2, cap=5.0):
    total, n = 0.0, 0
    for lp_row, px_row, bh_row, a_row, m_row in zip(logp, prox, behav, adv, mask, strict=True):
        for lp, px, bh, a, m in zip(lp_row, px_row, bh_row, a_row, m_row, strict=True):
            if not m:
                continue
            n += 1
            ratio = math.exp(lp - px)
            pg = max(-a * ratio, -a * min(max(ratio, 1 - eps), 1 + eps))
            w = math.exp(px - bh)
            if w <= cap:
                total += pg * w
    return total / max(n, 1)


@pytest.mark.parametrize("seed", range(25))
def test_loss_vectorized_equals_the_loop(seed):
    g = torch.Generator().manual_seed(seed)
    shape = (5, 11)
    behav = -torch.rand(shape, generator=g, dtype=torch.float64) * 3
    prox = behav + torch.randn(shape, generator=g, dtype=torch.float64) * 1.0  # some w > 5
    logp = prox + torch.randn(shape, generator=g, dtype=torch.float64) * 0.4  # ratios both sides of the clip
    adv = torch.randn(shape, generator=g, dtype=torch.float64)
    mask = (torch.rand(shape, generator=g) > 0.3).int()
    loss, _ = decoupled_ppo_loss(logp, prox, behav, adv, mask)
    expected = _loss_loop(*(x.tolist() for x in (logp, prox, behav, adv, mask)))
    assert float(loss) == pytest.approx(expected, rel=1e-9, abs=1e-12)


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


def test_sequence_advantages_with_the_default_knobs() -> None:
    """docs/method.md §5 defaults (bias -0.2, scale 10, clip 20, eps 1e-5). Rewards 1, 0, 3.5 in group 0 and 0.5 alone:
    shaped (R - 0.2) x 10 = 8, -2, 33 -> 20 (clipped), 3. Group 0: mean 26/3 = 8.6667, centred -0.6667,
    -10.6667, 11.3333, unbiased std sqrt(242.6667 / 2) = 11.015141 -> -0.060523, -0.968363, 1.028886;
    a group of one -> 0."""
    from paravt_core.rl.advantages import sequence_advantages

    seq, shaped = sequence_advantages(torch.tensor([1.0, 0.0, 3.5, 0.5]), torch.tensor([0, 0, 0, 1]))
    assert shaped.tolist() == pytest.approx([8.0, -2.0, 20.0, 3.0])
    assert seq.tolist() == pytest.approx([-0.060523, -0.968363, 1.028886, 0.0], abs=1e-5)


def test_token_advantages_with_the_default_knobs() -> None:
    """kl_ctl 0.01, clamp 10, batch norm on, eps 1e-5. Sequence advantages 1 and -1; seq 0's first token has
    logp_behav - logp_ref = 20 -> clamped to 10 -> KL reward -0.1; the masked token (diff 5) counts nowhere.
    Reward-to-go: seq 0: 1 - 0.1 = 0.9, 1.0; seq 1: -1.0. Batch norm over the 3 tokens: mean 0.3, population
    std sqrt(2.54 / 3) = 0.920145 -> 0.652064, 0.760741, -1.412806; the masked position stays 0."""
    from paravt_core.rl.advantages import token_advantages

    behav = torch.tensor([[20.0, 0.0], [0.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = token_advantages(torch.tensor([1.0, -1.0]), behav, torch.zeros(2, 2), mask)
    assert adv.tolist() == [
        pytest.approx([0.652064, 0.760741], abs=1e-5),
        pytest.approx([-1.412806, 0.0], abs=1e-5),
    ]


@pytest.mark.parametrize(
    ("behav", "mask", "kl_mean", "tokens"),
    [
        # (0.5 + 0.25 - 0.25) / 3 tokens; the masked 9 counts nowhere
        ([[0.5, 0.25], [-0.25, 9.0]], [[1.0, 1.0], [1.0, 0.0]], 0.5 / 3, 3.0),
        # one trained token: 0.5 / 1
        ([[0.5, 9.0], [9.0, 9.0]], [[1.0, 0.0], [0.0, 0.0]], 0.5, 1.0),
    ],
)
def test_compute_advantages_statistics(behav, mask, kl_mean, tokens) -> None:
    """Rewards 1, 0 (group 0) and 0.5, 0.5 (group 1: equal -> a zero-advantage group). Shaped with the
    defaults: 8, -2, 3, 3 -> mean 3."""
    from paravt_core.rl.advantages import compute_advantages

    _, stats = compute_advantages(
        torch.tensor([1.0, 0.0, 0.5, 0.5]),
        torch.tensor([0, 0, 1, 1]),
        torch.tensor(behav + [[0.0, 0.0], [0.0, 0.0]]),
        torch.zeros(4, 2),
        torch.tensor(mask + [[0.0, 0.0], [0.0, 0.0]]),
    )
    assert stats == pytest.approx(
        {
            "shaped_reward_mean": 3.0,
            "kl_behav_ref_mean": kl_mean,
            "zero_advantage_groups": 1.0,
            "trained_tokens": tokens,
        }
    )


@pytest.mark.parametrize(
    ("batch_norm", "expected"),
    [
        # no batch norm: seq 0: 0.363961 - 0.1 = 0.263961; seq 1: -0.363961
        (False, [[0.263961], [-0.363961]]),
        # batch norm with eps 1: mean -0.05, population std 0.313961 -> +-0.313961 / 1.313961 = +-0.238942
        (True, [[0.238942], [-0.238942]]),
    ],
)
def test_compute_advantages_forwards_every_knob(batch_norm: bool, expected: list) -> None:
    """Non-default knobs, each visible in the result: bias 0.5, scale 2, clip 2.5 -> rewards 1, 0 shape to
    (1.5 x 2 = 3 -> 2.5) and 0.5 x 2 = 1; mean 1.75, unbiased std sqrt(2 x 0.5625) = 1.06066, group eps 1
    -> +-0.75 / 2.06066 = +-0.363961. KL: behav - ref = 3 on seq 0, clamped to 1, x -kl_ctl 0.1 = -0.1."""
    from paravt_core.rl.advantages import compute_advantages

    adv, stats = compute_advantages(
        torch.tensor([1.0, 0.0]),
        torch.tensor([0, 0]),
        torch.tensor([[4.0], [1.0]]),
        torch.tensor([[1.0], [1.0]]),
        torch.ones(2, 1),
        bias=0.5,
        scale=2.0,
        clip=2.5,
        group_eps=1.0,
        kl_ctl=0.1,
        kl_clamp=1.0,
        batch_norm=batch_norm,
        batch_eps=1.0,
    )
    assert adv.tolist() == [pytest.approx(row, abs=1e-5) for row in expected]
    # (3 + 0) / 2 tokens of behav - ref; shaped mean (2.5 + 1) / 2
    assert stats == pytest.approx(
        {
            "shaped_reward_mean": 1.75,
            "kl_behav_ref_mean": 1.5,
            "zero_advantage_groups": 0.0,
            "trained_tokens": 2.0,
        }
    )


def test_group_normalize_default_eps() -> None:
    """Values 1, 3: mean 2, unbiased std sqrt(2) = 1.414214, eps 1e-5 -> +-1 / 1.414224 = +-0.707102."""
    from paravt_core.rl.advantages import group_normalize

    assert group_normalize(torch.tensor([1.0, 3.0]), torch.tensor([0, 0])).tolist() == pytest.approx(
        [-0.707102, 0.707102], abs=1e-6
    )


def test_batch_normalize_of_one_token_is_zero() -> None:
    """One masked token: mean = the value, deviation 0 -> 0 (a count clamped above 1 would halve the mean)."""
    from paravt_core.rl.advantages import batch_normalize

    assert batch_normalize(torch.tensor([[3.0, 7.0]]), torch.tensor([[1.0, 0.0]])).tolist() == [[0.0, 0.0]]


def test_compute_advantages_clips_shaped_rewards_at_20_by_default() -> None:
    """Rewards 2.5 and 0 in one group, defaults (bias -0.2, scale 10, clip 20): shaped (2.5 - 0.2) x 10 =
    23 -> clipped to 20, and (0 - 0.2) x 10 = -2; their mean is (20 - 2) / 2 = 9."""
    zeros = torch.zeros(2, 1)
    _, stats = compute_advantages(
        torch.tensor([2.5, 0.0]), torch.tensor([0, 0]), zeros, zeros, torch.ones(2, 1)
    )
    assert stats["shaped_reward_mean"] == pytest.approx(9.0)


def test_compute_advantages_of_an_empty_batch() -> None:
    """No episode: no advantage, and the statistics are zeros (not nan)."""
    empty = torch.zeros(0, 3)
    adv, stats = compute_advantages(torch.zeros(0), torch.zeros(0, dtype=torch.long), empty, empty, empty)
    assert adv.shape == (0, 3)
    assert stats == {
        "shaped_reward_mean": 0.0,
        "kl_behav_ref_mean": 0.0,
        "zero_advantage_groups": 0.0,
        "trained_tokens": 0.0,
    }


@pytest.mark.parametrize("log_w", [0.0, 1.5])
def test_a_token_whose_behaviour_weight_is_exactly_the_cap_is_kept(log_w: float) -> None:
    """docs/method.md §5: tokens with w > cap are dropped, so w == cap stays. Token 0 has w = exp(log_w) (the cap is
    taken as that very float), token 1 has w = exp(log_w + 1) > cap and is dropped.
    A = 1, logp = prox: ratio 1, pg = -1 per token; loss = -(w0 x 1 + 0) / 2 tokens."""
    prox = torch.tensor([[log_w, log_w + 1.0]])
    behav = torch.zeros(1, 2)
    cap = float(torch.exp(torch.tensor(log_w)))  # the weight of token 0, bit for bit
    loss, stats = decoupled_ppo_loss(
        prox.clone(), prox, behav, torch.ones(1, 2), torch.ones(1, 2), behav_weight_cap=cap
    )
    assert stats["dropped_fraction"] == pytest.approx(0.5)  # only token 1
    assert loss.item() == pytest.approx(-cap / 2)
