"""SFT metrics: the summary ``metrics.json`` and the loss-curve PNG (``metrics.jsonl``: ``run_metrics``)."""

from __future__ import annotations

from typing import Any

from paravt_core.run_metrics import figure_png, pyplot


def loss_curve_png(records: list[dict[str, Any]], title: str = "paravt sft") -> bytes:
    """Loss and learning rate per step, as PNG bytes."""
    plt = pyplot()
    steps = [r["step"] for r in records]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot(steps, [r["loss"] for r in records], color="tab:blue", label="loss (token mean)")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss", color="tab:blue")
    ax.grid(alpha=0.3)
    lr_ax = ax.twinx()
    lr_ax.plot(steps, [r["lr"] for r in records], color="tab:orange", alpha=0.7, label="learning rate")
    lr_ax.set_ylabel("learning rate", color="tab:orange")
    ax.set_title(title)
    fig.tight_layout()
    return figure_png(fig)


def summary(records: list[dict[str, Any]], rows_used: int, dropped: dict[str, int]) -> dict[str, Any]:
    """``metrics.json``: loss at the start and end, throughput, rows used and dropped by reason."""
    if not records:
        return {"steps": 0, "rows_used": rows_used, "rows_dropped": dropped}
    k = max(1, min(5, len(records) // 4))  # mean of the first / last few steps: less noisy than one step
    first = sum(r["loss"] for r in records[:k]) / k
    last = sum(r["loss"] for r in records[-k:]) / k
    seconds = sum(r["step_time_s"] for r in records)
    tokens = sum(r["tokens"] for r in records)
    return {
        "steps": records[-1]["step"],
        "loss_first": first,
        "loss_last": last,
        "loss_window_steps": k,
        "tokens": tokens,
        "tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
        "padding_share": sum(r["padding_share"] * r["sequences"] for r in records)
        / max(1, sum(r["sequences"] for r in records)),
        "rows_used": rows_used,
        "rows_dropped": dict(sorted(dropped.items())),
        "rows_dropped_total": sum(dropped.values()),
    }
