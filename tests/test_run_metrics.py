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
