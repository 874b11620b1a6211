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
from tests.rl_support import rl_data, tiny_rl_config  # noqa: F401
from tests.test_engines_sglang import _ContractServer


def test_stage_pushes_each_step_to_the_sglang_server(rl_data, tiny_model_dir, tmp_path):  # noqa: F811
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
    paths = [p for p, _ in server.calls]
    assert paths.count("/generate") >= 2  # the rollouts went through the server
    assert server.weight_versions == ["1", "2"]  # one push per step, policy version as the weight version
    # After step k the server serves exactly the learner's step-k weights (the checkpoint's checksum).
    learner = [
        json.loads(Path(checkpoint.step_dir(cfg.output, k), "trainer.json").read_text())["weights_sha256"]
        for k in (1, 2)
    ]
    assert server.served_checksums == learner and learner[0] != start and learner[0] != learner[1]
    assert state_checksum(load_file(str(tmp_path / "out" / "final" / "model.safetensors"))) == learner[1]
    history = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [h["policy_version"] for h in history] == [1, 2]
    assert [h["policy_versions"] for h in history] == [[0], [1]]  # step k sampled by version k (synchronous)
    assert result.metrics["policy_version"] == 2
    assert os.listdir(staging) == ["v00000002"]  # older versions are deleted once the server moved on


class _Broadcasts:
    """Stands in for the NCCL group (GPU only): records what rank 0 broadcasts."""

    def __init__(self):
        self.sent: list[tuple[tuple[int, ...], int]] = []

    def broadcast(self, tensors, root):
        self.sent.append((tuple(tensors[0].shape), root))
        return self

    def wait(self):
        return True


def test_nccl_sync_request_flow(tiny_model, tiny_model_dir, monkeypatch):
    from paravt_core.engines.sglang_engine import SGLangEngine
    from paravt_core.rl.weight_sync import NcclSync

    monkeypatch.setattr("torch.Tensor.cuda", lambda t: t)  # no GPU here: the tensors stay on the CPU
    weights = load(tiny_model_dir).model.state_dict()
    engine = TransformersEngine(load(tiny_model_dir).model, tiny_model.processor)
    with _ContractServer(engine, tiny_model.processor) as server:
        sync = NcclSync(
            SGLangEngine(server.url), master_address="10.1.2.3", master_port=29601, server_ranks=2
        )
        group = _Broadcasts()

        def join():  # what the real _join does (create the group), minus NCCL
            sync.group = group
            server.trainer_joined.set()

        monkeypatch.setattr(sync, "_join", join)
        sync.push(weights, 1)
        sync.push(weights, 2)  # the group is created once
    paths = [p for p, _ in server.calls]
    assert paths == ["/init_weights_update_group"] + ["/update_weights_from_distributed"] * 2
    init = server.calls[0][1]
    assert (init["master_address"], init["master_port"], init["rank_offset"], init["world_size"]) == (
        "10.1.2.3",
        29601,
        1,
        3,  # our rank 0 + the server's 2 GPUs
    )
    update = server.calls[2][1]
    assert update["names"] == list(weights) and update["weight_version"] == "2"
    assert update["shapes"] == [list(t.shape) for t in weights.values()]
    # every tensor broadcast from rank 0, in the announced order, once per push
    assert group.sent == [(tuple(t.shape), 0) for t in weights.values()] * 2
    assert sync.version == 2
