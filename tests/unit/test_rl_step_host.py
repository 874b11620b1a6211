"""The RL learner's step reads device values back a fixed number of times, however many forward passes it
makes (through the training core shared with SFT): log-probs of the prox / reference passes
come back in one copy, losses and statistics of the trained passes and the norm in one read."""

from __future__ import annotations

import pytest

from paravt_core.models import load
from paravt_core.rl.learner import trace_sequence
from paravt_core.train.syncs import HostReads
from tests.support.rl_support import rollout_samples, tiny_learner, tiny_rl_config


@pytest.fixture(scope="module")
def setup(rl_data, tiny_model_dir):
    cfg = tiny_rl_config(rl_data, tiny_model_dir, "unused")
    return cfg, rollout_samples(cfg, tiny_model_dir, rl_data)


def _step_reads(cfg, samples, model_dir: str, pack_tokens: int) -> tuple[int, dict[str, float]]:
    learner = tiny_learner(cfg, model_dir, pack_tokens)
    with HostReads() as reads:
        metrics = learner.step(samples)
    # the learner's and the training core's own reads (pack() builds its host tensors on the host)
    mine = {k: v for k, v in reads.sites.items() if k.startswith(("paravt_core/rl/", "paravt_core/train/"))}
    return sum(mine.values()), metrics


def test_reads_do_not_grow_with_the_forward_passes(setup, tiny_model_dir) -> None:
    cfg, samples = setup
    config = load(tiny_model_dir).config
    lengths = [
        len(trace_sequence(s.episode.main, config.image_token_id, None)) for s in samples if s.trainable
    ]
    one, m_one = _step_reads(cfg, samples, tiny_model_dir, pack_tokens=sum(lengths))
    many, m_many = _step_reads(cfg, samples, tiny_model_dir, pack_tokens=max(lengths))
    assert m_one["forward_passes"] == 1 and m_many["forward_passes"] >= 3
    assert many == one, f"{one} reads with 1 pass, {many} with {m_many['forward_passes']:.0f}"
