"""``make gpu-check`` (scripts/gpu_check.py) cannot run here; what can: the item runner and report, the parity
rule, and the commands it runs (their configs load, the launcher plan pins the server to GPU 1, SGLang's own
``ServerArgs`` parser accepts the server command)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from paravt_core.config import SftConfig, load_config
from paravt_core.rl.config import RlConfig
from paravt_core.rl.launch import plan

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_check  # noqa: E402


def test_items_run_in_order_and_failures_skip_their_dependants(tmp_path):
    def boom():
        raise RuntimeError("server exited with code 1")

    items = gpu_check.run_items(
        {"sglang_launch": boom, "sft_step": lambda: "1 step", "rl_step": lambda: "ok"}
    )
    status = {i.name: (i.status, i.detail.splitlines()[0]) for i in items}
    assert [i.name for i in items] == gpu_check.ITEMS
    assert status == {
        "sglang_launch": ("fail", "RuntimeError: server exited with code 1"),
        "prompt_token_parity": ("skipped", "needs sglang_launch"),
        "greedy_parity": ("skipped", "needs sglang_launch"),
        "disk_push": ("skipped", "needs sglang_launch"),
        "nccl_push": ("skipped", "needs sglang_launch, greedy_parity"),
        "sft_step": ("pass", "1 step"),
        "rl_step": ("pass", "ok"),
    }
    md = gpu_check.write_report(items, tmp_path, {"gpus": 2}).read_text()
    assert (
        "| sglang_launch | FAIL |" in md
        and "| sft_step | PASS |" in md
        and md.rstrip().endswith("2/7 passed")
    )
    saved = json.loads((tmp_path / "gpu-check.json").read_text())
    assert [i["status"] for i in saved["items"]] == [
        "fail",
        "skipped",
        "skipped",
        "skipped",
        "skipped",
        "pass",
        "pass",
    ]


def test_only_the_selected_items_run():
    """``--only sft_step`` (one GPU, no SGLang): the others are not run and say why."""
    items = gpu_check.run_items({"sft_step": lambda: "1 step"})
    assert [(i.name, i.status, i.detail) for i in items] == [
        ("sglang_launch", "skipped", "not selected"),
        ("prompt_token_parity", "skipped", "needs sglang_launch"),
        ("greedy_parity", "skipped", "needs sglang_launch"),
        ("disk_push", "skipped", "needs sglang_launch"),
        ("nccl_push", "skipped", "needs sglang_launch, greedy_parity"),
        ("sft_step", "pass", "1 step"),
        ("rl_step", "skipped", "not selected"),
    ]
    with pytest.raises(SystemExit):
        gpu_check.main(["--only", "sft-step"])  # not an item: argparse refuses it before any work


def _c(tokens, logprobs):
    return SimpleNamespace(token_ids=tokens, logprobs=logprobs)


def test_greedy_agree():
    assert gpu_check.greedy_agree(_c([1, 2, 3], [-1.0, -2.0, -3.0]), _c([1, 2, 3], [-1.05, -2.0, -2.95])) == (
        "3 of 3 tokens equal, max log-prob gap 0.0500"
    )
    # a near tie broken differently at token 1: both chose a token of about the same probability
    assert "1 of 3 tokens equal, a near tie at token 1" in gpu_check.greedy_agree(
        _c([1, 5, 6], [-1.0, -2.00, -1.0]), _c([1, 7, 8], [-1.0, -2.04, -3.0])
    )
    with pytest.raises(AssertionError, match="differ by 0.500"):  # not a tie: one engine was far more sure
        gpu_check.greedy_agree(_c([1, 5], [-1.0, -1.5]), _c([1, 7], [-1.0, -2.0]))
    with pytest.raises(AssertionError, match="lengths differ"):
        gpu_check.greedy_agree(_c([1, 2], [-1.0, -1.0]), _c([1], [-1.0]))


def test_commands_load_and_plan(sglang_checker):
    sft = gpu_check.sft_command("/w/model", "/w/data", "/w/sft", python="python")
    assert sft[:5] == ["python", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1"]
    at = sft.index("--config")
    cfg = load_config(SftConfig, sft[at + 1], sft[at + 2 :])
    assert (cfg.model.uri, cfg.trainer.steps, cfg.model.bf16, cfg.model.gradient_checkpointing) == (
        "/w/model",
        1,
        True,
        True,
    )
    rl = gpu_check.rl_command("/w/model", "/w/data", "/w/rl", 30000, python="python")
    assert rl[:3] == ["python", "-m", "paravt_core.rl.launch"]
    rl_cfg = load_config(RlConfig, rl[4], rl[5:])
    p = plan(rl_cfg, "/w/rl.yaml", gpus=2, model_dir="/w/model", python="python")
    assert p.server_env == {"CUDA_VISIBLE_DEVICES": "1"} and p.learner_env == {"CUDA_VISIBLE_DEVICES": "0"}
    assert "engine.server_ranks=1" in p.learner_command and "--nproc-per-node=1" in p.learner_command
    args = sglang_checker.server_args(p.server_command[3:])
    assert args["error"] is None and args["args"]["model_path"] == "/w/model"


def test_without_a_gpu_every_item_fails_with_the_reason(tmp_path, capsys):
    assert gpu_check.main(["--work", str(tmp_path)]) == 1
    saved = json.loads((tmp_path / "gpu-check.json").read_text())
    assert {i["status"] for i in saved["items"]} == {"fail"}
    assert "no CUDA device" in capsys.readouterr().out
