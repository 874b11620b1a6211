"""The ``paravt:`` recipe block (docs/method.md §5 table) as typed config: presets, dotted overrides, validation."""

from __future__ import annotations

import pytest

from paravt_core.config import (
    AdvantageConfig,
    ConfigError,
    ParavtRecipe,
    PolicyLossConfig,
    load_config,
)
from paravt_core.rl.config import RlConfig
from tests.support.paths import ROOT


def _table(r: ParavtRecipe) -> tuple:
    return (
        r.constrained.think_prefix,
        r.constrained.answer_suffix,
        r.gating.nframes_gating,
        r.anchoring.weight,
        r.reward.mode,
        r.reward.format_weight,
    )


def test_presets_are_the_spec_table():
    # think_prefix, answer_suffix, nframes_gating, lambda_anchor, reward mode, format_weight
    assert _table(load_config(ParavtRecipe)) == (True, True, True, 0.5, "f1", 1.0)  # default: PARA-GRPO
    assert _table(ParavtRecipe.para_grpo()) == (True, True, True, 0.5, "f1", 1.0)
    assert _table(load_config(ParavtRecipe, None, ["preset=vanilla_grpo"])) == (
        False,
        False,
        False,
        0.0,
        "f1",
        1.0,
    )
    assert ParavtRecipe().gating.choices == [4, 8, 16, 32, 64]


def test_every_knob_overrides_the_preset(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("preset: vanilla_grpo\nanchoring:\n  weight: 0.25\n")
    r = load_config(
        ParavtRecipe, path, ["gating.nframes_gating=true", "reward.mode=llm", "constrained.think_prefix=true"]
    )
    assert _table(r) == (True, False, True, 0.25, "llm", 1.0)  # answer_suffix keeps the vanilla value


def test_round_trip_through_yaml_keeps_the_values(tmp_path):
    from paravt_core.config import config_to_yaml

    r = load_config(ParavtRecipe, None, ["preset=vanilla_grpo", "anchoring.weight=0.3"])
    path = tmp_path / "dump.yaml"
    path.write_text(config_to_yaml(r))
    assert load_config(ParavtRecipe, path) == r


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("preset=grpo_plus", "preset"),
        ("reward.mode=judge", "mode"),
        ("gating.choices=[0, 8]", ">= 1"),
        ("reward.judge.deadline_s=90", "below reward.timeout_s"),
        ("anchoring.lambda=0.5", "valid keys here: unclosed_penalty, weight"),
    ],
)
def test_bad_values_are_clear_errors(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(ParavtRecipe, None, [override])


def test_algorithm_defaults_are_spec_values():
    a, p = AdvantageConfig(), PolicyLossConfig()
    assert (a.reward_bias, a.reward_scale, a.reward_clip, a.group_eps, a.kl_ctl, a.kl_clamp) == (
        -0.2,
        10.0,
        20.0,
        1e-5,
        0.01,
        10.0,
    )
    assert (p.clip_eps, p.behav_weight_cap) == (0.2, 5.0)


CONFIGS = ROOT / "configs" / "rl"


@pytest.mark.parametrize(
    ("name", "recipe"),
    [
        ("paragrpo_8b.yaml", (True, True, True, 0.5, "f1", 1.0)),
        ("vanilla_grpo_8b.yaml", (False, False, False, 0.0, "f1", 1.0)),
    ],
)
def test_published_8b_configs(name, recipe):
    cfg = load_config(RlConfig, CONFIGS / name)
    assert _table(cfg.paravt) == recipe
    # docs/method.md §5: 7 prompts x 8 samples, 2048 new tokens, T 0.7, lr 2e-6, wd 0.01, kl_ctl 0.01, ckpt every 5
    assert (cfg.prompts_per_step, cfg.group_size, cfg.agent.max_new_tokens, cfg.agent.temperature) == (
        7,
        8,
        2048,
        0.7,
    )
    assert (cfg.optim.lr, cfg.optim.weight_decay, cfg.optim.grad_clip, cfg.advantage.kl_ctl) == (
        2e-6,
        0.01,
        1.0,
        0.01,
    )
    assert (cfg.checkpoint.every, cfg.max_staleness, cfg.agent.max_context_tokens) == (5, 2, 32768)


def test_tiny_config_loads():
    cfg = load_config(RlConfig, CONFIGS / "tiny.yaml")
    assert cfg.max_staleness == 0 and cfg.device == "cpu" and cfg.paravt.preset == "para_grpo"


def test_cli_rl_rejects_an_unknown_key_before_loading_anything(capsys):
    from paravt_core.cli import main

    assert main(["rl", "--config", str(CONFIGS / "tiny.yaml"), "optim.learning_rate=1"]) == 2
    assert "unknown config key 'optim.learning_rate'" in capsys.readouterr().err


def test_rl_config_is_registered_without_importing_the_agent_into_every_stage():
    import subprocess
    import sys

    from paravt_core import config

    assert config.stage_config("rl") is RlConfig and config.RlConfig is RlConfig
    assert config.stage_config("data") is config.DataConfig
    code = (
        "import sys, paravt_core.config; print([m for m in sys.modules if m.startswith('paravt_core.agent')])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
