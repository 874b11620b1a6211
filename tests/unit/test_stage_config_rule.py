"""One rule for a complete stage output rerun with another config: the same config
reuses it, a changed one is continued where that means something (more RL steps) or refused with the
differing keys named (exit status 2), never silently reused. Data rebuilds on a changed fingerprint and eval
refuses records of another model/engine (their own tests); these pin SFT and RL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from paravt_core import storage
from paravt_core.cli import main
from paravt_core.cli_errors import UsageError
from paravt_core.config import SftConfig, load_config
from paravt_core.stage import announce_config, config_changes, refuse_changed_config
from tests.support.paths import ROOT

REPO = ROOT


def _finished_sft(tmp_path: Path, **overrides: str) -> SftConfig:
    """An SFT output as a finished 30-step run leaves it: config.yaml (written by the stage's own
    announce_config), metrics.json, _COMPLETE."""
    out = tmp_path / "sft"
    cfg = load_config(
        SftConfig, REPO / "configs/sft/tiny.yaml", [f"output={out}", f"data={tmp_path / 'data'}"]
    )
    announce_config("sft", cfg, str(out))
    storage.write_bytes(str(out / "metrics.json"), json.dumps({"steps": 30}).encode())
    storage.mark_complete(str(out), {"stage": "sft", "steps": 30})
    return cfg


def test_sft_refuses_a_changed_config_on_a_finished_output_naming_the_key(tmp_path: Path, capsys) -> None:
    """Fewer steps than the finished run: refused (more steps continue it: test_sft_train's S3 resume test)."""
    _finished_sft(tmp_path)
    argv = ["sft", "--config", str(REPO / "configs/sft/tiny.yaml"), f"output={tmp_path / 'sft'}"]
    code = main([*argv, f"data={tmp_path / 'data'}", "trainer.steps=20"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "trainer.steps: 30 -> 20" in err and "nothing to do" not in err
    assert storage.is_complete(str(tmp_path / "sft"))  # the refused rerun touched nothing
    more = load_config(
        SftConfig, REPO / "configs/sft/tiny.yaml", [f"output={tmp_path / 'sft'}", "trainer.steps=40"]
    )
    more = more.model_copy(update={"data": more.data.model_copy(update={"input": str(tmp_path / "data")})})
    assert refuse_changed_config("sft", str(tmp_path / "sft"), more, may_grow=("trainer.steps",)) == {
        "trainer.steps": (30, 40)
    }


def test_sft_same_config_is_reused_also_when_paths_are_spelled_differently(
    tmp_path: Path, monkeypatch
) -> None:
    from paravt_core.sft.stage import run

    cfg = _finished_sft(tmp_path)
    monkeypatch.chdir(
        tmp_path
    )  # the saved config holds absolute paths; this rerun names them relative to here
    again = cfg.model_copy(update={"output": "sft", "data": cfg.data.model_copy(update={"input": "./data"})})
    assert config_changes(str(tmp_path / "sft"), again) == {}
    result = run(again)
    assert result.metrics == {"steps": 30, "reused_output": True}
    # through a symlink to the same folder (a linked home or scratch directory): the same location too
    (tmp_path / "linked").symlink_to(tmp_path)
    linked = cfg.model_copy(update={"data": cfg.data.model_copy(update={"input": "linked/data"})})
    assert config_changes(str(tmp_path / "sft"), linked) == {}
    elsewhere = cfg.model_copy(update={"data": cfg.data.model_copy(update={"input": "linked/sft"})})
    assert set(config_changes(str(tmp_path / "sft"), elsewhere)) == {"data.input"}


def test_sft_changed_lr_and_data_are_both_named(tmp_path: Path) -> None:
    from paravt_core.sft.stage import run

    cfg = _finished_sft(tmp_path)
    changed = cfg.model_copy(
        update={
            "trainer": cfg.trainer.model_copy(update={"lr": 0.001}),
            "data": cfg.data.model_copy(update={"input": str(tmp_path / "other")}),
        }
    )
    with pytest.raises(UsageError) as err:
        run(changed)
    text = str(err.value)
    assert "trainer.lr: 0.003 -> 0.001" in text
    assert f"data.input: '{tmp_path / 'data'}' -> '{tmp_path / 'other'}'" in text


def test_run_only_fields_do_not_count_as_a_change(tmp_path: Path) -> None:
    cfg = _finished_sft(tmp_path)
    moved = cfg.model_copy(
        update={
            "work_dir": str(tmp_path / "elsewhere"),
            "checkpoint": cfg.checkpoint.model_copy(update={"every": 5}),
        }
    )
    assert config_changes(str(tmp_path / "sft"), moved) == {}


def test_rl_more_steps_continue_other_changes_are_refused(tmp_path: Path, capsys) -> None:
    from paravt_core.rl.config import RlConfig

    out = tmp_path / "rl"
    cfg = load_config(RlConfig, REPO / "configs/rl/tiny.yaml", [f"output={out}"])
    announce_config("rl", cfg, str(out))
    storage.mark_complete(str(out), {"stage": "rl"})
    refuse_changed_config(
        "rl", str(out), cfg.model_copy(update={"steps": 5}), may_grow=("steps",)
    )  # continues
    with pytest.raises(UsageError, match=r"steps: 3 -> 2"):  # fewer steps: refused
        refuse_changed_config("rl", str(out), cfg.model_copy(update={"steps": 2}), may_grow=("steps",))
    # through the CLI: a changed seed ends in one line and status 2 before any model is loaded
    code = main(["rl", "--config", str(REPO / "configs/rl/tiny.yaml"), f"output={out}", "seed=7"])
    err = capsys.readouterr().err
    assert code == 2 and "seed: 0 -> 7" in err, err
    assert storage.is_complete(str(out))


def test_rl_same_config_on_a_complete_output_is_reused_in_one_line(tmp_path: Path, capsys) -> None:
    """Like SFT and data: the rerun says in one line that it reuses the output and loads nothing (the
    tiny preset's model path does not exist here: anything loaded would fail)."""
    from paravt_core.rl.config import RlConfig

    out = tmp_path / "rl"
    cfg = load_config(RlConfig, REPO / "configs/rl/tiny.yaml", [f"output={out}"])
    announce_config("rl", cfg, str(out))
    summary = {"steps": 3, "reward_first": 0.2125, "f_tau_curve": [[1, 0.0]], "last_step": {"step": 2}}
    storage.write_bytes(str(out / "metrics.json"), json.dumps(summary).encode())
    storage.mark_complete(str(out), {"stage": "rl", "steps": 3})
    capsys.readouterr()
    code = main(["rl", "--config", str(REPO / "configs/rl/tiny.yaml"), f"output={out}"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"paravt rl: {out} is complete with the same config; reused, nothing to do" in captured.err
    assert json.loads(captured.out)["metrics"] == {"steps": 3, "reward_first": 0.2125, "reused_output": True}
    assert storage.is_complete(str(out))


def test_stage_messages_stay_one_line_past_the_console_width(capsys) -> None:
    """A stage's one-line message with a long output path (a "reused" note) was broken by rich at 120
    columns in logs (80 on a terminal), splitting the path; it now stays one line for grep and copying."""
    from paravt_core.stage import console

    path = "s3://bucket/" + "/".join(f"experiment-{i:02d}" for i in range(14)) + "/sft"
    line = f"paravt sft: {path} is complete with the same config; reused, nothing to do"
    assert len(line) > console.width
    console.print(line, highlight=False)
    assert capsys.readouterr().err == line + "\n"
