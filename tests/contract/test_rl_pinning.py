"""Where the SGLang server that the RL stage starts itself runs. Without ``engine.gpus`` it
inherits the learner's devices and starts on GPU 0, learner rank 0's GPU: under torchrun that launch is
refused (before anything is loaded or written); with ``engine.gpus`` it is pinned there, and GPUs a learner
process of this node uses are refused."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from paravt_core.config import ConfigError, load_config
from paravt_core.rl.config import RlConfig
from paravt_core.train.dist import Dist
from tests.support.paths import ROOT
from tests.support.rl_support import TINY_RL

REPO = ROOT
ONE = Dist()  # one plain process
TWO_RANKS = Dist(rank=0, world=2, local_rank=0, device=torch.device("cuda", 0), sharded=True)


def _cfg(*overrides: str) -> RlConfig:
    return load_config(RlConfig, TINY_RL, ["engine.kind=sglang", *overrides])


def test_under_torchrun_the_in_stage_launch_needs_engine_gpus():
    from paravt_core.rl.stage import server_placement

    with pytest.raises(ConfigError, match="without engine.base_url under torchrun: .* rank 0's GPU"):
        server_placement(_cfg(), TWO_RANKS, {"LOCAL_WORLD_SIZE": "2"})


def test_engine_gpus_pin_the_server_off_the_learners_gpus():
    from paravt_core.rl.stage import server_placement

    env = {"LOCAL_WORLD_SIZE": "2"}
    assert server_placement(_cfg("engine.gpus=[2,3]"), TWO_RANKS, env) == {"CUDA_VISIBLE_DEVICES": "2,3"}
    with pytest.raises(ConfigError, match=r"GPU\(s\) \[1\] are the learner's"):
        server_placement(_cfg("engine.gpus=[1,2]"), TWO_RANKS, env)
    # the learner's ranks see GPUs 4 and 5 of the node (CUDA_VISIBLE_DEVICES): 0 and 1 are free for the server
    visible = {"LOCAL_WORLD_SIZE": "2", "CUDA_VISIBLE_DEVICES": "4,5"}
    assert server_placement(_cfg("engine.gpus=[0,1]"), TWO_RANKS, visible) == {"CUDA_VISIBLE_DEVICES": "0,1"}
    with pytest.raises(ConfigError, match=r"GPU\(s\) \[5\]"):
        server_placement(_cfg("engine.gpus=[5]"), TWO_RANKS, visible)
    # one process: the learner's device is cfg.device
    with pytest.raises(ConfigError, match=r"GPU\(s\) \[0\]"):
        server_placement(_cfg("device=cuda", "engine.gpus=[0]"), ONE, {})
    assert server_placement(_cfg("device=cuda:1", "engine.gpus=[0]"), ONE, {}) == {
        "CUDA_VISIBLE_DEVICES": "0"
    }
    assert server_placement(_cfg(), ONE, {}) is None  # one process, nothing reserved: as before
    assert server_placement(_cfg("engine.base_url=http://s:30000"), TWO_RANKS, env) is None  # not ours


def test_torchrun_refuses_the_unpinned_launch_first(rl_data, tiny_model_dir, tmp_path):
    out = tmp_path / "rl"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd += ["-m", "paravt_core.cli", "rl", "--config", str(TINY_RL), f"data={rl_data}"]
    cmd += [f"model={tiny_model_dir}", f"output={out}", "engine.kind=sglang", "engine.port=9"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0
    assert "without engine.base_url under torchrun" in done.stderr, done.stderr[-3000:]
    assert not out.exists() or not any(out.iterdir())  # no config.yaml, no checkpoint
