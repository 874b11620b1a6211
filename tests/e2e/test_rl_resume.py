"""Exact resume: a run killed with SIGKILL after a checkpoint and restarted with the same command reproduces
the per-step rewards and losses and the final weights of an uninterrupted run (fixed seeds, CPU)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from paravt_core.models import load
from paravt_core.rl.learner import state_checksum
from tests.support.paths import ROOT
from tests.support.rl_support import TINY_RL, straight_then_resumed

STEPS = ["steps=4", "checkpoint.every=2", "group_size=3", "agent.max_new_tokens=32"]


def _history(out: Path) -> list[tuple[float, float, float]]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [(m["step"], m["reward_mean"], m.get("loss")) for m in rows]


def test_sigkill_then_rerun_matches_the_uninterrupted_run(rl_data, tiny_model_dir, tmp_path):
    base = [
        sys.executable, "-m", "paravt_core.cli", "rl", "--config", str(TINY_RL),
        f"data={rl_data}", f"model={tiny_model_dir}", *STEPS,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    straight, killed = straight_then_resumed(base, tmp_path, env, after_step=2)  # killed in step 3
    assert _history(killed) == _history(straight)  # every step's reward and loss, bit for bit
    # TensorBoard holds each step once, in the files themselves, with the uninterrupted run's values
    from tests.support.tracking_support import raw_points, scalars

    assert sorted(step for tag, step in raw_points(killed / "tensorboard") if tag == "reward/mean") == [
        1,
        2,
        3,
        4,
    ]
    assert scalars(killed / "tensorboard")["reward/mean"] == scalars(straight / "tensorboard")["reward/mean"]
    assert state_checksum(load(str(killed / "final")).model.state_dict()) == state_checksum(
        load(str(straight / "final")).model.state_dict()
    )


def test_s3_output_checkpoints_final_and_resume(rl_data, tiny_model_dir, s3_bucket, tmp_path, capfd):
    from paravt_core import checkpoint, storage
    from paravt_core.rl.stage import run
    from tests.support.rl_support import tiny_rl_config

    out = f"{s3_bucket}/runs/rl"
    overrides = ["checkpoint.every=1", "group_size=2", "agent.max_turns=0", "agent.max_new_tokens=16"]
    run(tiny_rl_config(rl_data, tiny_model_dir, out, "steps=2", *overrides))
    assert [s for s, _, ok in checkpoint.list_checkpoints(out) if ok] == [1, 2]
    assert storage.is_complete(out) and storage.is_complete(f"{out}/final")
    # a longer run with the same output continues from step 2 on S3
    result = run(tiny_rl_config(rl_data, tiny_model_dir, out, "steps=3", *overrides))
    history = [json.loads(x) for x in storage.read_bytes(f"{out}/metrics.jsonl").decode().splitlines()]
    assert [m["step"] for m in history] == [0, 1, 2] and history[-1]["policy_version"] == 3
    assert [s for s, _, ok in checkpoint.list_checkpoints(out) if ok] == [2, 3]  # keep_last 2
    step3 = checkpoint.step_dir(out, 3)
    # the shared checkpoint layout (paravt_core/checkpoint.py): one RNG file per rank, no LR scheduler in RL
    assert sorted(u[len(step3) + 1 :] for u in storage.list_uris(step3)) == [
        "_COMPLETE",
        "model_optim/.metadata",
        "model_optim/__0_0.distcp",
        "rng/rank_00000.pt",
        "trainer.json",
    ]
    trainer = json.loads(storage.read_bytes(f"{step3}/trainer.json"))
    assert state_checksum(load(result.outputs["final"]).model.state_dict()) == trainer["weights_sha256"]
    # the TensorBoard logs reached S3 (at each checkpoint and at the end, the continued run's too), each step once
    from tests.support.tracking_support import raw_points

    storage.download_dir(f"{out}/tensorboard", tmp_path / "tb")
    assert sorted(step for tag, step in raw_points(tmp_path / "tb") if tag == "reward/mean") == [1, 2, 3]
    assert "tracking:" not in capfd.readouterr().err  # no backend failed
