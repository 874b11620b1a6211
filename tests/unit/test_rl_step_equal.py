"""The RL learner's step with its reads gathered on the device (commit 76a24ce) gives the
numbers of the step as it was before, which read every micro-batch's loss back to the host: the same logged
loss and statistics, grad_norm and updated weights, float32 on the tiny model, several forward passes."""

from __future__ import annotations

import pytest
import torch

from paravt_core.models import load
from paravt_core.rl.learner import trace_sequence
from tests.support.rl_step_reference import STAT_KEYS, reference_step
from tests.support.rl_support import rollout_samples, tiny_learner, tiny_rl_config


@pytest.fixture(scope="module")
def setup(rl_data, tiny_model_dir):
    cfg = tiny_rl_config(rl_data, tiny_model_dir, "unused")
    return cfg, rollout_samples(cfg, tiny_model_dir, rl_data)


@pytest.mark.parametrize("per_pass", ["one", "two"])
def test_step_equals_the_per_micro_batch_step(setup, tiny_model_dir, per_pass: str) -> None:
    """Bit-equal on CPU today; the tolerance leaves room for a reordered float sum, not for a lost pass."""
    cfg, samples = setup
    config = load(tiny_model_dir).config
    lengths = [
        len(trace_sequence(s.episode.main, config.image_token_id, None)) for s in samples if s.trainable
    ]
    # one sequence per pass (8 passes on these samples), or two per pass (the packed, block-diagonal case)
    pack_tokens = max(lengths) if per_pass == "one" else max(lengths) + min(lengths)
    new, old = tiny_learner(cfg, tiny_model_dir, pack_tokens), tiny_learner(cfg, tiny_model_dir, pack_tokens)
    before = new.weights()

    got = new.step(samples)
    want = reference_step(old, samples)

    assert got["forward_passes"] == want["forward_passes"] >= 3
    assert per_pass == "one" or want["forward_passes"] < len(lengths)
    assert got["trained_tokens"] == want["trained_tokens"]
    for key in ("loss", *STAT_KEYS, "grad_norm", "kl_ref"):
        assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-12), key
    assert want["grad_norm"] > 0 and want["clip_fraction"] == 0.0  # first step: ratio 1, nothing clipped
    after_new, after_old = new.weights(), old.weights()
    moved = max(
        (after_old[k] - before[k]).abs().max().item() for k in before if before[k].is_floating_point()
    )
    assert moved > 1e-5  # the update is large enough for a missing micro-batch to show
    for key, tensor in after_old.items():
        torch.testing.assert_close(
            after_new[key], tensor, rtol=1e-6, atol=1e-8, msg=lambda m, k=key: f"{k}: {m}"
        )
