"""Small things a user reads: the audit table in an 80-column terminal, no empty Charades plot."""

from __future__ import annotations

from rich.console import Console

from paravt_core.data.audit import print_audit
from paravt_core.eval.report import plots


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


def test_no_charades_plot_when_charades_was_not_evaluated() -> None:
    results = {"protocols": {"agentic": {"videomme": {"headline": "accuracy", "accuracy": 0.5}}}}
    records = {"agentic": {"videomme": [{"status": "ok", "score": 1.0, "tool_calls": 1}]}}
    assert "charades_iou" not in plots(results, records)
    records["agentic"]["charades"] = [{"status": "ok", "score": 0.4, "tool_calls": 0}]
    results["protocols"]["agentic"]["charades"] = {"headline": "miou", "miou": 0.4}
    assert "charades_iou" in plots(results, records)
