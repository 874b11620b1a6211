"""``packed_sdpa`` is the default attention of SFT and of the RL learner (which never set
one before, so it ran the dense masked ``sdpa``); ``sdpa`` stays selectable."""

from __future__ import annotations

import pytest
import torch

from paravt_core.config import SftConfig, load_config
from paravt_core.rl.config import RlConfig
from tests.support.paths import ROOT

REPO = ROOT


def test_sft_defaults_and_recipes_use_packed_sdpa() -> None:
    assert SftConfig().model.attn_implementation == "packed_sdpa"
    recipes = sorted((REPO / "configs/sft").glob("*.yaml"))
    assert recipes
    for recipe in recipes:
        assert load_config(SftConfig, str(recipe), []).model.attn_implementation == "packed_sdpa", recipe
    assert (
        load_config(SftConfig, None, ["model.attn_implementation=sdpa"]).model.attn_implementation == "sdpa"
    )


@pytest.mark.parametrize(("overrides", "want"), [([], "packed_sdpa"), (["attn_implementation=sdpa"], "sdpa")])
def test_the_rl_learner_runs_the_configured_attention(
    tiny_model_dir: str, overrides: list[str], want: str
) -> None:
    from paravt_core.rl.stage import _learner
    from paravt_core.train.dist import Dist

    cfg = load_config(RlConfig, None, [f"model={tiny_model_dir}", *overrides])
    assert cfg.attn_implementation == want
    learner, _ = _learner(cfg, Dist(), torch.float32, tiny_model_dir)
    for root in (learner.root, learner.reference):  # the policy and the KL reference
        text = root.inner.config.text_config
        assert (text._attn_implementation, root.inner.config.vision_config._attn_implementation) == (
            want,
            "sdpa",
        )


def test_the_weights_checksum_is_off_in_the_8b_recipes() -> None:
    # a sha256 over 16 GB of served weights on the CPU at every 8B checkpoint
    recipes = sorted((REPO / "configs/rl").glob("*8b*.yaml"))
    assert len(recipes) == 4
    for recipe in recipes:
        assert load_config(RlConfig, str(recipe), []).checkpoint.weights_checksum is False, recipe
    assert load_config(RlConfig, str(REPO / "configs/rl/tiny.yaml"), []).checkpoint.weights_checksum is True
