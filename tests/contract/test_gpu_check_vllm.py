"""``gpu_check``'s engine items on vLLM (``scripts/gpu_check_vllm.py``), run here on vLLM's CPU build exactly as
they run on a GPU machine (``python scripts/gpu_check.py --engine vllm``): the stage's own launch, prompt-token
and greedy parity, log-prob parity, the disk push, the learner's push through ``rl.push.WeightPush`` (from disk
and over a process group), and one RL step that launches its own server and pushes over a process group. Each
item must also fail on a wrong server: weights changed behind the check's back make the parity fail."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from paravt_core.rl.weight_sync import DiskSync
from scripts import gpu_check
from scripts.gpu_check_vllm import ITEMS, NEEDS, VllmChecks
from tests.fixtures.served import unavailable
from tests.support.paths import ROOT
from tests.support.ports import free_port

VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


def test_the_vllm_items_pass_on_the_cpu_build_and_fail_on_wrong_weights(
    tiny_model_dir: str,
    rl_data: str,
    tmp_path: Path,
) -> None:
    if not VLLM_PYTHON.exists():
        unavailable(
            f"vLLM's CPU build is not set up in {VLLM_PYTHON.parent.parent} (scripts/setup.sh makes it)"
        )
    checks = VllmChecks(
        tmp_path, tiny_model_dir, rl_data, port=free_port(), python=str(VLLM_PYTHON), cpu=True
    )
    try:
        engine_items = {n: getattr(checks, n) for n in ITEMS if n != "rl_step"}
        items = gpu_check.run_items(engine_items, ITEMS, NEEDS)
        assert [(i.name, i.status) for i in items] == [
            *[(n, "pass") for n in ITEMS[:-1]],
            ("rl_step", "skipped"),
        ], [(i.name, i.status, i.detail) for i in items]
        detail = {i.name: i.detail for i in items}
        assert "--mm-processor-kwargs" in detail["vllm_launch"] and "--dtype float32" in detail["vllm_launch"]

        # a server holding other weights than the check believes: the parity fails, naming the gap
        moved = checks.perturbed()
        DiskSync(checks.engine, moved.model, str(tmp_path / "behind")).push(moved.model.state_dict(), 9)
        with pytest.raises(AssertionError, match=r"^log-probs differ by "):
            checks.logprob_parity()
    finally:
        checks.stop_server()
    # the RL stage launching vLLM itself (engine.kind=vllm, no base_url): it trains, and stops the server
    step = gpu_check.run_items({"rl_step": checks.rl_step}, ["rl_step"], {})[0]
    assert step.status == "pass", step.detail
    assert step.detail.startswith("1 step, ")
    assert "Application startup complete" in (tmp_path / "rl-server.log").read_text()  # the server's log kept
    with pytest.raises(httpx.ConnectError):  # stopped with the stage
        httpx.get(f"http://127.0.0.1:{checks.port}/health", timeout=5)
