"""``demo_data`` is a directory of benchmark fixtures written by the synthetic-data tool
(``paravt synth DIR --eval-fixtures``); the eval stage only reads its manifest and never imports
``paravt_core.synth``. A ``demo_data`` without fixtures is one line naming the command that writes them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from paravt_core.cli import main
from paravt_core.eval import benchmarks as registry
from paravt_core.eval.config import EvalConfig
from paravt_core.eval.stage import EvalError, resolve_benchmarks
from tests.support.paths import ROOT

REPO = ROOT


def test_manifest_resolves_every_benchmark_to_existing_files(eval_fixtures_dir: Path) -> None:
    manifest = json.loads((eval_fixtures_dir / registry.DEMO_MANIFEST).read_text())
    # stored relative (the directory may move), resolved against demo_data
    assert all(not os.path.isabs(v) for e in manifest for k, v in e.items() if k != "name")
    cfg = EvalConfig(demo_data=str(eval_fixtures_dir), benchmarks=[{"name": "mlvu", "limit": 2}])
    (mlvu,) = resolve_benchmarks(cfg)
    assert (mlvu.name, mlvu.limit) == ("mlvu", 2)
    assert mlvu.source == str(eval_fixtures_dir / "mlvu") and Path(mlvu.source).is_dir()
    everything = resolve_benchmarks(EvalConfig(demo_data=str(eval_fixtures_dir)))
    assert [b.name for b in everything] == ["synthetic", *[n for n in registry.REGISTRY if n != "synthetic"]]
    assert all(Path(b.source).exists() and Path(b.media_root).is_dir() for b in everything)


def test_demo_data_without_fixtures_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(EvalError) as err:
        resolve_benchmarks(EvalConfig(demo_data=str(tmp_path / "nothing")))
    assert str(err.value) == (
        f"demo_data {tmp_path / 'nothing'} holds no benchmark fixtures (benchmarks.json); write them with "
        f"`paravt synth {tmp_path / 'nothing'} --eval-fixtures` (`paravt demo` does) or leave demo_data empty"
    )
    cmd = [sys.executable, "-m", "paravt_core.cli", "eval", f"demo_data={tmp_path / 'nothing'}"]
    cmd += [f"output={tmp_path / 'out'}", f"work_dir={tmp_path / 'work'}", "model=unused"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == f"paravt eval: {err.value}"


def test_synth_eval_fixtures_verb_writes_a_demo_data_directory(tmp_path: Path, capsys) -> None:
    out = tmp_path / "fx"
    assert main(["synth", str(out), "--eval-fixtures"]) == 0
    assert capsys.readouterr().out.strip().endswith(f"use demo_data={out}")
    entries = registry.demo_entries(str(out))
    assert {e["name"] for e in entries} == set(registry.REGISTRY)
    # someone else's directory is refused
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    assert main(["synth", str(tmp_path / "mine"), "--eval-fixtures"]) == 2
    assert "mine is not empty and holds no eval fixtures; use --force" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path / "mine")) == ["notes.txt"]
