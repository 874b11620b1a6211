"""Tracking parts on their own: the pod-log progress lines (hand-written expected lines, a fake clock), the
TensorBoard compaction that keeps each step once across a resume (read back with TensorBoard's own
``EventAccumulator``), the scalar names of each stage and the ``tracking:`` block in every stage config."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter

from paravt_core.config import stage_config
from paravt_core.tracking import Tracker
from paravt_core.tracking.config import TrackingConfig
from paravt_core.tracking.progress import Cadence, EvalProgress, StepProgress, eta_text
from paravt_core.tracking.scalars import (
    eval_scalars,
    flatten_params,
    mfu,
    mfu_6n,
    peak_tflops,
    rl_scalars,
    sft_scalars,
)
from paravt_core.tracking.tensorboard import compact, event_files
from tests.support.tracking_support import raw_points, scalars


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_eta_text_by_hand() -> None:
    assert eta_text(13 * 3600 + 2 * 60 + 5) == "13h02m"
    assert eta_text(5 * 60 + 7) == "5m07s"
    assert eta_text(42.4) == "42s"
    assert eta_text(2 * 86400 + 3 * 3600 + 59) == "2d03h"
    assert eta_text(-3) == "0s"


def test_sft_line_is_the_issue_s_example() -> None:
    clock, out = Clock(), io.StringIO()
    p = StepProgress("sft", 2400, 0, every=1, every_s=0.0, stream=out, clock=clock)
    clock.t += 120 * 19.6  # 120 steps at 19.6 s: 2280 steps left = 44688 s = 12h24m48s
    line = p.update(120, "loss 1.234 6,210 tok/s")
    assert line == "sft step 120/2400 (5.0 %) loss 1.234 6,210 tok/s eta 12h24m"
    assert out.getvalue() == line + "\n"


def test_lines_every_log_every_steps_and_at_most_once_a_minute() -> None:
    clock, out = Clock(), io.StringIO()
    p = StepProgress("rl", 10, 2, every=2, every_s=60.0, stream=out, clock=clock)
    printed = []
    for step in range(3, 11):  # a resumed run: steps 3..10, 40 s each
        clock.t += 40
        if p.update(step, "x"):
            printed.append(step)
    # 3: the first; 4: even but 40 s after 3; 6: even and 80 s after 3; 8: 80 s after 6; 10: the last
    assert printed == [3, 6, 8, 10]
    # the ETA comes from this process's own pace (steps 3..6 in 160 s: 40 s a step, 4 left)
    assert out.getvalue().splitlines()[1] == "rl step 6/10 (60.0 %) x eta 2m40s"


def test_cadence_without_a_time_limit_prints_every_log_every() -> None:
    c = Cadence(every=3, every_s=0.0, clock=Clock())
    assert [s for s in range(1, 11) if c.due(s, 10)] == [1, 3, 6, 9, 10]


def test_eval_line_per_benchmark_with_accuracy_so_far() -> None:
    clock, out = Clock(), io.StringIO()
    p = EvalProgress(
        {"synthetic": 4, "videomme": 2}, {"synthetic": 1}, every=1, every_s=0.0, stream=out, clock=clock
    )
    clock.t += 10
    p.update({"benchmark": "synthetic", "status": "ok", "score": 1.0})
    clock.t += 10
    p.update({"benchmark": "synthetic", "status": "error", "score": None})
    clock.t += 10
    last = p.update({"benchmark": "videomme", "status": "ok", "score": 0.0})
    # 4 of 6 done, 3 in this process in 30 s: 10 s each, 2 left
    assert last == "eval 4/6 (66.7 %) synthetic 3/4 acc 1.000 | videomme 1/2 acc 0.000 eta 20s"


def _write(logdir: Path, steps: range, tag: str = "train/loss", purge: int | None = None) -> None:
    w = SummaryWriter(str(logdir), purge_step=purge)
    for s in steps:
        w.add_scalar(tag, float(s) / 10, s)
    w.close()


def test_compact_keeps_the_checkpointed_steps_once(tmp_path: Path) -> None:
    _write(tmp_path, range(1, 8))  # a killed attempt logged 1..7; its last checkpoint holds 4
    dropped = compact(tmp_path, 4)
    assert dropped == 3
    assert raw_points(tmp_path) == [("train/loss", s) for s in range(1, 5)]
    _write(tmp_path, range(5, 9), purge=5)  # the resumed attempt
    assert scalars(tmp_path)["train/loss"] == [(s, pytest.approx(s / 10)) for s in range(1, 9)]
    assert sorted(raw_points(tmp_path)) == [("train/loss", s) for s in range(1, 9)]


def test_compact_after_a_kill_during_compaction_removes_the_duplicates(tmp_path: Path) -> None:
    _write(tmp_path, range(1, 4))
    _write(tmp_path, range(1, 4))  # the compacted copy written, the old file not yet deleted
    assert compact(tmp_path, 3) == 3
    assert raw_points(tmp_path) == [("train/loss", s) for s in range(1, 4)]


def test_tracker_logs_every_log_every_and_the_last_step(tmp_path: Path) -> None:
    cfg = TrackingConfig(log_every=3)
    t = Tracker.open(
        cfg, stage="sft", output=str(tmp_path / "out"), work_dir=str(tmp_path / "w"), last_step=7
    )
    for step in range(1, 8):
        t.log(step, {"train/loss": step * 1.5})
    t.close()
    assert scalars(tmp_path / "out" / "tensorboard") == {"train/loss": [(3, 4.5), (6, 9.0), (7, 10.5)]}


def test_disabled_tracker_writes_nothing(tmp_path: Path) -> None:
    for cfg, enabled in ((TrackingConfig(), False), (TrackingConfig(backends=[]), True)):
        t = Tracker.open(cfg, stage="sft", output=str(tmp_path), work_dir=str(tmp_path), enabled=enabled)
        t.log(1, {"a": 1.0})
        t.close()
    assert list(tmp_path.iterdir()) == []


def test_a_failing_backend_is_left_out_and_the_run_goes_on(tmp_path: Path, capsys) -> None:
    class Broken:
        def log(self, step: int, scalars: dict[str, float]) -> None:
            raise ConnectionError("server gone")

    class Kept:
        def __init__(self) -> None:
            self.steps: list[int] = []

        def log(self, step: int, scalars: dict[str, float]) -> None:
            self.steps.append(step)

    kept = Kept()
    t = Tracker([Broken(), kept])
    t.log(1, {"a": 1.0})
    t.log(2, {"a": 1.0})
    assert kept.steps == [1, 2]
    assert capsys.readouterr().err.count("Broken.log failed (ConnectionError: server gone)") == 1


def test_rl_and_eval_scalar_names_by_hand() -> None:
    metrics = {"reward_mean": 0.5, "reward_std": 0.25, "calls_per_turn": 1.5, "staleness_max": 1,
               "learner_s": 2.0, "k_histogram": {"4": 3, "8": 5}, "reward_by_k": {"4": 0.1}, "samples": 8,
               "finish_reasons": {"answer": 8}}  # fmt: skip
    assert rl_scalars(metrics) == {
        "reward/mean": 0.5,
        "reward/std": 0.25,
        "tools/calls_per_turn": 1.5,
        "async/staleness_max": 1.0,
        "time/learn_s": 2.0,
        "gating/rollouts_k4": 3.0,
        "gating/rollouts_k8": 5.0,
        "gating/reward_k4": 0.1,
    }
    results = {"protocols": {"agentic": {"synthetic": {"headline": "accuracy", "accuracy": 62.5, "errors": 1,
               "scored": 7}}}, "totals": {"samples": 8, "errors": 1, "error_share": 0.125}}  # fmt: skip
    assert eval_scalars(results) == {
        "eval/synthetic/agentic/accuracy": 62.5,
        "eval/synthetic/agentic/errors": 1.0,
        "eval/synthetic/agentic/scored": 7.0,
        "eval/total/samples": 8.0,
        "eval/total/errors": 1.0,
        "eval/total/error_share": 0.125,
    }


def test_mfu_by_hand() -> None:
    # the 6N rule: 8e9 parameters, 10,000 tokens/s over 8 H100s: 6 * 8e9 * 1e4 / (8 * 989e12) = 0.0607
    assert mfu_6n(10_000, 8_000_000_000, 8, peak_tflops("NVIDIA H100 80GB HBM3")) == pytest.approx(
        0.060667, 1e-4
    )
    # the model rule: 4.945e14 model FLOPs of one rank's packs in 2 s on one H100: 4.945e14 / 2 / 989e12
    assert mfu(4.945e14, 2.0, 1, peak_tflops("NVIDIA H100 80GB HBM3")) == pytest.approx(0.25, 1e-9)
    assert peak_tflops("NVIDIA H200") == 989.0 and peak_tflops("Tesla T4", 65.0) == 65.0
    assert mfu_6n(10_000, 8, 1, peak_tflops("")) is None  # a CPU: no peak, no MFU
    assert mfu(1e12, 1.0, 1, peak_tflops("")) is None


def test_sft_scalars_log_both_rules_apart() -> None:
    record = {"loss": 1.0, "lr": 1e-5, "grad_norm": 0.5, "tokens_per_s": 100.0, "step_time_s": 2.0,
              "padding_share": 0.1, "rows_dropped": 0}  # fmt: skip
    out = sft_scalars(record, 0.25, 0.33)
    assert out["perf/mfu"] == 0.25 and out["perf/mfu_6n"] == 0.33
    assert "perf/mfu" not in sft_scalars(record) and "perf/mfu_6n" not in sft_scalars(record)


def test_flatten_params() -> None:
    assert flatten_params({"a": {"b": 1, "c": [1, 2]}, "d": "x"}) == {"a.b": "1", "a.c": "[1, 2]", "d": "x"}


@pytest.mark.parametrize("stage", ["sft", "rl", "eval"])
def test_every_stage_has_the_tracking_block(stage: str) -> None:
    cfg = stage_config(stage)()
    assert cfg.tracking.backends == ["tensorboard"] and cfg.tracking.log_every == 1


def test_s3_output_uploads_at_each_checkpoint_and_a_fresh_pod_resumes_from_it(
    s3_bucket: str, tmp_path: Path
) -> None:
    from paravt_core import storage

    out = f"{s3_bucket}/run/sft"
    cfg = TrackingConfig()
    first = Tracker.open(cfg, stage="sft", output=out, work_dir=str(tmp_path / "pod1"), last_step=6)
    for step in (1, 2):
        first.log(step, {"train/loss": float(step)})
    first.checkpoint()  # the checkpoint at step 2
    first.log(3, {"train/loss": 3.0})  # then the pod is lost: step 3 never reaches S3
    assert storage.list_uris(f"{out}/tensorboard"), "nothing uploaded at the checkpoint"

    again = Tracker.open(
        cfg, stage="sft", output=out, work_dir=str(tmp_path / "pod2"), resume_step=2, last_step=6
    )
    for step in (3, 4, 5, 6):
        again.log(step, {"train/loss": step + 0.5})
    again.close()
    local = tmp_path / "read"
    storage.download_dir(f"{out}/tensorboard", local)
    assert scalars(local)["train/loss"] == [(1, 1.0), (2, 2.0), (3, 3.5), (4, 4.5), (5, 5.5), (6, 6.5)]
    assert sorted(raw_points(local)) == [("train/loss", s) for s in range(1, 7)]
    assert len(event_files(local)) == 2  # the compacted steps 1-2 and the resumed writer's file


def test_nightly_trend_holds_one_point_per_night_even_when_a_night_is_reported_twice(tmp_path: Path) -> None:
    from paravt_core.report.stage import run
    from tests.support.report_support import _config, _seed

    prefix, output = str(tmp_path / "nightly"), str(tmp_path / "report")
    _seed(prefix)  # 11-21: videomme agentic 60.0; 11-22: failed; 11-23: agentic 62.5, direct 58.0
    for _ in range(2):  # the night's report step retried
        assert run(_config(prefix, output, "FAILED")).outputs["tensorboard"] == f"{prefix}/tensorboard"
    # days since 1970-01-01: 56 years of 365 days + 14 leap days (1972..2024) to 2026-01-01, + 304 (Jan-Oct) + 20
    day = {"2026-11-21": 56 * 365 + 14 + 304 + 20, "2026-11-23": 56 * 365 + 14 + 304 + 22}
    series = scalars(tmp_path / "nightly" / "tensorboard")
    assert series == {
        "nightly/videomme/agentic": [(day["2026-11-21"], 60.0), (day["2026-11-23"], 62.5)],
        "nightly/videomme/direct": [(day["2026-11-23"], 58.0)],
    }
    acc = EventAccumulator(str(tmp_path / "nightly" / "tensorboard"))
    acc.Reload()
    assert [e.wall_time for e in acc.Scalars("nightly/videomme/direct")] == [
        1795392000.0
    ]  # 2026-11-23T00:00Z
    assert len(event_files(tmp_path / "nightly" / "tensorboard")) == 1


def test_a_backend_that_cannot_start_fails_a_training_stage_but_not_a_finished_eval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from paravt_core.tracking.mlflow_backend import MlflowError

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = TrackingConfig(backends=["tensorboard", "mlflow"])
    with pytest.raises(MlflowError, match="set tracking.mlflow.uri or MLFLOW_TRACKING_URI"):
        Tracker.open(cfg, stage="sft", output=str(tmp_path / "a"), work_dir=str(tmp_path))
    t = Tracker.open(cfg, stage="eval", output=str(tmp_path / "b"), work_dir=str(tmp_path), strict=False)
    assert [type(b).__name__ for b in t.backends] == ["TensorBoardBackend"]
    assert "tracking: the mlflow backend did not start (MlflowError" in capsys.readouterr().err
    t.close()
