"""The ablation comparison report: one row per variant, ours beside the paper's, and every f_tau curve.

Reads what the stages wrote under the run's root (``paravt_core.ablation`` gives the layout): each
variant's RL ``metrics.json`` (``f_tau_final``, ``kappa_final``, ``f_tau_curve``) and each benchmark's eval
``results.json`` (headline of the study's protocol, the eval preset, the agent's tool settings and the
prompt set's checksum). Writes under ``output``::

    report.html        self-contained page, the look of ``paravt report`` (same stylesheet)
    report.md          the same table in Markdown (the KFP UI renders it)
    f_tau_curves.png   f_tau per RL step, one line per variant
    comparison.json    every row as collected (ours, paper, difference, protocol, checksum, curve)
    metrics.json       flat {"<variant>.<column>": ours}
    _COMPLETE
"""

from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from paravt_core import storage
from paravt_core.ablation import (
    PAPER_KEYS,
    AblationStudy,
    eval_prefix,
    report_output,
    rl_output,
)
from paravt_core.report.render import _CSS, _img
from paravt_core.report.trend import eval_scores
from paravt_core.run_metrics import figure_png, pyplot

COLUMN_LABELS = {"f_tau": "f_τ", "kappa": "κ"}
# The release's eval driver produced the published numbers (docs/method.md §7): only its preset compares like for like.
PAPER_PRESET = "release"


@dataclass
class Row:
    variant: str
    description: str
    ours: dict[str, float | None]
    paper: dict[str, float | None]
    diff: dict[str, float | None]
    protocol: str = ""  # how the benchmarks were run (protocol, preset, frames, tool calls)
    checksum: str = ""  # prompt set checksum(s) of the row's evals
    paper_protocol: bool = False  # every eval of the row used the published numbers' preset
    curve: list[list[float]] = field(default_factory=list)  # [step, f_tau]
    missing: list[str] = field(default_factory=list)  # outputs not found (failed or not run)


def columns(study: AblationStudy) -> list[str]:
    return [*PAPER_KEYS, *study.benchmarks]


def _difference(ours: float | None, paper: float | None) -> float | None:
    return None if ours is None or paper is None else ours - paper


def _rl_numbers(out: str) -> tuple[dict[str, float | None], list[list[float]]] | None:
    if not storage.is_complete(out):
        return None
    summary = json.loads(storage.read_bytes(storage.join(out, "metrics.json")))
    numbers = {"f_tau": summary.get("f_tau_final"), "kappa": summary.get("kappa_final")}
    return numbers, [list(p) for p in summary.get("f_tau_curve", [])]


def _protocol_text(results: dict[str, Any], protocol: str) -> str:
    agent = results.get("config", {}).get("agent", {})
    parts = [protocol, f"preset {results.get('preset') or 'none'}"]
    if "overview_frames" in agent:
        parts.append(f"{agent['overview_frames']} frames")
    if protocol.startswith("agentic") and "max_turns" in agent:
        parts.append(f"{agent['max_turns']} rounds x {agent.get('max_parallel', '?')} calls")
    return ", ".join(parts)


def collect(study: AblationStudy, run_root: str, variants: list[str] | None = None) -> list[Row]:
    """One row per variant (the study's order, limited to ``variants`` when given)."""
    chosen = [v for v in study.variants if variants is None or v.name in variants]
    rows = []
    for v in chosen:
        ours: dict[str, float | None] = dict.fromkeys(columns(study))
        missing: list[str] = []
        curve: list[list[float]] = []
        if v.rl:
            rl = _rl_numbers(rl_output(run_root, v.name))
            if rl is None:
                missing.append("rl")
            else:
                numbers, curve = rl
                ours.update(numbers)
        protocols, checksums, presets = [], [], []
        for bench in study.benchmarks:
            out = storage.join(eval_prefix(run_root, v.name), bench)
            if not storage.is_complete(out):
                missing.append(bench)
                continue
            results = json.loads(storage.read_bytes(storage.join(out, "results.json")))
            ours[bench] = eval_scores(results, bench).get(study.protocol)
            if ours[bench] is None:
                missing.append(f"{bench}:{study.protocol}")
            protocols.append(_protocol_text(results, study.protocol))
            checksums.append(str(results.get("prompt_checksum", "")))
            presets.append(results.get("preset"))
        paper = {c: v.paper.get(c) for c in columns(study)}
        rows.append(
            Row(
                variant=v.name,
                description=v.description,
                ours=ours,
                paper=paper,
                diff={c: _difference(ours[c], paper[c]) for c in columns(study)},
                protocol="; ".join(dict.fromkeys(protocols)),  # one entry unless benchmarks differ
                checksum=", ".join(dict.fromkeys(checksums)),
                paper_protocol=bool(presets) and all(p == PAPER_PRESET for p in presets),
                curve=curve,
                missing=missing,
            )
        )
    return rows


def _num(value: float | None, column: str) -> str:
    if value is None:
        return "—"
    return f"{value:.3f}" if column in PAPER_KEYS else f"{value:.1f}"


def _signed(value: float | None, column: str) -> str:
    if value is None:
        return ""
    return f"{value:+.3f}" if column in PAPER_KEYS else f"{value:+.1f}"


def cell_text(row: Row, column: str) -> str:
    """``ours / paper (difference)``; a dash where a value is missing."""
    text = f"{_num(row.ours[column], column)} / {_num(row.paper[column], column)}"
    diff = _signed(row.diff[column], column)
    return text + (f" ({diff})" if diff else "")


def _label(column: str) -> str:
    return COLUMN_LABELS.get(column, column)


def markdown(study: AblationStudy, rows: list[Row]) -> str:
    cols = columns(study)
    lines = [
        f"# {study.title}\n",
        "Each cell: ours / paper (ours − paper). f_τ: format compliance averaged over the final RL steps; "
        "κ: tool calls per rollout; benchmarks: accuracy % under the protocol named in the row.\n",
        "| variant | " + " | ".join(_label(c) for c in cols) + " | protocol | prompt checksum |",
        "|---|" + "---|" * (len(cols) + 2),
    ]
    for r in rows:
        flag = "" if r.paper_protocol else " (not the paper's protocol)"
        lines.append(
            f"| {r.variant} | "
            + " | ".join(cell_text(r, c) for c in cols)
            + f" | {r.protocol or '—'}{flag} | {r.checksum or '—'} |"
        )
    missing = [f"{r.variant}: {', '.join(r.missing)}" for r in rows if r.missing]
    if missing:
        lines.append("\nMissing outputs (failed or not run): " + "; ".join(missing))
    if study.source:
        lines.append(f"\nPaper numbers: {study.source}")
    return "\n".join(lines) + "\n"


def curves_png(rows: list[Row]) -> bytes:
    """f_tau per RL step, one line per variant that trained."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5), constrained_layout=True)
    for r in rows:
        if r.curve:
            ax.plot(
                [p[0] for p in r.curve], [p[1] for p in r.curve], marker="o", markersize=3, label=r.variant
            )
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("RL step")
    ax.set_ylabel("f_τ (format compliance)")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    if any(r.curve for r in rows):
        ax.legend(fontsize=8, loc="best")
    return figure_png(fig, dpi=110)


# Beside the report's stylesheet: text columns left-aligned, the checksum in a fixed-width font (in full in
# its tooltip, report.md and comparison.json).
_EXTRA_CSS = "td.text{text-align:left;max-width:40em}.mono{font-family:monospace}"


def _html_cell(row: Row, column: str) -> str:
    diff = row.diff[column]
    cls = "" if diff is None else "up" if diff > 0 else "down" if diff < 0 else ""
    signed = _signed(diff, column)
    delta = f' <span class="{cls}">({signed})</span>' if signed else ""
    return f"<td>{_num(row.ours[column], column)} / {_num(row.paper[column], column)}{delta}</td>"


def page(study: AblationStudy, rows: list[Row], png: bytes) -> str:
    cols = columns(study)
    esc = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(study.title)}</title>"]
    parts.append(f"<style>{_CSS}{_EXTRA_CSS}</style></head><body><h1>{esc(study.title)}</h1>")
    parts.append(
        "<p>Each cell: ours / paper (ours − paper). f_τ: format compliance averaged over the final RL steps; "
        "κ: tool calls per rollout; benchmarks: accuracy % under the protocol named in the row.</p>"
    )
    parts.append("<h2>Comparison</h2><table><tr><th>variant</th>")
    parts.append("".join(f"<th>{esc(_label(c))}</th>" for c in cols))
    parts.append("<th>protocol</th><th>prompt checksum</th></tr>")
    for r in rows:
        flag = "" if r.paper_protocol else " <em>(not the paper's protocol)</em>"
        parts.append(f"<tr><td title='{esc(r.description)}'>{esc(r.variant)}</td>")
        parts.append("".join(_html_cell(r, c) for c in cols))
        short = (
            ", ".join(c[:19] + "…" if len(c) > 20 else c for c in r.checksum.split(", "))
            if r.checksum
            else "—"
        )
        parts.append(
            f"<td class='text'>{esc(r.protocol or '—')}{flag}</td>"
            f"<td class='text mono' title='{esc(r.checksum)}'>{esc(short)}</td></tr>"
        )
    parts.append("</table>")
    missing = [f"{r.variant}: {', '.join(r.missing)}" for r in rows if r.missing]
    if missing:
        parts.append(f"<p class='failed'>Missing outputs (failed or not run): {esc('; '.join(missing))}</p>")
    parts.append("<h2>Format compliance f_τ per RL step</h2>")
    parts.append(_img(png, "f_tau curves"))
    parts.append("<h2>Variants</h2><table><tr><th>variant</th><th>what it changes</th></tr>")
    parts.extend(
        f"<tr><td>{esc(r.variant)}</td><td class='text'>{esc(r.description)}</td></tr>" for r in rows
    )
    parts.append("</table>")
    if study.source:
        parts.append(f"<p>Paper numbers: {esc(study.source)}</p>")
    parts.append("</body></html>")
    return "".join(parts)


def write_report(
    study: AblationStudy, run_root: str, variants: list[str] | None = None, output: str = ""
) -> dict:
    """Collect the rows and write the report; returns the output URIs and the flat metrics."""
    output = output or report_output(run_root)
    storage.clear_complete(output)
    rows = collect(study, run_root, variants)
    png = curves_png(rows)
    outputs = {
        "html": storage.join(output, "report.html"),
        "markdown": storage.join(output, "report.md"),
        "curves": storage.join(output, "f_tau_curves.png"),
    }
    metrics = {f"{r.variant}.{c}": v for r in rows for c, v in r.ours.items() if v is not None}
    storage.write_bytes(outputs["curves"], png)
    storage.write_bytes(outputs["html"], page(study, rows, png).encode())
    storage.write_bytes(outputs["markdown"], markdown(study, rows).encode())
    storage.write_bytes(
        storage.join(output, "comparison.json"), json.dumps([asdict(r) for r in rows], indent=2).encode()
    )
    storage.write_bytes(storage.join(output, "metrics.json"), json.dumps(metrics, indent=2).encode())
    storage.mark_complete(output, {"stage": "ablation-report"})
    return {"outputs": outputs, "metrics": metrics, "rows": rows}
