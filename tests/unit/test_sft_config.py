"""SFT configs: the published recipe file, the tiny one, and the CLI's help and errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from paravt_core.cli import main
from paravt_core.config import ConfigError, SftConfig, load_config
from tests.support.paths import ROOT

CONFIGS = ROOT / "configs" / "sft"


def test_published_recipe() -> None:
    cfg = load_config(SftConfig, CONFIGS / "qwen3vl_8b.yaml")
    # docs/method.md §5/§6: lr 2e-5 cosine, warmup 0.05, wd 0.01, 1500 steps, 4 packed buffers of 8192 per GPU,
    # bf16, gradient checkpointing, Qwen3-VL-8B-Instruct, 1 fps / 64 frames / 784..50176 px videos.
    assert cfg.model.uri == "Qwen/Qwen3-VL-8B-Instruct"
    assert (cfg.trainer.lr, cfg.trainer.warmup_ratio, cfg.trainer.weight_decay) == (2e-5, 0.05, 0.01)
    assert (cfg.trainer.steps, cfg.trainer.grad_accum, cfg.packing.length) == (1500, 4, 8192)
    assert cfg.model.bf16 and cfg.model.gradient_checkpointing
    assert (cfg.media.video_fps, cfg.media.video_max_frames) == (1.0, 64)
    assert (cfg.media.video_min_pixels, cfg.media.video_max_pixels) == (784, 50176)


def test_tiny_config_loads_with_overrides() -> None:
    cfg = load_config(SftConfig, CONFIGS / "tiny.yaml", ["trainer.steps=3", "model.uri=/m"])
    assert cfg.trainer.steps == 3 and cfg.model.uri == "/m" and not cfg.model.bf16


def test_steps_is_one_name_in_both_training_stages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``steps`` (the RL stage's field) and ``trainer.steps`` (the SFT stage's) are accepted by both, as
    overrides and as YAML keys; an override wins over the file in either spelling."""
    from paravt_core.rl.config import RlConfig

    assert load_config(SftConfig, CONFIGS / "tiny.yaml", ["steps=40"]).trainer.steps == 40
    assert load_config(RlConfig, None, ["trainer.steps=3"]).steps == 3
    sft_yaml, rl_yaml = tmp_path / "sft.yaml", tmp_path / "rl.yaml"
    sft_yaml.write_text("steps: 7\ntrainer:\n  lr: 0.5\n")
    rl_yaml.write_text("trainer:\n  steps: 5\nseed: 2\n")
    sft = load_config(SftConfig, sft_yaml)
    assert (sft.trainer.steps, sft.trainer.lr) == (7, 0.5)
    assert load_config(SftConfig, sft_yaml, ["trainer.steps=9"]).trainer.steps == 9
    rl = load_config(RlConfig, rl_yaml)
    assert (rl.steps, rl.seed) == (5, 2)
    assert load_config(RlConfig, rl_yaml, ["steps=6"]).steps == 6
    rl_yaml.write_text("trainer:\n  steps: 5\nsteps: 4\n")
    with pytest.raises(ConfigError, match=r"trainer.steps: 5 and steps: 4 are one field set twice"):
        load_config(RlConfig, rl_yaml)
    with pytest.raises(SystemExit):
        main(["rl", "--help"])
    assert "trainer.steps = steps" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["sft", "--help"])
    assert "steps = trainer.steps" in capsys.readouterr().out


def test_cli_help_lists_fields_and_rejects_unknown_keys(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["sft", "--help"])
    out = capsys.readouterr().out
    assert "packing.length = 8192" in out and "trainer.lr = 2.0e-05" in out
    assert main(["sft", "--config", str(CONFIGS / "tiny.yaml"), "trainer.stepz=3"]) == 2
    assert "'trainer.stepz'" in capsys.readouterr().err
