"""`make gpu-profile` (scripts/gpu_profile.py) run on the tiny model on the CPU: the summary's fields, the
trace, the appended docs section; the GPU busy share's interval arithmetic on hand-made intervals."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from scripts.gpu_profile import RANGES, _merged_busy
from tests.support.paths import ROOT

REPO = ROOT


def test_merged_busy_counts_overlaps_once_and_clips_to_the_window() -> None:
    # [0,10] and [5,15] overlap: busy 0..15; [20,30] clipped at the window's end 25; [-5,2] clipped at 0
    assert _merged_busy([(5, 15), (0, 10), (20, 30), (-5, 2)], 0, 25) == 15 + 5
    assert _merged_busy([], 0, 10) == 0
    assert _merged_busy([(2, 3), (2.5, 2.7)], 0, 10) == 1


def test_gpu_profile_on_the_tiny_model(tiny_model_dir: str, sft_data_output: str, tmp_path: Path) -> None:
    work, out, docs = tmp_path / "work", tmp_path / "out", tmp_path / "gpu-runs.md"
    work.mkdir()
    os.symlink(tiny_model_dir, work / "tiny-model")
    os.symlink(sft_data_output, work / "data")
    docs.write_text("# Runs on a real GPU\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(REPO / "scripts" / "gpu_profile.py"), "--tiny", "--work", str(work)]
    cmd += ["--out", str(out), "--docs", str(docs), "trainer.grad_accum=2", "data.num_workers=0"]
    subprocess.run(cmd, check=True, env=env, cwd=tmp_path, capture_output=True)

    s = json.loads((out / "summary.json").read_text())
    assert s["device"] == "cpu" and s["profiled_steps"] == 2
    assert set(s["range_s_per_step"]) == {r.removeprefix("sft/") for r in RANGES}
    assert s["range_s_per_step"]["forward"] > 0 and s["range_s_per_step"]["backward"] > 0
    assert all(v >= 0 for v in s["range_s_per_step"].values())
    # each range lies inside the profiled steps: together they cannot exceed the window
    assert sum(s["range_s_per_step"].values()) * 2 <= s["window_s"] * 1.001
    assert s["gpu_busy_share"] is None and s["mfu"] is None and s["syncs_per_step"] is None
    assert s["hfu"] is None and s["mfu_6n"] is None  # no peak on a CPU; the FLOPs are counted all the same
    assert 0 < s["model_flops_per_token"] < s["hardware_flops_per_token"]  # recompute: hardware only
    assert s["host_reads_per_step"] == [1, 1]  # the step's one read (tests/unit/test_sft_step_host.py)
    assert 1 <= len(s["heaviest_kernels"]) <= 10
    assert len(s["losses"]) == len(s["step_time_s"]) == len(s["tokens_per_step"]) == 2
    assert abs(s["tokens_per_s"] - sum(s["tokens_per_step"]) / sum(s["step_time_s"])) < 1e-6
    assert s["parameters"] > 0 and s["environment"]["config"] == "configs/sft/tiny.yaml"
    assert [x["workers"] for x in s["loader"]] == [0, 1]  # the loader timed per worker count
    assert all(x["tokens_per_s"] > 0 and x["samples_per_s"] > 0 for x in s["loader"])

    with gzip.open(out / "trace.json.gz") as f:
        names = {e.get("name") for e in json.load(f)["traceEvents"]}
    assert {"sft/forward", "sft/backward", "sft/optimizer", "sft/h2d", "sft/data_wait"} <= names

    text = docs.read_text()
    assert text.startswith("# Runs on a real GPU\n") and "`make gpu-profile` on CPU" in text
    assert "| loader workers |" in text and "| sft/" not in text and "| forward |" in text
    marker = json.loads(re.search(r"<!-- gpu-run: (.*) -->", text).group(1))
    assert marker["mfu"] is None and abs(marker["tokens_per_s"] - s["tokens_per_s"]) < 1e-6
    assert marker["rule"] == "model" and marker["hfu"] is None and marker["mfu_6n"] is None
    assert "MFU n/a (model FLOPs of the batch, " in text and "6N rule n/a (6 x " in text


def test_relocate_points_carried_rows_at_this_machines_media(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from scripts.gpu_profile import relocate

    (tmp_path / "data" / "sft").mkdir(parents=True)
    rows = [
        '[{"content": [{"type": "video_url", "video_url": {"url": "/other/host/build/data-work/media/a.mp4"}}]}]',
        '[{"content": [{"type": "text", "text": "no media"}]}]',
    ]
    table = pa.table({"id": ["r0", "r1"], "messages": rows})
    pq.write_table(table, tmp_path / "data" / "sft" / "x.parquet")
    assert relocate(tmp_path / "data", tmp_path) == 1
    got = pq.read_table(tmp_path / "data" / "sft" / "x.parquet")
    assert got.column("id").to_pylist() == ["r0", "r1"]
    assert got.column("messages").to_pylist() == [
        rows[0].replace("/other/host/build/", f"{tmp_path}/"),
        rows[1],
    ]
    assert relocate(tmp_path / "data", tmp_path) == 0  # already here: nothing rewritten


def test_relocate_points_carried_rl_rows_too(tmp_path: Path) -> None:
    # gpu_check's rl_step reads the RL rows, whose media sit in a list of structs
    import pyarrow as pa
    import pyarrow.parquet as pq

    from scripts.gpu_profile import relocate

    (tmp_path / "data" / "rl").mkdir(parents=True)
    videos = [
        [{"video": "/other/host/build/data-work/media/a.mp4"}],
        [{"video": "/other/host/build/data-work/b.mp4"}],
    ]
    pq.write_table(pa.table({"id": ["r0", "r1"], "videos": videos}), tmp_path / "data" / "rl" / "x.parquet")
    assert relocate(tmp_path / "data", tmp_path) == 1
    got = pq.read_table(tmp_path / "data" / "rl" / "x.parquet").column("videos").to_pylist()
    assert got == [
        [{"video": f"{tmp_path}/data-work/media/a.mp4"}],
        [{"video": f"{tmp_path}/data-work/b.mp4"}],
    ]
