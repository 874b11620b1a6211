"""SFT configs: the published recipe file, the tiny one, and the CLI's help and errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from paravt_core.cli import main
from paravt_core.config import SftConfig, load_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "sft"


def test_published_recipe() -> None:
    cfg = load_config(SftConfig, CONFIGS / "qwen3vl_8b.yaml")
    # SPEC §5/§6: lr 2e-5 cosine, warmup 0.05, wd 0.01, 1500 steps, 4 packed buffers of 8192 per GPU,
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


def test_cli_help_lists_fields_and_rejects_unknown_keys(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["sft", "--help"])
    out = capsys.readouterr().out
    assert "packing.length = 8192" in out and "trainer.lr = 2.0e-05" in out
    assert main(["sft", "--config", str(CONFIGS / "tiny.yaml"), "trainer.stepz=3"]) == 2
    assert "'trainer.stepz'" in capsys.readouterr().err
