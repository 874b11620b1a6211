"""``paravt_core.run_metrics``: the metrics.jsonl and PNG writers shared by the SFT and RL stages."""

from __future__ import annotations

from pathlib import Path

from paravt_core.rl.metrics import CURVES, curves_png
from paravt_core.run_metrics import write_jsonl
from paravt_core.sft.metrics import loss_curve_png

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_write_jsonl_rewrites_whole_file_one_sorted_record_per_line(tmp_path: Path) -> None:
    uri = str(tmp_path / "m" / "metrics.jsonl")
    write_jsonl(uri, [{"step": 1, "loss": 2.5}, {"step": 2, "loss": 2.0}, {"step": 3, "loss": 1.5}])
    write_jsonl(uri, [{"step": 1, "loss": 2.5}, {"step": 2, "loss": 2.0}])  # a resume cut back to step 2
    text = Path(uri).read_text()
    # keys sorted ("loss" < "step"), one record per line, nothing left of the longer first write
    assert text == '{"loss": 2.5, "step": 1}\n{"loss": 2.0, "step": 2}\n'


def test_both_stages_plots_are_png() -> None:
    sft = loss_curve_png([{"step": s, "loss": 3.0 - s / 10, "lr": 1e-4} for s in range(1, 6)])
    rl = curves_png([{"step": s, **{k: s / 10 for k in CURVES}} for s in range(4)])
    assert sft.startswith(PNG_MAGIC) and rl.startswith(PNG_MAGIC)


def test_rl_curves_have_integer_step_ticks_and_flat_panels_say_so() -> None:
    """Three steps: no 1.25 / 1.5 ... ticks; accuracy_mean at 0 every step is titled as flat, the reward
    that moves is not."""
    from paravt_core.rl.metrics import curves_figure
    from paravt_core.run_metrics import pyplot

    history = [
        {"step": s, "reward_mean": r, "accuracy_mean": 0.0, "format_mean": r, "tool_mean": 0.0}
        for s, r in enumerate((0.2125, 0.15, 0.10625))
    ]
    fig = curves_figure(history)
    try:
        titles = {ax.get_title() for ax in fig.axes}
        assert "accuracy_mean (flat at 0)" in titles and "reward_mean" in titles
        assert "tool_call_rate (flat at 0)" in titles  # absent from the records: 0 each step
        for ax in fig.axes:
            fig.canvas.draw()
            ticks = [t for t in ax.get_xticks() if 1 <= t <= 3]
            assert ticks and all(float(t).is_integer() for t in ticks), (ax.get_title(), ticks)
    finally:
        pyplot().close(fig)
