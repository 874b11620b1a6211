"""The lifecycle every stage's ``run`` goes through (``paravt_core.stage.StageRun``), on a toy config in a tmp
directory: another stage's output refused first, a complete output reused or refused naming the differing keys,
more of a ``may_grow`` field continued (the marker cleared), a changed config redone where the stage says so,
a failed body leaving no ``_COMPLETE``, and only rank 0 printing and writing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from paravt_core import storage
from paravt_core.cli_errors import UsageError
from paravt_core.stage import StageResult, StageRun, is_rank0


class Toy(BaseModel):
    """A stage config as the lifecycle sees it: its output, a count that may grow, two fields that may not."""

    output: str = ""
    steps: int = 3
    lr: float = 0.1
    name: str = "a"


def _finished(out: Path, cfg: Toy) -> None:
    """A complete toy output made with ``cfg``, as the lifecycle itself leaves it."""
    run = StageRun.open("toy", str(out))
    run.begin(cfg)
    (out / "metrics.json").write_text(json.dumps({"steps": cfg.steps}))
    run.done({"metrics": str(out / "metrics.json")}, {"steps": cfg.steps}, steps=cfg.steps)


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def test_a_first_run_begins_saves_its_config_and_marks_complete_last(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    cfg = Toy(output=str(out), steps=4)
    run = StageRun.open("toy", str(out))
    assert (run.stage, run.output, run.lead, run.complete) == ("toy", str(out), True, False)
    assert not run.reusable(cfg) and run.grown == {}
    run.begin(cfg)
    assert yaml.safe_load((out / "config.yaml").read_text()) == {
        "output": str(out),
        "steps": 4,
        "lr": 0.1,
        "name": "a",
    }
    assert not storage.is_complete(str(out))
    assert capsys.readouterr().err == f"paravt toy: resolved config saved to {out / 'config.yaml'}\n"
    result = run.done({"metrics": "m"}, {"steps": 4}, steps=4)
    assert result == StageResult("toy", {"metrics": "m"}, {"steps": 4})
    assert storage.completion_info(str(out))["info"] == {"stage": "toy", "steps": 4}


def test_another_stages_complete_output_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    storage.mark_complete(str(tmp_path), {"stage": "sft"})
    before = _files(tmp_path)
    with pytest.raises(UsageError) as err:
        StageRun.open("toy", str(tmp_path))
    assert str(err.value) == (
        f"output {tmp_path} holds a complete sft result; give the toy stage its own output (output=...)"
    )
    assert _files(tmp_path) == before


def test_the_same_config_reuses_the_complete_output_in_one_line(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    _finished(out, Toy(output=str(out)))
    before = _files(out)
    capsys.readouterr()
    run = StageRun.open("toy", str(out))
    assert run.complete and run.reusable(Toy(output=str(out)))
    result = run.reused({"metrics": "m"}, {"steps": 3})
    assert result == StageResult("toy", {"metrics": "m"}, {"steps": 3, "reused_output": True})
    assert capsys.readouterr().err == (
        f"paravt toy: {out} is complete with the same config; reused, nothing to do\n"
    )
    assert _files(out) == before  # nothing rewritten, the marker kept
    run.reused({}, {}, message="paravt toy: inputs unchanged")  # a stage's own line
    assert capsys.readouterr().err == "paravt toy: inputs unchanged\n"


def test_a_changed_config_is_refused_naming_every_differing_key(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _finished(out, Toy(output=str(out)))
    before = _files(out)
    run = StageRun.open("toy", str(out))
    with pytest.raises(UsageError) as err:
        run.reusable(Toy(output=str(out), lr=0.2, name="b"), may_grow=("steps",))
    assert str(err.value) == (
        f"{out} is a complete toy output made with a different config (lr: 0.1 -> 0.2, name: 'a' -> 'b'); "
        "use another output= (or delete this one) to run this config"
    )
    # fewer steps is no growth: refused as well
    with pytest.raises(UsageError, match=r"\(steps: 3 -> 2\)"):
        run.reusable(Toy(output=str(out), steps=2), may_grow=("steps",))
    # growth of a field not named in may_grow: refused
    with pytest.raises(UsageError, match=r"\(steps: 3 -> 5\)"):
        run.reusable(Toy(output=str(out), steps=5))
    assert _files(out) == before


def test_a_grown_field_continues_and_begin_clears_the_marker(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _finished(out, Toy(output=str(out)))
    more = Toy(output=str(out), steps=5)
    run = StageRun.open("toy", str(out))
    assert not run.reusable(more, may_grow=("steps",))
    assert run.grown == {"steps": (3, 5)}
    assert storage.is_complete(str(out))  # deciding touches nothing
    run.begin(more)
    assert not storage.is_complete(str(out))
    assert yaml.safe_load((out / "config.yaml").read_text())["steps"] == 5
    run.done({}, {}, steps=5)
    assert storage.completion_info(str(out))["info"] == {"stage": "toy", "steps": 5}


def test_redo_runs_a_changed_config_again_over_the_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _finished(out, Toy(output=str(out)))
    run = StageRun.open("toy", str(out))
    assert run.reusable(Toy(output=str(out)), on_change="redo")
    assert not run.reusable(Toy(output=str(out), lr=0.2), on_change="redo")  # no refusal
    assert run.grown == {}
    run.begin(Toy(output=str(out), lr=0.2))
    assert not storage.is_complete(str(out))


def toy_stage(cfg: Toy, body: Callable[[], dict[str, int]]) -> StageResult:
    """A stage's ``run`` as the five stages write it, around ``body`` (the stage's own work)."""
    run = StageRun.open("toy", cfg.output)
    if run.reusable(cfg, may_grow=("steps",)):
        return run.reused({}, json.loads(storage.read_bytes(storage.join(cfg.output, "metrics.json"))))
    run.begin(cfg)
    metrics = body()
    storage.write_bytes(storage.join(cfg.output, "metrics.json"), json.dumps(metrics).encode())
    return run.done({}, metrics, steps=cfg.steps)


def test_a_failed_body_leaves_no_complete_marker(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert toy_stage(Toy(output=str(out)), lambda: {"steps": 3}).metrics == {"steps": 3}
    assert toy_stage(Toy(output=str(out)), lambda: {"steps": -1}).metrics == {
        "steps": 3,
        "reused_output": True,
    }

    def fails() -> dict[str, int]:
        raise RuntimeError("body failed")

    with pytest.raises(RuntimeError, match="body failed"):
        toy_stage(Toy(output=str(out), steps=6), fails)  # continues the complete output, then fails
    assert not (out / "_COMPLETE").exists()
    assert yaml.safe_load((out / "config.yaml").read_text())["steps"] == 6
    # the next run sees an incomplete output: nothing reused, nothing refused; it runs and completes
    assert toy_stage(Toy(output=str(out), lr=0.5), lambda: {"steps": 7}).metrics == {"steps": 7}
    assert storage.completion_info(str(out))["info"] == {"stage": "toy", "steps": 3}


def test_only_the_lead_prints_and_writes(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    _finished(out, Toy(output=str(out)))
    before = _files(out)
    capsys.readouterr()
    follower = StageRun.open("toy", str(out), lead=False)
    assert follower.reusable(Toy(output=str(out)))  # the same decision on every rank
    assert follower.reused({}, {"steps": 3}).metrics == {"steps": 3, "reused_output": True}
    more = Toy(output=str(out), steps=4)
    assert not follower.reusable(more, may_grow=("steps",)) and follower.grown == {"steps": (3, 4)}
    follower.begin(more)
    assert follower.done({"m": "x"}, {"steps": 4}, steps=4) == StageResult("toy", {"m": "x"}, {"steps": 4})
    assert _files(out) == before  # config, metrics and marker as the lead left them
    assert capsys.readouterr().err == ""


def test_begin_and_done_under_another_root(tmp_path: Path) -> None:
    """A shard writes its own folder under the output: its marker and config there, the output's untouched."""
    out = tmp_path / "out"
    shard = out / "shards" / "0-of-2"
    cfg = Toy(output=str(out))
    run = StageRun.open("toy", str(out))
    run.begin(cfg, root=str(shard))
    assert (shard / "config.yaml").exists() and not (out / "config.yaml").exists()
    run.done({"shard": str(shard)}, {"records": 2}, root=str(shard), records=2)
    assert storage.completion_info(str(shard))["info"] == {"stage": "toy", "records": 2}
    assert not storage.is_complete(str(out))
    # a rerun of the shard: its own marker goes before it rewrites its records
    StageRun.open("toy", str(out)).begin(cfg, root=str(shard))
    assert not storage.is_complete(str(shard))


def test_absolute_names_a_local_output_by_its_absolute_path(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert StageRun.open("toy", "out").output == "out"
    assert StageRun.open("toy", "out", absolute=True).output == str(tmp_path / "out")
    assert StageRun.open("toy", "./a/../out", absolute=True).output == str(tmp_path / "out")


def test_rank0_reads_torchrun_rank(monkeypatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    assert is_rank0()
    monkeypatch.setenv("RANK", "0")
    assert is_rank0()
    monkeypatch.setenv("RANK", "1")
    assert not is_rank0()
