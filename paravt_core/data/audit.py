"""The data audit: one JSON report, a printed table, and the too-many-bad-rows gate.

A row is *bad* when it is invalid (any reason but ``missing_file``) or references a missing file (one a
downloaded archive holds, or any absent file when no archive was left out); bad rows are written to
``rejected/`` with their reason. A row that references media of an archive that was not downloaded
(selective include patterns; see ``sentinel.Presence``) is *skipped*: counted, not written, not bad.
RL rows without a ``question_type`` are kept as ``oe`` and counted (``question_type_defaulted``).
The gate: bad / (rows - skipped) must not exceed ``validate.max_bad_fraction``."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from paravt_core.data import sentinel
from paravt_core.data.materialize import MAX_EXAMPLES, FileReport
from paravt_core.data.validate import DataError, Reason

GATE_EXAMPLES = 5  # rejected rows named in the failure message


def build_audit(
    reports: list[FileReport], max_bad_fraction: float, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Aggregate per-file reports into the audit dict written as ``audit.json``."""
    rows = sum(r.rows for r in reports)
    skipped = sum(r.skipped_not_downloaded for r in reports)
    bad = sum(r.rejected for r in reports)
    missing_rows = sum(r.missing_rows for r in reports)
    considered = rows - skipped
    fraction = bad / considered if considered else 0.0
    by_reason: Counter = Counter()
    for r in reports:
        by_reason.update({k: v for k, v in r.reasons.items() if k != Reason.MISSING_FILE.label})
    missing = set().union(*(r.missing_files for r in reports)) if reports else set()
    by_bucket = Counter(sentinel.bucket_of(p) or "?" for p in missing)
    not_downloaded = set().union(*(r.not_downloaded_files for r in reports)) if reports else set()
    groups = sorted({sentinel.group_of(p) or "?" for p in not_downloaded})
    examples = [dict(e, file=r.name) for r in reports for e in r.examples][:MAX_EXAMPLES]
    audit: dict[str, Any] = {
        "totals": {
            "files": len(reports),
            "rows": rows,
            "kept": sum(r.kept for r in reports),
            "rejected": bad,
            "invalid_rows": bad - missing_rows,
            "missing_file_rows": missing_rows,
            "skipped_not_downloaded": skipped,
            "bad_fraction": fraction,
            "max_bad_fraction": max_bad_fraction,
            "passed": fraction <= max_bad_fraction,
            "rows_rewritten_in_python": sum(r.python_rows for r in reports),
            "question_type_defaulted": sum(r.question_type_defaulted for r in reports),
        },
        "files": [
            {
                "name": r.name,
                "kind": r.kind,
                "split": r.split,
                "rows": r.rows,
                "kept": r.kept,
                "rejected": r.rejected,
                "missing_file_rows": r.missing_rows,
                "missing_files": len(r.missing_files),
                "skipped_not_downloaded": r.skipped_not_downloaded,
                "reasons": dict(sorted(r.reasons.items())),
                "question_type_defaulted": r.question_type_defaulted,
                "rejected_rows": r.rejected_rows,
                "output": r.output,
                "rejected_output": r.rejected_output,
                "seconds": round(r.seconds, 3),
            }
            for r in reports
        ],
        "invalid_by_reason": dict(sorted(by_reason.items())),
        "missing_files": {
            "distinct": len(missing),
            "by_bucket": dict(sorted(by_bucket.items())),
            "rows_by_split": {r.split: r.missing_rows for r in reports if r.missing_rows},
            "examples": sorted(missing)[:MAX_EXAMPLES],
        },
        "not_downloaded": {"groups": groups, "files": len(not_downloaded), "rows": skipped},
        "examples": examples,
    }
    if extra:
        audit.update(extra)
    return audit


def print_audit(audit: dict[str, Any], console: Console) -> None:
    """Rows per file, then invalid rows by reason and missing files by bucket/split."""
    # Compact box and unwrapped headers and numbers: the table fits an 80-column terminal; only the
    # reasons column folds.
    table = Table(
        title="paravt data: audit",
        caption="rej: rejected · miss: media file missing · skip: media not downloaded",
        show_lines=False,
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for col in ("file", "kind", "rows", "kept", "rej", "miss", "skip", "reasons"):
        left = col in ("file", "kind", "reasons")
        wrap = col == "reasons"
        table.add_column(
            col,
            justify="left" if left else "right",
            overflow="fold",
            no_wrap=not wrap,
            min_width=12 if wrap else None,
        )
    for f in audit["files"]:
        reasons = ", ".join(f"{k}={v}" for k, v in f["reasons"].items())
        table.add_row(
            f["split"].removeprefix("paravt_"),
            f["kind"],
            str(f["rows"]),
            str(f["kept"]),
            str(f["rejected"]),
            str(f["missing_file_rows"]),
            str(f["skipped_not_downloaded"]),
            reasons or "-",
        )
    t = audit["totals"]
    table.add_section()
    table.add_row(
        "total",
        "",
        str(t["rows"]),
        str(t["kept"]),
        str(t["rejected"]),
        str(t["missing_file_rows"]),
        str(t["skipped_not_downloaded"]),
        "",
    )
    console.print(table)
    console.print(f"bad rows: {t['bad_fraction']:.3%} (limit {t['max_bad_fraction']:.3%})")
    if audit["invalid_by_reason"]:
        console.print(
            "invalid rows by reason: " + ", ".join(f"{k}={v}" for k, v in audit["invalid_by_reason"].items())
        )
    missing = audit["missing_files"]
    if missing["distinct"]:
        console.print(
            f"missing files: {missing['distinct']} distinct; by bucket "
            + ", ".join(f"{k}={v}" for k, v in missing["by_bucket"].items())
            + "; rows by split "
            + ", ".join(f"{k}={v}" for k, v in missing["rows_by_split"].items())
        )
    if t["question_type_defaulted"]:
        console.print(
            f"RL rows without a question_type, kept as open-ended (oe): {t['question_type_defaulted']}"
        )
    nd = audit["not_downloaded"]
    if nd["rows"]:
        console.print(
            f"skipped {nd['rows']} rows whose media was not selected for download: {', '.join(nd['groups'])}"
        )


def check_gate(audit: dict[str, Any], audit_uri: str) -> None:
    """Raise ``DataError`` when the share of bad rows is above the configured maximum."""
    t = audit["totals"]
    if t["passed"]:
        return
    reasons = dict(audit["invalid_by_reason"])
    if t["missing_file_rows"]:
        reasons[Reason.MISSING_FILE.label] = t["missing_file_rows"]
    summary = ", ".join(f"{k}={v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1]))
    considered = t["rows"] - t["skipped_not_downloaded"]
    first = [f"{f['name']} row {e['row']}: {e['reason']}" for f in audit["files"] for e in f["rejected_rows"]]
    shown = "\n  ".join(first[:GATE_EXAMPLES])
    more = f"\n  ... and {t['rejected'] - GATE_EXAMPLES} more" if t["rejected"] > GATE_EXAMPLES else ""
    raise DataError(
        f"data stage failed: {t['rejected']} of {considered} rows ({t['bad_fraction']:.2%}) are missing or "
        f"invalid, above validate.max_bad_fraction={t['max_bad_fraction']:.2%} ({summary}); "
        f"rejected rows and the audit are in {audit_uri}:\n  {shown}{more}"
    )
