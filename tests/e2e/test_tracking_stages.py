"""Tracking of the real stages on the tiny model: what TensorBoard's own reader (``EventAccumulator``) and a
real MLflow server (``MlflowClient.get_metric_history``) hold after a run, each step exactly once after a
SIGKILL and a resume, and the plain progress lines a pod log gets (stderr is a file here, not a terminal)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from paravt_core import checkpoint
from paravt_core.eval.stage import run as run_eval
from tests.support.eval_support import KeyedEngine, fixture_entry, tiny_eval_config
from tests.support.paths import ROOT
from tests.support.rl_support import tiny_rl_config
from tests.support.tracking_support import raw_points, scalars

TINY_SFT = ROOT / "configs" / "sft" / "tiny.yaml"
SFT_TAGS = {
    "train/loss",
    "train/learning_rate",
    "train/grad_norm",
    "perf/tokens_per_s",
    "perf/step_time_s",
    "data/padding_share",
    "data/rows_dropped",
}  # fmt: skip  (perf/mfu, perf/mfu_6n and perf/peak_memory_gib are GPU-only: no peak FLOP/s or CUDA memory on a CPU)
SFT_LINE = re.compile(r"^sft step (\d+)/12 \(\d+\.\d %\) loss \d+\.\d{3} [\d,]+ tok/s eta \d+[dhms]\w*$")


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **extra}


def _logged_steps(logdir: Path, tag: str) -> list[int]:
    return [step for t, step in raw_points(logdir) if t == tag] if logdir.is_dir() else []


def test_sft_killed_after_logging_past_its_checkpoint_then_resumed_holds_each_step_once(
    tiny_model_dir: str, sft_data_output: str, mlflow_server: str, tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    out = tmp_path / "sft"
    cmd = [sys.executable, "-m", "paravt_core.cli", "sft", "--config", str(TINY_SFT), f"model.uri={tiny_model_dir}",
           f"data.input={sft_data_output}", f"output={out}", f"work_dir={tmp_path / 'work'}", "trainer.steps=12",
           "checkpoint.every=4", "data.num_workers=1", "tracking.backends=[tensorboard, mlflow]",
           "tracking.progress_every_s=0", "tracking.mlflow.experiment=sft-kill"]  # fmt: skip
    env = _env(MLFLOW_TRACKING_URI=mlflow_server, KFP_RUN_ID="run-39")
    logdir = out / "tensorboard"
    with open(tmp_path / "attempt-1.log", "w") as log:
        first = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 600
        try:  # kill once the run has logged a step past its newest complete checkpoint
            while True:
                assert first.poll() is None, (tmp_path / "attempt-1.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "no step logged past a checkpoint in 600 s"
                done = [s for s, _, ok in checkpoint.list_checkpoints(str(out)) if ok]
                if done and max(_logged_steps(logdir, "train/loss"), default=0) > max(done):
                    break
                time.sleep(0.02)
            first.send_signal(signal.SIGKILL)
        finally:
            first.wait()
    at_kill = max(s for s, _, ok in checkpoint.list_checkpoints(str(out)) if ok)
    logged_at_kill = _logged_steps(logdir, "train/loss")
    assert max(logged_at_kill) > at_kill and at_kill < 12  # steps past the checkpoint are in the files

    with open(tmp_path / "attempt-2.log", "w") as log:
        assert subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log).returncode == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, 13))

    # TensorBoard: every tag at steps 1..12 once, in the files themselves (not only after the reader's purge)
    series = scalars(logdir)
    assert set(series) == SFT_TAGS
    assert [s for s, _ in series["train/loss"]] == list(range(1, 13))
    assert [v for _, v in series["train/loss"]] == [pytest.approx(r["loss"], rel=1e-6) for r in records]
    assert [v for _, v in series["train/learning_rate"]] == [
        pytest.approx(r["lr"], rel=1e-6) for r in records
    ]
    points = raw_points(logdir)
    assert len(points) == len(set(points)) == len(SFT_TAGS) * 12

    # MLflow: one run, continued across the kill, each step once; config params; KFP run id and final URI tags
    client = MlflowClient(mlflow_server)
    (run,) = client.search_runs([client.get_experiment_by_name("sft-kill").experiment_id])
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert sorted(m.step for m in history) == list(range(1, 13))
    # the steps the killed attempt logged are its values; on a CPU the resumed run recomputes the same ones
    assert [m.value for m in sorted(history, key=lambda m: m.step)] == [
        pytest.approx(r["loss"], rel=1e-6) for r in records
    ]
    assert run.info.run_name == "run-39" and run.info.status == "FINISHED"
    assert run.data.tags["kfp.run_id"] == "run-39" and run.data.tags["paravt.stage"] == "sft"
    assert run.data.tags["paravt.final_checkpoint"] == str(out / "final")
    assert run.data.params["trainer.steps"] == "12" and run.data.params["model.uri"] == tiny_model_dir

    # the pod log of the resumed attempt: one plain line per step after the checkpoint, no bar
    lines = [x for x in (tmp_path / "attempt-2.log").read_text().splitlines() if x.startswith("sft step")]
    assert [int(SFT_LINE.match(x).group(1)) for x in lines] == list(range(at_kill + 1, 13)), lines
    assert "\r" not in (tmp_path / "attempt-2.log").read_text()


def test_rl_logs_its_groups_and_a_trajectory(rl_data, tiny_model_dir, tmp_path, capfd) -> None:
    from paravt_core.rl.stage import run

    cfg = tiny_rl_config(rl_data, tiny_model_dir, str(tmp_path / "rl"), "steps=2", "group_size=2",
                         "agent.max_new_tokens=16", "tracking.text_every=2", "tracking.progress_every_s=0")  # fmt: skip
    run(cfg)
    history = [json.loads(line) for line in (tmp_path / "rl" / "metrics.jsonl").read_text().splitlines()]
    series = scalars(tmp_path / "rl" / "tensorboard")
    for tag, key in (("reward/mean", "reward_mean"), ("reward/std", "reward_std"), ("learner/kl_ref", "kl_ref"),
                     ("tools/calls_per_turn", "calls_per_turn"), ("async/staleness_max", "staleness_max"),
                     ("time/push_s", "sync_s"), ("learner/clip_fraction", "clip_fraction")):  # fmt: skip
        assert series[tag] == [(m["step"] + 1, pytest.approx(m[key], rel=1e-6, abs=1e-9)) for m in history], (
            tag
        )
    ks = {k for m in history for k in m["k_histogram"]}
    assert {f"gating/rollouts_k{k}" for k in ks} <= set(series)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "rl" / "tensorboard"))
    acc.Reload()
    (text,) = acc.Tensors("rollout/trajectory/text_summary")  # text_every=2: step 2 only
    assert text.step == 2 and b"**question**" in text.tensor_proto.string_val[0]
    err = capfd.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("rl step")]
    pattern = r"^rl step {} \({} %\) reward -?\d+\.\d{{3}} acc \d\.\d{{3}} tool calls \d+\.\d\d/rollout staleness 0\.0 eta \S+$"
    assert re.match(pattern.format("1/2", "50.0"), lines[0]) and re.match(
        pattern.format("2/2", "100.0"), lines[1]
    )


def test_eval_logs_each_benchmark_with_and_without_the_tool(
    tiny_model, eval_fixtures, tmp_path, capfd
) -> None:
    charades = fixture_entry(eval_fixtures, "charades")
    (tmp_path / "no-media").mkdir()  # no videos: both lvbench samples are errors
    broken = {**fixture_entry(eval_fixtures, "lvbench"), "media_root": str(tmp_path / "no-media")}
    script = {  # IoU 1 and IoU 0.5 ([5, 6] of [5, 7]): mIoU 75.0 under each protocol
        "a red circle appears": ["<answer>The event happens in the 1.0 - 3.0 seconds.</answer>"],
        "a yellow circle appears": ["<answer>The event happens in the 5.0 - 6.0 seconds.</answer>"],
    }
    engine = KeyedEngine(tiny_model.processor, script)
    cfg = tiny_eval_config(tmp_path, "tiny", [charades, broken], protocols=["agentic", "direct"],
                           tracking={"progress_every_s": 0})  # fmt: skip
    run_eval(cfg, engine=engine, processor=tiny_model.processor)
    series = scalars(Path(cfg.output) / "tensorboard")
    assert series["eval/charades/agentic/miou"] == [(1, 75.0)] and series["eval/charades/direct/miou"] == [
        (1, 75.0)
    ]
    assert series["eval/lvbench/agentic/errors"] == [(1, 2.0)] and series["eval/lvbench/direct/errors"] == [
        (1, 2.0)
    ]
    assert series["eval/total/samples"] == [(1, 8.0)] and series["eval/total/errors"] == [(1, 4.0)]
    lines = [x for x in capfd.readouterr().err.splitlines() if x.startswith("eval ")]
    assert len(lines) == 8  # every sample (progress_every_s=0, log_every=1)
    assert re.match(r"^eval 8/8 \(100\.0 %\) charades 4/4 acc 0\.750 \| lvbench 4/4 eta 0s$", lines[-1]), (
        lines[-1]
    )


def test_mlflow_run_resumed_from_its_id_sends_no_point_twice(mlflow_server: str) -> None:
    from mlflow.tracking import MlflowClient

    from paravt_core.tracking.mlflow_backend import MlflowBackend

    first = MlflowBackend(mlflow_server, "resume-unit", "r", stage="rl", params={"steps": "4"})
    for step in (1, 2, 3):  # step 3 logged after the checkpoint at step 2, then the pod is killed
        first.log(step, {"reward/mean": step / 10})
    state = first.state()
    again = MlflowBackend(mlflow_server, "resume-unit", "r", stage="rl", run_id=state["mlflow_run_id"])
    for step in (3, 4):  # the resumed run logs from step 3 again
        again.log(step, {"reward/mean": step / 10 + 1.0})
    again.close("s3://b/rl/final")
    client = MlflowClient(mlflow_server)
    history = sorted(
        (m.step, m.value) for m in client.get_metric_history(state["mlflow_run_id"], "reward/mean")
    )
    assert history == [(1, 0.1), (2, 0.2), (3, 0.3), (4, 1.4)]
    run = client.get_run(state["mlflow_run_id"])
    assert run.data.params == {"steps": "4"} and run.data.tags["paravt.final_checkpoint"] == "s3://b/rl/final"
    assert len(client.search_runs([run.info.experiment_id])) == 1


WANDB_SITE = Path(os.environ.get("PARAVT_WANDB_SITE", ROOT / ".venv-wandb"))


def _wandb_records(path: Path) -> list:
    """The records of a W&B run file (``run-<id>.wandb``): a 7-byte header (``:W&B``, magic, version), then
    LevelDB-log framing in 32 KiB blocks (7-byte record headers: CRC, length, type 1 full / 2 first /
    3 middle / 4 last), each record a ``wandb_internal_pb2.Record``."""
    from wandb.proto import wandb_internal_pb2

    data, pos, pending, out = path.read_bytes(), 7, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        kind, length = data[pos + 6], int.from_bytes(data[pos + 4 : pos + 6], "little")
        if left < 7 or (kind == 0 and length == 0):  # block trailer padding
            pos += left
            continue
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            out.append(wandb_internal_pb2.Record.FromString(pending))
            pending = b""
    return out


def test_wandb_offline_run_holds_every_step_and_the_last_values_in_its_summary(
    tiny_model_dir: str, sft_data_output: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not (WANDB_SITE / "wandb").is_dir():
        message = f"wandb is not set up in {WANDB_SITE} (scripts/setup.sh makes it)"
        pytest.fail(message) if os.environ.get("CI") else pytest.skip(message)
    monkeypatch.syspath_prepend(str(WANDB_SITE))  # wandb's record types, for reading the run file
    out = tmp_path / "sft"
    cmd = [sys.executable, "-m", "paravt_core.cli", "sft", "--config", str(TINY_SFT), f"model.uri={tiny_model_dir}",
           f"data.input={sft_data_output}", f"output={out}", f"work_dir={tmp_path / 'work'}", "trainer.steps=3",
           "data.num_workers=1", "tracking.backends=[wandb]", "tracking.wandb.mode=offline"]  # fmt: skip
    env = _env(
        PYTHONPATH=os.pathsep.join([str(WANDB_SITE), str(ROOT)]), WANDB_SILENT="true", KFP_RUN_ID="run-w"
    )
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    (run_file,) = (out / "wandb").glob("offline-run-*/run-*.wandb")
    history, summary, name = {}, {}, None
    for r in _wandb_records(run_file):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            name = r.run.display_name
        items = r.history.item if kind == "history" else r.summary.update if kind == "summary" else []
        values = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}
        if kind == "history":
            history[values["_step"]] = values
        elif kind == "summary":
            summary.update(values)
    assert name == "run-w" and sorted(history) == [1, 2, 3]
    assert [history[s]["train/loss"] for s in (1, 2, 3)] == [pytest.approx(r["loss"]) for r in records]
    assert summary["train/loss"] == pytest.approx(records[-1]["loss"]) and summary["_step"] == 3
    assert summary["final_checkpoint"] == str(out / "final")
