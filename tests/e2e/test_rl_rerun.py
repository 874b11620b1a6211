"""A rerun of ``paravt rl`` on a finished output: the README's "First hour" runs
``paravt rl --config configs/rl/tiny.yaml`` (relative paths) on the output ``make demo`` wrote with absolute
ones. The same folder named both ways is the same reference; a reference that truly differs is refused
before the finished output is touched (its ``_COMPLETE`` and ``config.yaml`` stay as they were)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from paravt_core import storage
from paravt_core.cli_errors import UsageError
from paravt_core.config import ConfigError
from paravt_core.rl.stage import run
from tests.support.rl_support import tiny_rl_config

SHORT = ["steps=1", "checkpoint.every=1", "group_size=2", "prompts_per_step=1", "agent.max_new_tokens=16"]


def test_same_location_resolves_local_paths_and_keeps_uris(tmp_path, monkeypatch):
    from paravt_core.stage import same_location

    (tmp_path / "run" / "sft" / "final").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    absolute = str(tmp_path / "run" / "sft" / "final")
    assert same_location(absolute, "run/sft/final")
    assert same_location(absolute + "/", "./run/sft/../sft/final")
    assert same_location("file://" + absolute, "run/sft/final")
    assert not same_location(absolute, "run/sft")
    assert same_location("s3://b/run/sft/final/", "s3://b/run/sft/final")
    assert not same_location("s3://b/run/sft/final", "s3://c/run/sft/final")
    assert same_location("Qwen/Qwen3-VL-8B-Instruct", "Qwen/Qwen3-VL-8B-Instruct")  # a hub id: as written


def test_rerun_with_the_reference_written_relative_resumes(rl_data, tiny_model_dir, tmp_path, monkeypatch):
    model = tmp_path / "run" / "sft" / "final"
    model.parent.mkdir(parents=True)
    model.symlink_to(Path(tiny_model_dir).resolve(), target_is_directory=True)
    out = tmp_path / "run" / "rl"
    run(tiny_rl_config(rl_data, str(model), str(out), *SHORT))  # as `make demo` does: absolute paths
    assert storage.is_complete(str(out))

    monkeypatch.chdir(tmp_path)  # as the README's next step does: the preset's relative paths
    result = run(tiny_rl_config(rl_data, "run/sft/final", "run/rl", *SHORT))
    assert result.metrics["steps"] == 1  # resumed after the finished step: nothing trained again
    assert storage.is_complete(str(out))


def _finished_run_and_another_reference(rl_data, tiny_model_dir, tmp_path):
    out = tmp_path / "rl"
    run(tiny_rl_config(rl_data, tiny_model_dir, str(out), *SHORT))
    other = tmp_path / "other-reference"  # a real model, in another folder: a different reference
    shutil.copytree(tiny_model_dir, other)
    cfg = tiny_rl_config(rl_data, tiny_model_dir, str(out), *SHORT, f"reference_model={other}", "steps=2")
    return out, cfg


def test_a_different_reference_is_refused_before_the_output_is_touched(rl_data, tiny_model_dir, tmp_path):
    """A finished output: the changed-config rule names the key (more steps alone would continue)."""
    out, cfg = _finished_run_and_another_reference(rl_data, tiny_model_dir, tmp_path)
    config_before = (out / "config.yaml").read_bytes()
    with pytest.raises(UsageError, match=r"made with a different config \(reference_model: '' -> "):
        run(cfg)
    assert storage.is_complete(str(out))  # the finished run still reads as finished
    assert (out / "config.yaml").read_bytes() == config_before
    assert os.listdir(out / "checkpoints") == ["step_00000001"]


def test_an_interrupted_run_resumed_against_another_reference_is_refused_untouched(
    rl_data,
    tiny_model_dir,
    tmp_path,
):
    """No ``_COMPLETE`` (a run cut short): its checkpoint's reference is checked, still before anything is
    written."""
    out, cfg = _finished_run_and_another_reference(rl_data, tiny_model_dir, tmp_path)
    storage.clear_complete(str(out))
    config_before = (out / "config.yaml").read_bytes()
    with pytest.raises(ConfigError, match="trained against reference"):
        run(cfg)
    assert (out / "config.yaml").read_bytes() == config_before
    assert os.listdir(out / "checkpoints") == ["step_00000001"]
