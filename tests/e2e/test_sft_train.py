"""The SFT stage end to end on the tiny Qwen3-VL: kill -9 + restart, FSDP2 on 2 gloo ranks, bad rows."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

from paravt_core import checkpoint, storage
from paravt_core.config import SftConfig, load_config
from paravt_core.models import load
from paravt_core.sft.data import epoch_order
from paravt_core.sft.packing import PackedLoss
from paravt_core.sft.stage import run
from paravt_core.sft.trainer import SftError, make_optimizer, make_scheduler
from paravt_core.train.fsdp import CoreOptions, prepare
from tests.support.paths import ROOT
from tests.support.sft_support import multi_call_row, text

REPO = ROOT
TINY = REPO / "configs" / "sft" / "tiny.yaml"


def _overrides(model: str, data: str, out: Path, *extra: str) -> list[str]:
    return [f"model.uri={model}", f"data.input={data}", f"output={out}", f"work_dir={out}-work", *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path / "model.safetensors"))


def test_sigkill_then_same_command_resumes_with_identical_losses(
    tiny_model_dir: str, sft_data_output: str, tmp_path: Path
) -> None:
    common = ["trainer.steps=8", "checkpoint.every=2", "data.num_workers=1"]
    ref_out = tmp_path / "ref"
    run(load_config(SftConfig, TINY, _overrides(tiny_model_dir, sft_data_output, ref_out, *common)))
    reference = _records(ref_out)
    assert [r["step"] for r in reference] == list(range(1, 9))

    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "paravt_core.cli", "sft", "--config", str(TINY)]
    cmd += _overrides(tiny_model_dir, sft_data_output, out, *common)
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = out / "checkpoints" / "step_00000002" / storage.COMPLETE_MARKER
    deadline = time.monotonic() + 240
    while not first.exists():
        assert proc.poll() is None, "the run ended before its first checkpoint"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert not storage.is_complete(str(out))

    subprocess.run(cmd, env=_env(), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["resumed_from"] is not None and summary["resumed_from"].startswith(
        str(out / "checkpoints")
    )
    resumed = _records(out)
    assert [r["step"] for r in resumed] == list(range(1, 9))
    # Same data position, optimizer, scheduler and RNG: bit-identical losses on CPU.
    assert [r["loss"] for r in resumed] == [r["loss"] for r in reference]
    assert [r["rows_used"] for r in resumed] == [r["rows_used"] for r in reference]
    final, ref_final = _weights(out / "final"), _weights(ref_out / "final")
    assert final.keys() == ref_final.keys()
    for name, tensor in final.items():
        assert torch.equal(tensor, ref_final[name]), name
    # only the newest checkpoints are kept (keep_last 2)
    assert [s for s, _, ok in checkpoint.list_checkpoints(str(out)) if ok] == [6, 8]


def test_fsdp2_on_two_gloo_ranks_then_resume_on_one(
    tiny_model_dir: str, sft_data_output: str, tmp_path: Path
) -> None:
    out = tmp_path / "fsdp"
    extra = ["trainer.steps=4", "checkpoint.every=2", "checkpoint.keep_last=3", "data.num_workers=0"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd += ["-m", "paravt_core.cli", "sft", "--config", str(TINY)]
    cmd += _overrides(tiny_model_dir, sft_data_output, out, *extra)
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["world_size"] == 2
    two_rank = _records(out)
    assert [r["sequences"] for r in two_rank] == [2, 2, 2, 2]  # grad_accum 1 on each of 2 ranks
    assert all(r["loss"] < two_rank[0]["loss"] for r in two_rank[2:])
    # two shard files: the checkpoint really was written by two ranks
    ckpt = checkpoint.step_dir(str(out), 4)
    assert sorted(p.name for p in Path(ckpt, "model_optim").glob("*.distcp")) == [
        "__0_0.distcp",
        "__1_0.distcp",
    ]

    # The final HF checkpoint loads through paravt_core.models.load and holds the step-4 weights.
    final = load(str(out / "final"))
    cfg = load_config(SftConfig, TINY, _overrides(tiny_model_dir, sft_data_output, out, *extra))
    inner = load(tiny_model_dir).model
    prepare(inner, CoreOptions(freeze_vision=cfg.train.freeze_vision), trainable=True)  # as the trainer did
    fresh = PackedLoss(inner)
    optimizer = make_optimizer(fresh, cfg)
    scheduler = make_scheduler(optimizer, cfg)
    state = checkpoint.load(
        ckpt, fresh, optimizer, staging_root=str(tmp_path / "staging"), scheduler=scheduler
    )
    assert state["step"] == 4 and state["world_size"] == 2
    final_sd = final.model.state_dict()
    for name, tensor in fresh.inner.state_dict().items():
        assert torch.equal(tensor, final_sd[name]), name
    steps = {int(s["step"]) for s in optimizer.state_dict()["state"].values()}
    assert steps == {4}  # every parameter's AdamW state came back, four updates old
    assert scheduler.last_epoch == 4

    # Resume the 2-rank run on one process: history kept, two more steps, one sequence each.
    out1 = tmp_path / "one"
    shutil.copytree(out / "checkpoints", out1 / "checkpoints")
    extra1 = ["trainer.steps=6", "checkpoint.every=2", "data.num_workers=0"]
    result = run(load_config(SftConfig, TINY, _overrides(tiny_model_dir, sft_data_output, out1, *extra1)))
    assert result.metrics["resumed_from"] == checkpoint.step_dir(str(out1), 4)
    one = _records(out1)
    assert one[:4] == two_rank
    assert [r["sequences"] for r in one[4:]] == [1, 1]
    assert one[-1]["rows_used"] > two_rank[-1]["rows_used"]


def test_fsdp2_ranks_with_and_without_media_in_the_same_step(
    tiny_model_dir: str, sft_data_output: str, tmp_path: Path
) -> None:
    # Two rows, one sequence each, two ranks: every step one rank trains the video row and the other the
    # text-only row. Without the blank vision pass the ranks would run different sharded modules and the
    # collectives would not match (a hang or a gloo size error).
    first = sorted(Path(sft_data_output, "sft").glob("*.parquet"))[0]
    video_row = pq.read_table(first).column("messages")[0].as_py()
    data = _bad_rows_output(tmp_path, [video_row, json.dumps(multi_call_row())])
    out = tmp_path / "mixed"
    extra = ["trainer.steps=2", "packing.close_slack=2048", "data.num_workers=0", "checkpoint.every=10"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd += [
        "-m",
        "paravt_core.cli",
        "sft",
        "--config",
        str(TINY),
        *_overrides(tiny_model_dir, data, out, *extra),
    ]
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    records = _records(out)
    assert [r["rows_used"] for r in records] == [2, 4]  # both rows trained in each step


def test_two_rank_step_equals_the_one_rank_step_on_the_same_global_batch(
    tiny_model_dir: str, sft_data_output: str, tmp_path: Path
) -> None:
    """One optimizer step on the same two rows (a video row and a text row with other target counts, one
    packed sequence each): one process with grad_accum 2, or two gloo ranks (FSDP2) with grad_accum 1. The
    loss is the token-weighted mean of the global batch either way, so the gradient norm and the updated
    weights must agree. AdamW is blind to a uniform gradient scale, so its epsilon is set to 1 here: an
    update is then lr * g / (|g| + 1), and a gradient world-times too small shows in the weights too."""
    first = sorted(Path(sft_data_output, "sft").glob("*.parquet"))[0]
    video_row = pq.read_table(first).column("messages")[0].as_py()
    data = _bad_rows_output(tmp_path, [video_row, json.dumps(multi_call_row())])
    common = ["trainer.steps=1", "packing.close_slack=2048", "data.num_workers=0", "checkpoint.every=10"]
    common += [
        "trainer.eps=1.0",
        "trainer.warmup_ratio=0",
        "trainer.weight_decay=0",
        "trainer.max_grad_norm=1e6",
    ]
    one = tmp_path / "one"
    run(load_config(SftConfig, TINY, _overrides(tiny_model_dir, data, one, *common, "trainer.grad_accum=2")))
    two = tmp_path / "two"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd += ["-m", "paravt_core.cli", "sft", "--config", str(TINY)]
    cmd += _overrides(tiny_model_dir, data, two, *common, "trainer.grad_accum=1")
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    (r1,), (r2,) = _records(one), _records(two)
    assert (r1["sequences"], r1["rows_used"], r2["sequences"], r2["rows_used"]) == (2, 2, 2, 2)
    assert r1["loss_tokens"] == r2["loss_tokens"] and r2["loss"] == pytest.approx(r1["loss"], rel=1e-5)
    assert r2["grad_norm"] == pytest.approx(r1["grad_norm"], rel=1e-4)
    start = _weights(Path(tiny_model_dir))
    w1, w2 = _weights(one / "final"), _weights(two / "final")
    moved = set()
    for name, w0 in start.items():
        d1, d2 = (w1[name].double() - w0.double()), (w2[name].double() - w0.double())
        scale = float(d1.abs().max())
        if scale > 0:
            moved.add(name)
        assert float((d2 - d1).abs().max()) <= 1e-3 * scale + 1e-9, name
    # the step moved every tensor but the frozen vision tower's (train.freeze_vision defaults to true)
    assert moved == {name for name in start if not name.startswith("model.visual.")}


def _bad_rows_output(tmp: Path, messages: list[str]) -> str:
    out = tmp / "data"
    (out / "sft").mkdir(parents=True)
    table = pa.table({"id": [f"r{i}" for i in range(len(messages))], "messages": messages})
    pq.write_table(table, out / "sft" / "paravt_sft_bad_6.parquet")
    storage.mark_complete(str(out))
    return str(out)


BAD = {
    1: ("messages_not_json", "{not json"),
    2: ("no_assistant_turn", json.dumps([{"role": "user", "content": [text("hi")]}])),
    3: (
        "missing_media",
        json.dumps(
            [
                {"role": "user", "content": [{"type": "video_url", "video_url": {"url": "/gone/v.mp4"}}]},
                {"role": "assistant", "content": [text("a")]},
            ]
        ),
    ),
    4: (
        "too_long",
        json.dumps(
            [
                {"role": "user", "content": [text("x")]},
                {"role": "assistant", "content": [text("long " * 1000)]},
            ]
        ),
    ),
}


def test_bad_rows_are_counted_and_gate_the_run(tiny_model_dir: str, tmp_path: Path) -> None:
    good = json.dumps(multi_call_row())
    rows = [good if i not in BAD else BAD[i][1] for i in range(6)]  # rows 0 and 5 are good
    data = _bad_rows_output(tmp_path, rows)
    # packing.length 512: a good row (~170 tokens) fits, the 1000-word answer does not.
    # close_slack 512: every sequence closes at once, so each step trains exactly one good row.
    base = ["packing.length=512", "packing.close_slack=512", "data.num_workers=0", "checkpoint.every=10"]
    out = tmp_path / "ok"
    cfg = load_config(
        SftConfig,
        TINY,
        _overrides(tiny_model_dir, data, out, *base, "trainer.steps=2", "data.max_bad_fraction=0.9"),
    )
    result = run(cfg)
    # Two steps train the two good rows of epoch 0; the bad rows seen are those that the documented order
    # (position k of epoch 0 is row epoch_order(seed, 0, n)[k]) puts before the second good row.
    order = epoch_order(cfg.data.seed, 0, 6).tolist()
    seen = order[: max(order.index(0), order.index(5)) + 1]
    expected = {BAD[r][0]: 1 for r in seen if r in BAD}
    assert result.metrics["rows_used"] == 2
    assert result.metrics["rows_dropped"] == expected
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["rows_dropped"] == expected and summary["rows_used"] == 2
    assert (out / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [
        set(r) >= {"loss", "lr", "grad_norm", "tokens_per_s", "padding_share"} for r in _records(out)
    ] == [
        True,
        True,
    ]

    # With a 10 % limit the same data fails with one clear message naming the reasons.
    strict = load_config(
        SftConfig,
        TINY,
        _overrides(
            tiny_model_dir,
            data,
            tmp_path / "strict",
            *base,
            "trainer.steps=4",
            "data.max_bad_fraction=0.1",
            "data.bad_gate_min_rows=1",
        ),
    )
    # Three of the six rows are known bad before the model is loaded: the gate fails there.
    with pytest.raises(SftError, match=r"rows dropped before training \(.*> data.max_bad_fraction=10.0%\)"):
        run(strict)
    assert not storage.is_complete(str(tmp_path / "strict"))

    # A row that only turns out bad when tokenized (too long) is gated while training, after
    # bad_gate_min_rows rows; the failed run's metrics.json says why.
    long_only = _bad_rows_output(tmp_path / "long", [good, BAD[4][1], good, good])
    out = tmp_path / "long-strict"
    cfg = load_config(
        SftConfig,
        TINY,
        _overrides(tiny_model_dir, long_only, out, *base, "trainer.steps=4", "data.max_bad_fraction=0.1")
        + ["data.bad_gate_min_rows=1"],
    )
    with pytest.raises(SftError, match=r"rows dropped \(.*too_long=1$"):
        run(cfg)
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["status"] == "failed" and summary["gate"] == "bad_rows"
    assert summary["rows_dropped"] == {"too_long": 1} and not storage.is_complete(str(out))


def test_incomplete_checkpoints_are_ignored(tmp_path: Path) -> None:
    out = str(tmp_path)
    for step in (2, 4, 6):
        Path(checkpoint.step_dir(out, step), "model_optim").mkdir(parents=True)
        Path(checkpoint.step_dir(out, step), "model_optim", ".metadata").write_bytes(b"x")
    storage.mark_complete(checkpoint.step_dir(out, 2))
    storage.mark_complete(checkpoint.step_dir(out, 4))  # step 6: killed while saving
    assert checkpoint.latest_complete(out) == checkpoint.step_dir(out, 4)
    checkpoint.prune(out, keep_last=1)
    # step 2 is older than kept ones, step 6 is newer than the newest complete one (kept: a run may
    # still be writing it)
    assert [(s, ok) for s, _, ok in checkpoint.list_checkpoints(out)] == [(4, True), (6, False)]


def _linear(weight: float) -> tuple[torch.nn.Linear, torch.optim.AdamW]:
    """A 3 -> 2 linear layer with one AdamW step behind it (so the optimizer has state), then every weight
    set to ``weight`` and every bias to ``-weight``."""
    layer = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=0.1)
    layer(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    with torch.no_grad():
        layer.weight.fill_(weight)
        layer.bias.fill_(-weight)
    return layer, optimizer


def test_s3_resume_never_reads_a_staging_copy_without_its_marker(tmp_path: Path, s3_bucket: str) -> None:
    """Resuming from an s3:// checkpoint downloads it into the rank's staging folder. A folder already there
    without ``_COMPLETE`` (a resume killed while downloading, here a whole copy of another checkpoint whose
    marker never arrived) must be fetched again, not read."""
    saved, saved_opt = _linear(0.5)
    uri = checkpoint.save(
        f"{s3_bucket}/run", 2, saved, saved_opt, {"step": 2}, staging_root=str(tmp_path / "save"), keep_last=2
    )
    other, other_opt = _linear(9.0)
    other_uri = checkpoint.save(
        str(tmp_path / "other"),
        2,
        other,
        other_opt,
        {"step": 1},
        staging_root=str(tmp_path / "x"),
        keep_last=2,
    )
    stale = tmp_path / "stage" / "resume" / "step_00000002"
    shutil.copytree(other_uri, stale)
    (stale / storage.COMPLETE_MARKER).unlink()

    fresh, fresh_opt = _linear(0.0)
    state = checkpoint.load(uri, fresh, fresh_opt, staging_root=str(tmp_path / "stage"))
    assert state == {"step": 2}
    assert torch.equal(fresh.weight, torch.full((2, 3), 0.5)) and torch.equal(
        fresh.bias, torch.full((2,), -0.5)
    )
    assert (stale / storage.COMPLETE_MARKER).is_file()  # the staging folder now holds the whole download
    # and a staging copy with its marker is used as it is (no second download): an edit there shows
    (stale / "trainer.json").write_text('{"step": 7}')
    assert checkpoint.load(uri, fresh, fresh_opt, staging_root=str(tmp_path / "stage")) == {"step": 7}


def test_s3_input_and_output_checkpoints_resume_and_final_loads(
    tiny_model_dir: str, sft_data_output: str, tmp_path: Path, s3_bucket: str
) -> None:
    data = f"{s3_bucket}/data"
    storage.upload_dir(sft_data_output, data)  # parquets and _COMPLETE; media paths stay local
    out = f"{s3_bucket}/sft"
    base = [
        f"model.uri={tiny_model_dir}",
        f"data.input={data}",
        f"output={out}",
        f"work_dir={tmp_path / 'work'}",
        "checkpoint.every=1",
        "data.num_workers=0",
    ]
    first = run(load_config(SftConfig, TINY, [*base, "trainer.steps=2"]))
    assert first.metrics["resumed_from"] is None
    step2 = checkpoint.step_dir(out, 2)
    names = sorted(u[len(step2) + 1 :] for u in storage.list_uris(step2))
    assert names == [
        "_COMPLETE",
        "model_optim/.metadata",
        "model_optim/__0_0.distcp",
        "rng/rank_00000.pt",
        "scheduler.pt",
        "trainer.json",
    ]
    # A longer run on the same (complete) output continues from the newest checkpoint, read back from S3.
    second = run(load_config(SftConfig, TINY, [*base, "trainer.steps=3"]))
    assert second.metrics["resumed_from"] == step2
    records = [json.loads(line) for line in storage.read_bytes(f"{out}/metrics.jsonl").decode().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3]
    loaded = load(f"{out}/final", cache_dir=tmp_path / "cache")
    assert loaded.config.model_type == "qwen3_vl"
