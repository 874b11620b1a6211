"""PARAVT_FAULT: fires at the named stage and step only, and only once with PARAVT_FAULT_ONCE."""

from __future__ import annotations

import pytest

from paravt_core import faults


def test_no_fault_when_unset(monkeypatch) -> None:
    monkeypatch.delenv("PARAVT_FAULT", raising=False)
    faults.check("sft", 1)  # no-op


def test_fires_at_the_named_stage_and_step_only(monkeypatch) -> None:
    monkeypatch.setenv("PARAVT_FAULT", "sft:3")
    monkeypatch.delenv("PARAVT_FAULT_ONCE", raising=False)
    faults.check("sft", 2)
    faults.check("rl", 3)
    for _ in range(2):  # without a once-file it fires every time
        with pytest.raises(faults.InjectedFault, match="sft after step 3"):
            faults.check("sft", 3)


def test_once_file_disarms_after_firing(monkeypatch, tmp_path) -> None:
    once = tmp_path / "fired" / "marker"
    monkeypatch.setenv("PARAVT_FAULT", "rl:1")
    monkeypatch.setenv("PARAVT_FAULT_ONCE", str(once))
    with pytest.raises(faults.InjectedFault):
        faults.check("rl", 1)
    assert once.read_text() == "rl:1\n"
    faults.check("rl", 1)  # the retry runs through


@pytest.mark.parametrize("spec", ["sft", "sft:x", ":3"])
def test_malformed_spec_is_an_error(monkeypatch, spec) -> None:
    monkeypatch.setenv("PARAVT_FAULT", spec)
    with pytest.raises(ValueError, match="expected <stage>:<step>"):
        faults.check("sft", 0)
