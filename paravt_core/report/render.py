"""Report rendering: the trend plot (PNG), a self-contained HTML page and a Markdown summary."""

from __future__ import annotations

import base64
import html
import io
from datetime import date
from typing import Any

from paravt_core.report.trend import FAILED, RUNNING, SUCCEEDED, Cell, Night, Series, effective_state


def _fmt(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _fmt_delta(delta: float | None) -> str:
    return "" if delta is None else f"{delta:+.1f}"


def cell_text(cell: Cell) -> str:
    if cell.value is not None:
        return _fmt(cell.value) + (f" ({_fmt_delta(cell.delta)})" if cell.delta is not None else "")
    return {FAILED: "failed", RUNNING: "running", "": "—"}.get(cell.state, cell.state.lower())


def trend_png(columns: list[Series], rows: list[tuple[Night, dict[Series, Cell]]], today: str) -> bytes:
    """Headline value per series over dates; failed nights as red dashed lines, failed cells as red x."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    dates = [date.fromisoformat(n.date) for n, _ in rows]
    for series in columns:
        points = [
            (d, c[series].value) for d, (_, c) in zip(dates, rows, strict=True) if c[series].value is not None
        ]
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=series.label)
    values = [c.value for _, cells in rows for c in cells.values() if c.value is not None]
    floor = min(values) if values else 0.0
    failed_label = "failed"
    for d, (night, cells) in zip(dates, rows, strict=True):
        if effective_state(night, today) == FAILED:
            ax.axvline(d, color="tab:red", linestyle="--", alpha=0.6, label=failed_label)
            failed_label = None  # one legend entry
        if any(c.state == FAILED for c in cells.values()):
            ax.plot([d], [floor], marker="x", color="tab:red", markersize=10, linestyle="none")
    import matplotlib.dates as mdates

    if 0 < len(dates) <= 15:
        ax.set_xticks(dates)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d"))
    ax.set_ylabel("headline metric (accuracy % / mIoU)")
    ax.set_xlabel("night")
    ax.grid(alpha=0.3)
    if columns or failed_label is None:
        ax.legend(fontsize=8, loc="best")
    fig.autofmt_xdate()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def trend_markdown(columns: list[Series], rows: list[tuple[Night, dict[Series, Cell]]], today: str) -> str:
    """Newest night first: state and each series' value (delta vs its previous value)."""
    header = "| night | state | " + " | ".join(s.label for s in columns) + " |"
    lines = [header, "|" + "---|" * (len(columns) + 2)]
    for night, cells in reversed(rows):
        state = effective_state(night, today).lower()
        lines.append(f"| {night.date} | {state} | " + " | ".join(cell_text(cells[s]) for s in columns) + " |")
    return "\n".join(lines) + "\n"


# The eval stage's headline numbers: accuracy in percent, Charades' mIoU (mean IoU) times 100.
HEADLINE_UNIT = "headline, % (accuracy; Charades: mIoU)"


def eval_markdown(table: list[dict[str, Any]]) -> str:
    lines = [f"| benchmark | protocol | {HEADLINE_UNIT} |", "|---|---|---|"]
    lines += [f"| {r['benchmark']} | {r['protocol']} | {_fmt(r['value'])} |" for r in table]
    return "\n".join(lines) + "\n"


# One line per number of a training stage's metrics.json, shown beside it in the report (section name, key).
METRIC_NOTES: dict[tuple[str, str], str] = {
    ("SFT", "steps"): "optimizer steps run",
    ("SFT", "loss_first"): "mean training loss over the first loss_window_steps steps",
    ("SFT", "loss_last"): "mean training loss over the last loss_window_steps steps",
    (
        "SFT",
        "loss_window_steps",
    ): "steps averaged into loss_first and loss_last (a quarter of the run, at most 5)",
    ("SFT", "tokens"): "tokens trained on, all steps together",
    ("SFT", "tokens_per_s"): "tokens trained on per second of step time",
    ("SFT", "padding_share"): "share of the packed sequences' tokens that are padding",
    ("SFT", "rows_used"): "data rows trained on (a row seen in two epochs counts twice)",
    (
        "SFT",
        "rows_dropped_total",
    ): "data rows skipped by the SFT checks (reasons: rows_dropped in metrics.json)",
    ("SFT", "world_size"): "training processes (ranks)",
    ("RL", "steps"): "policy updates run",
    ("RL", "prompts"): "RL prompts the steps sample from",
    ("RL", "reward_first"): "mean reward of the first step's rollouts",
    ("RL", "reward_last"): "mean reward of the last step's rollouts",
    ("RL", "policy_version"): "weight versions pushed to the rollout engine",
    ("RL", "final_steps"): "last steps averaged into the *_final numbers",
    (
        "RL",
        "f_tau_final",
    ): "f_tau: share of rollouts whose format is compliant, mean over the last final_steps",
    ("RL", "kappa_final"): "kappa: tool calls per rollout, mean over the last final_steps steps",
    ("RL", "format_reward_final"): "R_fmt, the format reward, mean over the last final_steps steps",
}


def metric_note(section: str, key: str) -> str:
    return METRIC_NOTES.get((section, key), "")


def training_markdown(section: dict[str, Any]) -> str:
    name = section["name"]
    lines = [f"## {name}\n", "| metric | value | meaning |", "|---|---|---|"]
    lines += [f"| {k} | {v:.6g} | {metric_note(name, k)} |" for k, v in sorted(section["metrics"].items())]
    return "\n".join(lines) + "\n"


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:70em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
.note{background:#fff4d6;padding:.5em}.failed{background:#fde2e1;color:#a00}.running{background:#fff4d6}.up{color:#080}.down{color:#b00}
"""


def _html_cell(cell: Cell) -> str:
    if cell.value is None:
        cls = {FAILED: "failed", RUNNING: "running"}.get(cell.state, "")
        return f'<td class="{cls}">{html.escape(cell_text(cell))}</td>'
    delta = ""
    if cell.delta is not None:
        cls = "up" if cell.delta > 0 else "down" if cell.delta < 0 else ""
        delta = f' <span class="{cls}">({_fmt_delta(cell.delta)})</span>'
    return f"<td>{_fmt(cell.value)}{delta}</td>"


def report_html(
    title: str,
    *,
    eval_table: list[dict[str, Any]],
    training: list[dict[str, Any]] = (),
    trend: tuple[list[Series], list[tuple[Night, dict[Series, Cell]]]] | None,
    trend_png_bytes: bytes | None,
    today: str,
    extra_html: str = "",
    note: str = "",
    links: list[tuple[str, str]] = (),
) -> str:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"]
    parts.append(f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>")
    if note:
        parts.append(f"<p class='note'>{html.escape(note)}</p>")
    if eval_table:
        parts.append(
            "<h2>Evaluation</h2><table><tr><th>benchmark</th><th>protocol</th>"
            f"<th>{html.escape(HEADLINE_UNIT)}</th></tr>"
        )
        for r in eval_table:
            parts.append(
                f"<tr><td>{html.escape(r['benchmark'])}</td><td>{html.escape(r['protocol'])}</td>"
                f"<td>{_fmt(r['value'])}</td></tr>"
            )
        parts.append("</table>")
    parts.extend(
        f"<p>Per-benchmark eval report ({html.escape(name)}): "
        f"<a href='{html.escape(where, quote=True)}'>{html.escape(where)}</a></p>"
        for name, where in links
    )
    for section in training:
        parts.append(f"<h2>{html.escape(section['name'])}</h2><p>{html.escape(section['output'])}</p>")
        parts.extend(_img(png, name) for name, png in sorted(section["plots"].items()))
        parts.append("<table><tr><th>metric</th><th>value</th><th>meaning</th></tr>")
        parts.extend(
            f"<tr><td>{html.escape(k)}</td><td>{v:.6g}</td>"
            f"<td style='text-align:left'>{html.escape(metric_note(section['name'], k))}</td></tr>"
            for k, v in sorted(section["metrics"].items())
        )
        parts.append("</table>")
    parts.append(extra_html)
    if trend is not None:
        columns, rows = trend
        parts.append("<h2>Nightly trend</h2>")
        if trend_png_bytes:
            parts.append(_img(trend_png_bytes, "trend"))
        parts.append("<p>Newest night first; in brackets the change against the series' previous value.</p>")
        parts.append("<table><tr><th>night</th><th>state</th><th>checkpoint</th>")
        parts.append("".join(f"<th>{html.escape(s.label)}</th>" for s in columns) + "</tr>")
        for night, cells in reversed(rows):
            state = effective_state(night, today)
            cls = {FAILED: "failed", RUNNING: "running", SUCCEEDED: ""}.get(state, "")
            error = f' title="{html.escape(night.error)}"' if night.error else ""
            parts.append(
                f"<tr><td>{night.date}</td><td class='{cls}'{error}>{state.lower()}</td>"
                f"<td>{html.escape(night.checkpoint)}</td>"
                + "".join(_html_cell(cells[s]) for s in columns)
                + "</tr>"
            )
        parts.append("</table>")
    parts.append("</body></html>")
    return "".join(parts)
