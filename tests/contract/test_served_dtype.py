"""The dtype the rollout server serves: what SFT and RL write, what every push writes, what the server is told.

SGLang 0.5.23 launched with ``--dtype auto`` serves the dtype of ``config.json``, and maps float32 to float16
(``configs/model_config.py``, ``_get_and_verify_dtype``): a bf16 recipe whose checkpoints say float32 would be
served in float16. These tests ask SGLang's own ``ModelConfig`` (``sglang_checker.model_dtype``, run from its
wheel) what it makes of the checkpoints our stages write.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from paravt_core.config import SftConfig, load_config
from paravt_core.engines.sglang_engine import SGLangEngine, launch_command
from paravt_core.models import load
from paravt_core.rl.weight_sync import DiskSync, NcclSync
from tests.support.paths import ROOT
from tests.support.rl_support import tiny_rl_config

REPO = ROOT


def _stored_dtypes(folder: Path) -> set[str]:
    out = set()
    for file in folder.glob("*.safetensors"):
        with safe_open(str(file), "pt") as f:
            out |= {str(f.get_tensor(k).dtype).removeprefix("torch.") for k in f.keys()}  # noqa: SIM118
    return out


def _bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.glob("*.safetensors"))


def test_the_tiny_model_as_built_would_be_served_in_float16(sglang_checker, tiny_model_dir):
    # the rule the other tests guard against, seen on SGLang's own code: float32 + auto -> float16
    assert sglang_checker.model_dtype(tiny_model_dir) == "float16"
    assert sglang_checker.model_dtype(tiny_model_dir, "bfloat16") == "bfloat16"


def test_sft_final_of_a_bf16_recipe_is_served_in_bf16(
    sglang_checker, tiny_model_dir, sft_data_output, tmp_path
):
    from paravt_core.sft.stage import run

    out = tmp_path / "sft"
    overrides = [f"model.uri={tiny_model_dir}", f"data.input={sft_data_output}", f"output={out}"]
    overrides += [f"work_dir={tmp_path / 'work'}", "trainer.steps=1", "checkpoint.every=1", "model.bf16=true"]
    run(load_config(SftConfig, REPO / "configs" / "sft" / "tiny.yaml", overrides))
    final = out / "final"
    assert _stored_dtypes(final) == {"bfloat16"}
    assert json.loads((final / "config.json").read_text())["dtype"] == "bfloat16"
    assert sglang_checker.model_dtype(str(final)) == "bfloat16"


def test_rl_final_of_a_bf16_recipe_is_served_in_bf16(
    sglang_checker,
    rl_data,
    tiny_model_dir,
    tmp_path,
    monkeypatch,
):
    import paravt_core.rl.stage as stage
    from paravt_core.train.fsdp import CoreOptions

    # the GPU learner's set-up on CPU: float32 masters under a bf16 recipe (mixed precision needs CUDA for
    # its bf16 compute; on CPU the flag leaves the float32 weights and compute as they are)
    monkeypatch.setattr(stage, "CoreOptions", lambda **kw: CoreOptions(**{**kw, "mixed_precision": True}))
    cfg = tiny_rl_config(rl_data, tiny_model_dir, str(tmp_path / "rl"), "steps=1", "dtype=bfloat16")
    stage.run(cfg)
    final = tmp_path / "rl" / "final"
    assert _stored_dtypes(final) == {"bfloat16"}
    assert json.loads((final / "config.json").read_text())["dtype"] == "bfloat16"
    assert sglang_checker.model_dtype(str(final)) == "bfloat16"


def test_disk_push_writes_the_served_dtype_in_half_the_bytes(
    sglang_checker, receiver, tiny_model_dir, tmp_path
):
    policy = load(tiny_model_dir).model  # float32, like the learner's masters
    weights = {k: v.detach().clone() for k, v in policy.state_dict().items()}
    fp32 = DiskSync(SGLangEngine(receiver.url, timeout_s=60), policy, str(tmp_path / "fp32"))
    bf16 = DiskSync(
        SGLangEngine(receiver.url, timeout_s=60), policy, str(tmp_path / "bf16"), dtype=torch.bfloat16
    )
    fp32.push(weights, 1)
    as_fp32 = tmp_path / "fp32" / "v00000001"
    fp32_bytes = _bytes(as_fp32)
    bf16.push(weights, 2)
    pushed = tmp_path / "bf16" / "v00000002"
    served = receiver.finish()
    # every tensor of the tiny model is floating point: the bytes halve, the header aside
    header = 8 + len(json.dumps({k: [0] * 8 for k in weights}))  # safetensors' JSON header, generous
    assert abs(_bytes(pushed) * 2 - fp32_bytes) < 2 * header, (_bytes(pushed), fp32_bytes)
    assert _stored_dtypes(pushed) == {"bfloat16"}
    assert sglang_checker.model_dtype(str(pushed)) == "bfloat16"
    assert all(torch.equal(served[k], v.bfloat16()) for k, v in weights.items())  # what SGLang loaded
    assert policy.dtype == torch.float32  # the learner's own model is untouched
    assert json.loads((Path(tiny_model_dir) / "config.json").read_text())["dtype"] == "float32"


def test_launch_command_serves_the_recipe_dtype(sglang_checker):
    cmd = launch_command("/m", dtype="bfloat16")
    assert sglang_checker.server_args(cmd[3:])["args"]["dtype"] == "bfloat16"
    assert "--dtype" not in launch_command("/m")  # SGLang's auto: the checkpoint's config decides


@pytest.mark.parametrize("engine", ["transformers", "disk", "distributed", "launched"])
def test_rollout_engine_is_built_in_the_served_dtype(rl_data, tiny_model_dir, tmp_path, engine, monkeypatch):
    """The rollout engine and its weight sync get the recipe's dtype, not the stored one."""
    from paravt_core.engines.sglang_engine import SGLangServer
    from paravt_core.rl.stage import _rollout_engine
    from paravt_core.train.dist import Dist

    # a launched server (GPU machines): the command is what matters here, the process is not started
    monkeypatch.setattr(SGLangServer, "start", lambda self, **_: self)
    extra = ["dtype=bfloat16"]
    if engine == "launched":
        extra += ["engine.kind=sglang", f"engine.staging_dir={tmp_path / 'staging'}"]
    elif engine != "transformers":  # a server given by URL: nothing is contacted until the first push
        extra += ["engine.kind=sglang", "engine.base_url=http://127.0.0.1:9", f"engine.weight_sync={engine}"]
        extra += [f"engine.staging_dir={tmp_path / 'staging'}"]
    cfg = tiny_rl_config(rl_data, tiny_model_dir, str(tmp_path / "out"), *extra)
    policy = load(tiny_model_dir)
    inner, sync = _rollout_engine(cfg, policy, "cpu", torch.bfloat16, Dist())  # one plain process
    if engine == "transformers":
        assert {p.dtype for p in inner.model.parameters()} == {torch.bfloat16}
    elif engine == "launched":
        command = inner.server.command
        assert command[command.index("--dtype") + 1] == "bfloat16"
    else:
        assert isinstance(sync, NcclSync if engine == "distributed" else DiskSync)
        assert sync.dtype == torch.bfloat16


def test_sharded_build_leaves_the_loaded_config_as_stored(tiny_model_dir, tmp_path):
    """``from_config`` writes its dtype into the config it is given: built from the loaded config itself, a
    bf16 checkpoint's config said float32 after the float32 masters were made (and so did what read it)."""
    from paravt_core.checkpoint import save_hf

    loaded = load(tiny_model_dir)
    stored = tmp_path / "bf16"
    save_hf(loaded.model, str(stored), loaded.model.state_dict(), torch.bfloat16)
    loaded.processor.save_pretrained(str(stored))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd += [str(REPO / "tests" / "support" / "train_build_worker.py"), str(stored), str(tmp_path / "out")]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        got = torch.load(tmp_path / f"out.{rank}.pt", weights_only=False)
        assert got["dtypes"] == {"torch.float32"}  # the masters
        assert got["config_dtype"] == "torch.bfloat16", rank  # the checkpoint's config, as stored
