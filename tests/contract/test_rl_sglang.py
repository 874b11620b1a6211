"""The RL stage with ``engine.kind: sglang``: rollouts over the SGLang protocol against the loopback contract
server (which serves the tiny model through ``TransformersEngine``) and the learner's weights pushed after
every step through ``/update_weights_from_disk``."""

from __future__ import annotations

import json
import os
from pathlib import Path

from safetensors.torch import load_file

from paravt_core import checkpoint
from paravt_core.engines.sglang_engine import launch_command
from paravt_core.engines.transformers_engine import TransformersEngine
from paravt_core.models import load
from paravt_core.rl.learner import state_checksum
from paravt_core.rl.stage import run
from tests.support.rl_support import tiny_rl_config
from tests.support.sglang_contract_server import _ContractServer
from tests.support.sglang_routes import ROUTE_CLASSES


def test_stage_pushes_each_step_to_the_sglang_server(rl_data, tiny_model_dir, tmp_path, sglang_checker):
    served = load(tiny_model_dir)  # the server's own copy: it gets reloaded
    staging = tmp_path / "weights"
    cfg = tiny_rl_config(rl_data, tiny_model_dir, str(tmp_path / "out"), "steps=2", "checkpoint.every=1")
    # the server started the way our launcher starts it: the agent's pixel budget
    cmd = launch_command(tiny_model_dir, max_pixels=cfg.agent.max_pixels, min_pixels=cfg.agent.min_pixels)
    mm_config = json.loads(cmd[cmd.index("--mm-process-config") + 1])
    start = state_checksum(served.model.state_dict())
    with _ContractServer(
        TransformersEngine(served.model, served.processor), served.processor, mm_config=mm_config
    ) as server:
        cfg = tiny_rl_config(
            rl_data,
            tiny_model_dir,
            str(tmp_path / "out"),
            "steps=2",
            "checkpoint.every=1",
            "engine.kind=sglang",
            f"engine.base_url={server.url}",
            f"engine.staging_dir={staging}",
        )
        result = run(cfg)
    # the rollouts went through the server, one request per episode turn (never lock-step batches of the
    # step's episodes): >= one body per episode, at most a turn's sub-agents (agent.max_parallel) in one
    generate_bodies = [b for p, b in server.calls if p == "/generate"]
    assert len(generate_bodies) >= 2 * cfg.prompts_per_step * cfg.group_size
    assert max(len(b["rid"]) for b in generate_bodies) <= cfg.agent.max_parallel
    # every body the stage sent passes SGLang 0.5.23's own gate: the /generate schema, the io_struct classes
    for path, body in server.calls:
        if path == "/generate":
            assert sglang_checker.generate_error(body) is None
        else:
            verdict = sglang_checker.io_struct(ROUTE_CLASSES[path], body)
            assert verdict["error"] is None and verdict["unknown"] == [], (path, verdict)
    paths = [p for p, _ in server.calls]
    reloads = [i for i, p in enumerate(paths) if p == "/update_weights_from_disk"]
    # generation paused (retract) around every reload, so a push never waits for in-flight requests
    assert [(paths[i - 1], paths[i + 1]) for i in reloads] == [
        ("/pause_generation", "/continue_generation")
    ] * 3
    assert [b for p, b in server.calls if p == "/pause_generation"] == [{"mode": "retract"}] * 3
    # the starting weights go first, before any rollout (a long-lived server may hold another run's),
    # then one push per step, policy version as the weight version
    assert reloads[0] < paths.index("/generate")
    assert server.weight_versions == ["0", "1", "2"]
    # After step k the server serves exactly the learner's step-k weights (the checkpoint's checksum).
    learner = [
        json.loads(Path(checkpoint.step_dir(cfg.output, k), "trainer.json").read_text())["weights_sha256"]
        for k in (1, 2)
    ]
    assert server.served_checksums == [start, *learner] and learner[0] != start and learner[0] != learner[1]
    assert state_checksum(load_file(str(tmp_path / "out" / "final" / "model.safetensors"))) == learner[1]
    history = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [h["policy_version"] for h in history] == [1, 2]
    assert [h["policy_versions"] for h in history] == [[0], [1]]  # step k sampled by version k (synchronous)
    assert result.metrics["policy_version"] == 2
    assert os.listdir(staging) == ["v00000002"]  # older versions are deleted once the server moved on


# The NCCL push runs against a real gloo group and SGLang's own receiving code in test_sglang_contract.py.
