"""The audit numbers and the too-many-bad-rows gate (the threshold is inclusive)."""

from __future__ import annotations

from collections import Counter

import pytest
from rich.console import Console

from paravt_core.data.audit import build_audit, check_gate, print_audit
from paravt_core.data.materialize import FileReport
from paravt_core.data.validate import DataError


def _report(
    name: str, rows: int, bad: dict[str, int], skipped: int = 0, missing: set[str] | None = None
) -> FileReport:
    r = FileReport(name=name, kind="sft", rows=rows)
    r.rejected = sum(bad.values())
    r.kept = rows - r.rejected - skipped
    r.skipped_not_downloaded = skipped
    r.reasons = Counter(bad)
    r.missing_rows = bad.get("missing_file", 0)
    r.missing_files = missing or set()
    r.rejected_rows = [
        {"row": i, "reason": k} for i, k in enumerate(k for k, v in bad.items() for _ in range(v))
    ]
    return r


def test_totals_and_breakdowns() -> None:
    reports = [
        _report(
            "paravt_sft_a_100.parquet",
            100,
            {"missing_file": 2},
            missing={"museg/charades/x.mp4", "selfqa/y.mp4"},
        ),
        _report("paravt_sft_b_300.parquet", 300, {"messages_not_json": 1}, skipped=100),
    ]
    audit = build_audit(reports, 0.01)
    t = audit["totals"]
    assert (t["rows"], t["kept"], t["rejected"], t["skipped_not_downloaded"]) == (400, 297, 3, 100)
    assert (t["invalid_rows"], t["missing_file_rows"]) == (1, 2)
    assert t["bad_fraction"] == pytest.approx(3 / 300)  # skipped rows are not in the denominator
    assert t["passed"]  # 1% exactly is allowed
    assert audit["invalid_by_reason"] == {"messages_not_json": 1}
    assert audit["missing_files"]["by_bucket"] == {"museg/charades": 1, "selfqa": 1}
    assert audit["missing_files"]["rows_by_split"] == {"paravt_sft_a_100": 2}
    console = Console(record=True, width=140)
    print_audit(audit, console)
    text = console.export_text()
    assert "sft_a_100" in text and "missing files: 2 distinct" in text


def test_gate() -> None:
    ok = build_audit([_report("paravt_sft_a_200.parquet", 200, {"no_assistant_turn": 1})], 0.005)
    check_gate(ok, "/out")  # 0.5% == threshold: passes
    bad = build_audit([_report("paravt_sft_a_200.parquet", 200, {"no_assistant_turn": 2})], 0.005)
    with pytest.raises(DataError) as err:
        check_gate(bad, "/out")
    msg = str(err.value)
    assert "2 of 200 rows (1.00%)" in msg and "max_bad_fraction=0.50%" in msg and "no_assistant_turn=2" in msg
    assert "paravt_sft_a_200.parquet row 1: no_assistant_turn" in msg


def test_empty_dataset_passes() -> None:
    audit = build_audit([], 0.005)
    assert audit["totals"]["bad_fraction"] == 0.0 and audit["totals"]["passed"]


def _audit() -> dict:
    row = {"kind": "sft", "rows": 12400, "kept": 12391, "rejected": 9, "missing_file_rows": 2}
    files = [
        {**row, "split": "paravt_sft_longvideoreason_5k2", "skipped_not_downloaded": 0, "reasons": {}},
        {
            **row,
            "split": "paravt_rl_diverse_4k4",
            "kind": "rl",
            "skipped_not_downloaded": 1200,
            "reasons": {"bad_json": 3, "no_assistant_turn": 4, "missing_file": 2},
        },
    ]
    totals = {
        "rows": 24800,
        "kept": 24782,
        "rejected": 18,
        "missing_file_rows": 4,
        "skipped_not_downloaded": 1200,
        "bad_fraction": 18 / 24800,
        "max_bad_fraction": 0.005,
        "question_type_defaulted": 0,
    }
    return {
        "files": files,
        "totals": totals,
        "invalid_by_reason": {},
        "missing_files": {"distinct": 0},
        "not_downloaded": {"rows": 0, "groups": []},
    }


def test_audit_table_fits_80_columns_with_each_file_on_one_line() -> None:
    console = Console(width=80, record=True, force_terminal=False)
    print_audit(_audit(), console)
    lines = console.export_text().splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    row = next(line for line in lines if line.lstrip().startswith("sft_longvideoreason_5k2"))
    assert row.split()[:7] == ["sft_longvideoreason_5k2", "sft", "12400", "12391", "9", "2", "0"]
    assert "bad rows: 0.073% (limit 0.500%)" in lines  # 18 / 24800
