"""The RL topology launcher (``paravt_core.rl.launch``): the published 8-GPU plan, checked by SGLang's own
``ServerArgs`` parser, and the same launcher run on CPU (torchrun, 2 gloo ranks, a loopback server process)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from paravt_core.config import ConfigError, load_config
from paravt_core.rl.config import RlConfig
from paravt_core.rl.launch import launch, plan
from tests.support.paths import ROOT
from tests.support.ports import free_port
from tests.support.rl_support import tiny_rl_config


def test_published_topology_plan(sglang_checker):
    cfg = load_config(RlConfig, ROOT / "configs" / "rl" / "paragrpo_8b.yaml")
    p = plan(cfg, "/tmp/rl.yaml", gpus=8, model_dir="/root/.cache/paravt/models/sft-final", python="python")
    assert p.server_env == {"CUDA_VISIBLE_DEVICES": "7"}
    assert p.learner_env == {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6"}
    assert p.learner_command == [
        "python", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=7",
        "-m", "paravt_core.cli", "rl", "--config", "/tmp/rl.yaml",
        "engine.base_url=http://127.0.0.1:30000", "engine.server_ranks=1",
    ]  # fmt: skip
    assert not p.in_process
    assert p.server_command[:3] == ["python", "-m", "sglang.launch_server"]
    verdict = sglang_checker.server_args(p.server_command[3:])
    assert verdict["error"] is None, verdict["error"]
    args = verdict["args"]
    # the local directory the URI was resolved to, one GPU (the only one it sees), the agent's pixel budget
    assert args["model_path"] == "/root/.cache/paravt/models/sft-final"
    assert (args["tp_size"], args["dp_size"], args["base_gpu_id"], args["port"]) == (1, 1, 0, 30000)
    assert args["mem_fraction_static"] == 0.85
    assert args["mm_process_config"]["image"]["size"]["longest_edge"] == cfg.agent.max_pixels
    print(p.describe())


@pytest.mark.parametrize(
    ("overrides", "gpus", "message"),
    [
        (["engine.gpus=[6,7]", "engine.tp_size=1"], 8, "needs one TP group"),
        (["engine.gpus=[0,1,2,3,4,5,6,7]"], 8, "leave no GPU"),
        (["engine.gpus=[8]"], 8, "not distinct GPUs"),
        (["engine.gpus=[]"], 8, "reserve its GPUs"),
        (["engine.gpus=[6,7]", "engine.tp_size=3"], 8, "does not divide"),
    ],
)
def test_topology_errors(overrides, gpus, message):
    cfg = load_config(RlConfig, ROOT / "configs" / "rl" / "paragrpo_8b.yaml", overrides)
    with pytest.raises(ConfigError, match=message):
        plan(cfg, "/tmp/rl.yaml", gpus=gpus, model_dir="/m")


def test_disk_sync_may_use_data_parallel_replicas(sglang_checker):
    cfg = load_config(
        RlConfig,
        ROOT / "configs" / "rl" / "paragrpo_8b.yaml",
        ["engine.gpus=[4,5,6,7]", "engine.tp_size=2", "engine.weight_sync=disk"],
    )
    p = plan(cfg, "/tmp/rl.yaml", gpus=8, model_dir="/m", python="python")
    assert p.server_env == {"CUDA_VISIBLE_DEVICES": "4,5,6,7"} and "--nproc-per-node=4" in p.learner_command
    args = sglang_checker.server_args(p.server_command[3:])["args"]
    assert (args["tp_size"], args["dp_size"]) == (2, 2)


def test_launcher_on_cpu_two_gloo_ranks_and_a_server_process(rl_data, tiny_model_dir, tmp_path, monkeypatch):
    calls = tmp_path / "server-calls.jsonl"
    monkeypatch.setenv("PARAVT_CONTRACT_LOG", str(calls))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    port = free_port()
    cfg = tiny_rl_config(
        rl_data,
        tiny_model_dir,
        str(tmp_path / "out"),
        "steps=1",
        "prompts_per_step=1",
        "group_size=2",
        "checkpoint.every=1",
        "engine.kind=sglang",
        f"engine.port={port}",
        f"engine.staging_dir={tmp_path / 'weights'}",
    )

    def loopback(model_dir: str, port: int) -> list[str]:
        script = str(ROOT / "tests" / "support" / "contract_server_main.py")
        return [
            sys.executable,
            script,
            model_dir,
            str(port),
            str(cfg.agent.max_pixels),
            str(cfg.agent.min_pixels),
        ]

    summary = launch(cfg, gpus=0, learner_procs=2, server_command=loopback, start_timeout_s=120)
    assert summary["steps"] == 1 and summary["policy_version"] == 1
    # the server process was stopped with the stage (it wrote its log on SIGTERM) and served the rollouts
    lines = [json.loads(x) for x in calls.read_text().splitlines()]
    paths = [x["path"] for x in lines]
    # two disk pushes: version 0 before any rollout (the ranks get the server as base_url, and a server at a
    # given address may hold another run's weights) and version 1 after the step
    assert paths.count("/generate") >= cfg.group_size and paths.count("/update_weights_from_disk") == 2
    assert paths.index("/update_weights_from_disk") < paths.index("/generate")
    assert (tmp_path / "out" / "_COMPLETE").exists()
    config = (tmp_path / "out" / "config.yaml").read_text()
    assert f"base_url: http://127.0.0.1:{port}" in config  # the learner ranks got the server's address


def test_server_starts_from_the_local_copy_of_an_s3_model(s3_bucket, tiny_model_dir, tmp_path, monkeypatch):
    """``--model-path`` cannot open ``s3://``: the launcher hands the server the directory it downloaded."""
    from paravt_core import storage
    from paravt_core.engines.base import EngineError

    uri = f"{s3_bucket}/sft/final"
    storage.upload_dir(tiny_model_dir, uri)
    monkeypatch.setenv("PARAVT_MODEL_CACHE", str(tmp_path / "cache"))
    cfg = load_config(
        RlConfig,
        ROOT / "configs" / "rl" / "tiny.yaml",
        [f"model={uri}", f"output={tmp_path / 'out'}", "engine.kind=sglang", f"engine.port={free_port()}"],
    )
    seen = []

    def server(model_dir: str, port: int) -> list[str]:
        seen.append(model_dir)
        return [sys.executable, "-c", "raise SystemExit(3)"]  # exits at once: the launch stops there

    with pytest.raises(EngineError, match="exited with code 3"):
        launch(cfg, gpus=0, server_command=server, start_timeout_s=30)
    (model_dir,) = seen
    assert not model_dir.startswith("s3://") and Path(model_dir, "config.json").is_file()
    assert Path(model_dir).is_relative_to((tmp_path / "cache").resolve())
