"""Every stage refuses an ``output`` that holds another stage's complete result, whichever way it is started:
the check sits at the top of each ``paravt_core.<stage>.stage.run`` (what the KFP components call), not only
in the CLI. Nothing is read, written or loaded before it."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from paravt_core import storage
from paravt_core.cli_errors import UsageError
from paravt_core.config import stage_config

# The stage whose complete result sits in the output, for each stage under test.
OWNER = {"data": "sft", "sft": "data", "rl": "data", "eval": "sft", "report": "eval"}


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("stage", sorted(OWNER))
def test_stage_run_refuses_another_stages_complete_output(stage: str, tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "metrics.json").write_text('{"mine": 1}')
    storage.mark_complete(str(taken), {"stage": OWNER[stage]})
    before = _tree(taken)
    # Every other field at its default: inputs that do not exist here, so anything past the check would fail
    # with another message.
    model = stage_config(stage)
    scratch = {"work_dir": str(tmp_path / "work")} if "work_dir" in model.model_fields else {}
    cfg = model(output=str(taken), **scratch)
    run = importlib.import_module(f"paravt_core.{stage}.stage").run
    with pytest.raises(UsageError) as err:
        run(cfg)
    assert str(err.value) == (
        f"output {taken} holds a complete {OWNER[stage]} result; give the {stage} stage its own output "
        "(output=...)"
    )
    assert _tree(taken) == before  # no config.yaml, no marker cleared
    assert not (tmp_path / "work").exists()


def test_a_stage_may_rerun_into_its_own_complete_output(tmp_path: Path) -> None:
    from paravt_core.stage import check_output

    storage.mark_complete(str(tmp_path), {"stage": "eval"})
    check_output("eval", str(tmp_path))  # its own: resumes / reuses, no error
    with pytest.raises(UsageError, match="holds a complete eval result"):
        check_output("report", str(tmp_path))
