"""The SFT loop's own rules, each worked out by hand (the survivors of the mutation run of
``paravt_core/sft/trainer.py``): the gates' recorded counts, the step record, the result of a run without
checkpoints, the profiler ranges ``scripts/gpu_profile.py`` reads, the last step's tracking point, a resume
(its log line, its MLflow run continued, other data refused), the injected fault, a feed with no usable row,
and the progress bar."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from torch.profiler import ProfilerActivity, profile

from paravt_core import checkpoint, storage
from paravt_core.config import SftConfig, load_config
from paravt_core.faults import InjectedFault
from paravt_core.sft.trainer import SftError, _Bar, _check_bad_rows, preflight_gate, train
from scripts.gpu_profile import RANGES
from tests.support.paths import ROOT
from tests.support.sft_support import text
from tests.support.tracking_support import raw_points

REPO = ROOT
TINY = REPO / "configs" / "sft" / "tiny.yaml"


def _cfg(model: str, data: str, out: Path, *extra: str) -> SftConfig:
    overrides = [f"model.uri={model}", f"data.input={data}", f"output={out}", f"work_dir={out}-work"]
    return load_config(SftConfig, str(TINY), [*overrides, "data.num_workers=0", *extra])


def _quiet(*_: object) -> None:
    pass


def test_the_bad_row_gate_records_what_it_counted() -> None:
    cfg = load_config(SftConfig, str(TINY), ["data.max_bad_fraction=0.25", "data.bad_gate_min_rows=10"])
    _check_bad_rows(cfg, 3, Counter({"too_long": 1}), final=False)  # 4 rows seen < 10: not judged yet
    _check_bad_rows(cfg, 3, Counter({"too_long": 1}), final=True)  # 1 of 4 = 25 %: at the limit, allowed
    with pytest.raises(SftError) as err:
        _check_bad_rows(cfg, 3, Counter({"too_long": 1, "messages_not_json": 1}), final=True)
    # 2 of 5 = 40 % > 25 %
    assert str(err.value) == (
        "2 of 5 rows dropped (40.0% > data.max_bad_fraction=25.0%): messages_not_json=1, too_long=1"
    )
    assert err.value.metrics == {
        "gate": "bad_rows",
        "rows_seen": 5,
        "rows_used": 3,
        "rows_dropped": {"too_long": 1, "messages_not_json": 1},
    }


def test_the_preflight_gate_records_no_row_used() -> None:
    cfg = load_config(SftConfig, str(TINY), ["data.max_bad_fraction=0.4"])
    good = json.dumps(
        [{"role": "user", "content": [text("q")]}, {"role": "assistant", "content": [text("a")]}]
    )
    messages = pa.chunked_array([[good, "{not json", good]])
    preflight_gate(cfg, messages, ["a", "b", "c"])  # 1 of 3 = 33 % <= 40 %
    with pytest.raises(SftError) as err:
        preflight_gate(cfg, pa.chunked_array([["{not json", "{not json", good]]), ["a", "b", "c"])
    metrics = err.value.metrics
    assert {k: metrics[k] for k in ("gate", "rows_seen", "rows_used", "rows_dropped")} == {
        "gate": "preflight",
        "rows_seen": 3,
        "rows_used": 0,
        "rows_dropped": {"messages_not_json": 2},
    }
    assert [b["row_id"] for b in metrics["bad_rows"]] == ["a", "b"]


def test_a_run_without_checkpoints_its_records_ranges_and_last_point(
    tiny_model_dir: str, sft_data_output: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    cfg = _cfg(tiny_model_dir, sft_data_output, out, "trainer.steps=3", "tracking.backends=[tensorboard]",
               "tracking.log_every=2")  # fmt: skip
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        result = train(cfg, log=_quiet, save_checkpoints=False)
    records = result.records
    assert [r["step"] for r in records] == [1, 2, 3]
    # grad_accum 1: one packed sequence of 2048 positions per step, so padding = 1 - tokens / 2048
    assert [r["sequences"] for r in records] == [1, 1, 1]
    assert [r["padding_share"] for r in records] == [pytest.approx(1 - r["tokens"] / 2048) for r in records]
    assert all(0 < r["tokens"] <= 2048 for r in records)
    assert (result.rows_used, result.dropped, result.final_uri, result.resumed_from, result.world) == (
        records[-1]["rows_used"],
        {},
        "",
        None,
        1,
    )
    assert isinstance(result.rows_used, int) and result.rows_used >= 3
    assert not (out / "checkpoints").exists() and not (out / "final").exists()
    # every range the GPU profile reads, once per step (one micro-batch per step); "sft/log" twice: the
    # step's one read inside train_step, then the record
    counts = Counter(e.name for e in prof.events() if e.name in RANGES)
    assert counts == {**{name: 3 for name in RANGES}, "sft/log": 6}
    # log_every 2 over 3 steps: step 2, and the last step although 3 is not a multiple of 2
    assert sorted({s for tag, s in raw_points(out / "tensorboard") if tag == "train/loss"}) == [2, 3]


def test_a_faulted_run_resumes_its_mlflow_run_and_other_data_is_refused(
    tiny_model_dir: str,
    sft_data_output: str,
    mlflow_server: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    out = tmp_path / "out"
    common = [
        "checkpoint.every=2",
        "tracking.backends=[mlflow]",
        "tracking.mlflow.experiment=sft-units-resume",
    ]
    monkeypatch.setenv("PARAVT_FAULT", "sft:2")
    with pytest.raises(InjectedFault, match="sft after step 2"):
        train(_cfg(tiny_model_dir, sft_data_output, out, "trainer.steps=3", *common), log=_quiet)
    monkeypatch.delenv("PARAVT_FAULT")
    step2 = checkpoint.step_dir(str(out), 2)
    assert checkpoint.latest_complete(str(out)) == step2
    saved = json.loads((Path(step2) / "trainer.json").read_text())
    assert set(saved["tracking"]) == {"mlflow_run_id"}

    lines: list[str] = []
    result = train(_cfg(tiny_model_dir, sft_data_output, out, "trainer.steps=3", *common), log=lines.append)
    assert lines == [
        "attention: packed_sdpa, sdpa backend flash (on CPU: flash, then math)",
        f"resuming from {step2} (step 2, world size 1 -> 1)",
    ]
    assert result.resumed_from == step2 and [r["step"] for r in result.records] == [1, 2, 3]
    client = MlflowClient(mlflow_server)
    experiment = client.get_experiment_by_name("sft-units-resume")
    runs = client.search_runs([experiment.experiment_id])
    # the resumed run continued the run of the checkpoint: one run, every step once
    assert [r.info.run_id for r in runs] == [saved["tracking"]["mlflow_run_id"]]
    history = client.get_metric_history(runs[0].info.run_id, "train/loss")
    assert sorted(m.step for m in history) == [1, 2, 3]

    n_rows = saved["n_rows"]
    other = _cfg(tiny_model_dir, sft_data_output, out, "trainer.steps=4", "data.seed=7", *common)
    with pytest.raises(SftError) as err:
        train(other, log=_quiet)
    step3 = checkpoint.step_dir(str(out), 3)
    assert str(err.value) == (
        f"checkpoint {step3} was written for {n_rows} rows with data.seed=0, this run has {n_rows} rows and "
        "seed 7: use a new output or the same data"
    )


def test_a_feed_with_no_usable_row_says_so(tiny_model_dir: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "sft").mkdir(parents=True)
    too_long = json.dumps(
        [{"role": "user", "content": [text("x")]}, {"role": "assistant", "content": [text("long " * 1000)]}]
    )
    pq.write_table(
        pa.table({"id": ["r0", "r1"], "messages": [too_long, too_long]}), data / "sft" / "p.parquet"
    )
    storage.mark_complete(str(data))
    cfg = _cfg(tiny_model_dir, str(data), tmp_path / "out", "packing.length=512", "data.max_bad_fraction=1.0")
    # two rows, both too long: the third drop in a row is more than the rows there are
    with pytest.raises(SftError) as err:
        train(cfg, log=_quiet)
    assert str(err.value) == "no row of the input can be trained on (dropped: {'too_long': 3})"


def test_the_progress_bar_counts_to_the_last_step_and_shows_the_record() -> None:
    bar = _Bar(30, 10)
    try:
        (task,) = bar.progress.tasks
        assert (task.total, task.completed) == (30, 10)
        bar.update(11, {"loss": 1.234567, "tokens_per_s": 1499.6, "lr": 0.003})
        assert task.completed == 11
        assert task.fields["info"] == "loss 1.2346  1500 tok/s  lr 3.00e-03"
    finally:
        bar.close()
