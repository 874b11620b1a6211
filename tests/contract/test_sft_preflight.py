"""SFT's bad-row gate fails fast: rows whose messages do not parse or whose local media is missing are counted
before a model is loaded, the run stops with one line naming the reasons and rows, and ``metrics.json`` still
records why (without ``_COMPLETE``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from paravt_core import storage
from paravt_core.config import SftConfig, load_config
from paravt_core.sft.data import read_rows, scan_rows
from paravt_core.sft.stage import run
from paravt_core.sft.trainer import SftError
from tests.support.paths import ROOT
from tests.support.sft_support import image_row, multi_call_row, text, video_row

REPO = ROOT
TINY = REPO / "configs" / "sft" / "tiny.yaml"


def _data(tmp: Path, messages: list[str]) -> str:
    out = tmp / "data"
    (out / "sft").mkdir(parents=True)
    table = pa.table({"id": [f"r{i}" for i in range(len(messages))], "messages": messages})
    pq.write_table(table, out / "sft" / "rows.parquet")
    storage.mark_complete(str(out))
    return str(out)


def _rows(tmp: Path) -> list[str]:
    """Rows 0, 4, 5 are good; 1 does not parse, 2 has no assistant turn, 3 points at a missing video."""
    good = json.dumps(multi_call_row())
    return [
        good,
        "{not json",
        json.dumps([{"role": "user", "content": [text("hi")]}]),
        json.dumps(video_row(str(tmp / "gone.mp4"))),
        good,
        good,
    ]


def test_scan_rows_finds_what_is_known_without_a_model(tmp_path: Path) -> None:
    present = tmp_path / "here.png"
    present.write_bytes(b"not decoded by the scan")
    messages = _rows(tmp_path) + [
        json.dumps(image_row(f"file://{present}")),  # exists (file:// form): decoding is the feed's job
        json.dumps(image_row(f"file://{tmp_path}/missing.png")),
        json.dumps(video_row("s3://bucket/v.mp4")),  # remote: not checked here (a request per file)
    ]
    data = _data(tmp_path, messages)
    col, ids = read_rows([os.path.join(data, "sft", "rows.parquet")])
    bad = scan_rows(col, ids)
    assert [(b.row_id, b.reason) for b in bad] == [
        ("rows.parquet:r1", "messages_not_json"),
        ("rows.parquet:r2", "no_assistant_turn"),
        ("rows.parquet:r3", "missing_media"),
        ("rows.parquet:r7", "missing_media"),
    ]
    assert str(tmp_path / "gone.mp4") in bad[2].detail


def test_gate_fails_before_the_model_is_loaded_and_metrics_say_why(tmp_path: Path) -> None:
    data = _data(tmp_path, _rows(tmp_path))
    out = tmp_path / "sft"
    # A model that does not exist: reaching the model load would fail differently (and later).
    overrides = [f"model.uri={tmp_path}/no-model", f"data.input={data}", f"output={out}"]
    overrides += [f"work_dir={tmp_path}/work", "data.max_bad_fraction=0.1", "data.num_workers=0"]
    cfg = load_config(SftConfig, TINY, overrides)
    with pytest.raises(SftError) as err:
        run(cfg)
    message = str(err.value)
    # 3 of 6 rows = 50.0 %, over the 10.0 % limit; reasons sorted by name.
    assert message.startswith(
        "3 of 6 rows dropped before training (50.0% > data.max_bad_fraction=10.0%): "
        "messages_not_json=1, missing_media=1, no_assistant_turn=1 (e.g. row rows.parquet:r1: messages_not_json"
    )
    assert "\n" not in message
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["status"] == "failed" and summary["error"] == message
    assert summary["gate"] == "preflight" and summary["rows_seen"] == 6 and summary["rows_used"] == 0
    assert summary["rows_dropped"] == {"messages_not_json": 1, "no_assistant_turn": 1, "missing_media": 1}
    assert [b["row_id"] for b in summary["bad_rows"]] == [f"rows.parquet:r{i}" for i in (1, 2, 3)]
    assert not storage.is_complete(str(out))
    assert not (out / "checkpoints").exists()


def test_gate_through_the_cli_is_one_line_with_status_1(tmp_path: Path) -> None:
    data = _data(tmp_path, _rows(tmp_path))
    out = tmp_path / "sft"
    cmd = [
        sys.executable,
        "-m",
        "paravt_core.cli",
        "sft",
        "--config",
        str(TINY),
        f"model={tmp_path}/no-model",
    ]
    cmd += [f"data={data}", f"output={out}", f"work_dir={tmp_path}/work", "data.max_bad_fraction=0.1"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env.pop("PARAVT_DEBUG", None)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "Traceback" not in done.stderr
    assert "3 of 6 rows dropped before training" in lines[-1]
    assert not any("rows dropped" in line for line in lines[:-1])
    assert json.loads((out / "metrics.json").read_text())["status"] == "failed"
