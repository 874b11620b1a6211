"""Our SGLang traffic checked by SGLang 0.5.23's own code (its wheel, set up by ``scripts/setup.sh``), never by
our reading of it:

- every control body ``SGLangEngine`` sends is parsed into the ``io_struct`` class its HTTP route declares,
  the way FastAPI parses it, with no key the class would silently drop;
- our server launch command is parsed by ``ServerArgs``' CLI parser and built by ``prepare_server_args``;
- the NCCL push's trainer side runs against a real torch process group (gloo on CPU) whose other end is a
  separate process that joins through SGLang's ``init_custom_process_group`` (called by its own
  ``WeightUpdater.init_weights_update_group``), receives each bucket with its own
  ``receive_weights_from_distributed``, under its own ``SchedulerWeightUpdaterManager`` session rules.

The ``/generate`` bodies are checked by SGLang's schema gate in ``test_engines_sglang.py`` and
``test_rl_sglang.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest
import torch

from paravt_core.engines.base import EngineError
from paravt_core.engines.sglang_engine import SGLangEngine, launch_command
from paravt_core.models import load
from paravt_core.rl.weight_sync import NcclSync, buckets
from tests.support.paths import ROOT
from tests.support.ports import free_port
from tests.support.sglang_contract_server import _ContractServer
from tests.support.sglang_routes import ROUTE_CLASSES
from tests.support.sglang_support import kill_mid_bucket, sglang_load_targets, sglang_site

REPO = ROOT


def test_control_bodies_parse_with_sglangs_io_struct(sglang_checker, tiny_model, tmp_path):
    weights = dict(list(load_tiny_state(tiny_model).items())[:3])
    with _ContractServer(tiny_model_engine(tiny_model), tiny_model.processor) as server:
        server.trainer_joined.set()
        client = SGLangEngine(server.url)

        async def traffic():
            await client.init_weights_update_group("10.0.0.5", 29600, rank_offset=1, world_size=3)
            await client.pause_generation("retract")
            await client.begin_weight_update()
            await client.update_weights_from_distributed(
                list(weights.items()), None, weight_version="4", flush_cache=False
            )
            await client.update_weights_from_distributed(list(weights.items()), None)
            await client.end_weight_update()
            await client.continue_generation()
            await client.destroy_weights_update_group("paravt-host-1-abc")
            await client._abort(["rid-1"])
            await client.aclose()

        asyncio.run(traffic())
        client2 = SGLangEngine(server.url)
        with pytest.raises(EngineError, match="not a directory"):  # the body is what matters here
            asyncio.run(client2.update_weights_from_disk(str(tmp_path / "nowhere"), weight_version="5"))
    seen = set()
    for path, body in server.calls:
        verdict = sglang_checker.io_struct(ROUTE_CLASSES[path], body)
        assert verdict["error"] is None, (path, verdict["error"])
        assert verdict["unknown"] == [], (path, verdict["unknown"])  # keys the server would drop
        for key, value in body.items():  # what SGLang parsed is what we meant
            assert verdict["fields"][key] == value, (path, key)
        seen.add(path)
    assert seen == set(ROUTE_CLASSES)
    update = next(b for p, b in server.calls if p == "/update_weights_from_distributed")
    assert update["dtypes"] == ["float32"] * 3 and update["shapes"] == [
        list(t.shape) for t in weights.values()
    ]
    # the gate is live: a body missing a required field is refused
    assert sglang_checker.io_struct("InitWeightsUpdateGroupReqInput", {"master_address": "h"})["error"]


def test_launch_command_parses_with_sglangs_server_args(sglang_checker):
    cmd = launch_command(
        "/cache/models/sft-final",
        port=31000,
        tp_size=2,
        base_gpu_id=6,
        mem_fraction_static=0.8,
        max_pixels=50176,
        min_pixels=784,
        deterministic_inference=True,
    )
    assert cmd[1:3] == ["-m", "sglang.launch_server"]
    verdict = sglang_checker.server_args(cmd[3:])
    assert verdict["error"] is None, verdict["error"]
    assert verdict["server_args_type"] == "ServerArgs"
    args = verdict["args"]
    assert args["model_path"] == "/cache/models/sft-final" and args["port"] == 31000
    assert (args["tp_size"], args["base_gpu_id"], args["mem_fraction_static"]) == (2, 6, 0.8)
    assert args["enable_deterministic_inference"] is True
    assert args["mm_process_config"] == {  # its parser decodes the JSON (type=json.loads)
        "image": {"size": {"shortest_edge": 784, "longest_edge": 50176}}
    }
    # the parser is live: a flag SGLang does not have is refused
    assert sglang_checker.server_args([*cmd[3:], "--no-such-flag"])["error"]


_LEARNER_ENV = (
    "import json, os; from paravt_core.train.dist import setup_distributed; setup_distributed(); "
    "print(json.dumps({k: v for k, v in os.environ.items() if k.startswith('NCCL_')}))"
)


@pytest.mark.parametrize("torchrun", [True, False])
def test_the_learner_runs_nccl_as_sglang_sets_it_for_itself(sglang_checker, tiny_model_dir, torchrun):
    """SGLang's launch sets NCCL variables in its own process (entrypoints/engine.py, _set_envs_and_config);
    the learner's end of the weight-update group (and its FSDP groups) must run NCCL the same way."""
    cmd = launch_command(tiny_model_dir, tp_size=1, max_pixels=50176, min_pixels=784, dtype="bfloat16")
    server = {k: v for k, v in sglang_checker.server_env(cmd[3:]).items() if k.startswith("NCCL_")}
    assert server.get("NCCL_CUMEM_ENABLE") == "0"  # the one other RL frameworks' weight syncs tripped on
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    if torchrun:  # a rank of torchrun's world (gloo here: no GPU), else the plain process of a one-GPU run
        env.update(
            RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port())
        )
    done = subprocess.run(
        [sys.executable, "-c", _LEARNER_ENV], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == server


def test_every_pushed_name_is_one_sglangs_qwen3_vl_loads(tiny_model_dir):
    """SGLang's Qwen3VLForConditionalGeneration.load_weights skips a name it does not know without a word:
    every name a push sends (the learner's state-dict keys) must reach one of its parameters' loaders, and
    together they must fill every parameter it has."""
    from paravt_core.rl.learner import Learner  # noqa: F401 - the keys Learner.weights() pushes:

    pushed = list(load(tiny_model_dir).model.state_dict())
    got = sglang_load_targets(
        sglang_site(), tiny_model_dir, [*pushed, "model.visual.blocks.0.attn.qkv.weigth"]
    )
    assert got["unconsumed"] == ["model.visual.blocks.0.attn.qkv.weigth"]  # live: a misspelt name is caught
    filled = {p for name in pushed for p in got["targets"][name]}
    assert filled == set(got["params"])  # no parameter of SGLang's model left as it was launched
    # the renames SGLang makes, spot-checked: fused q/k/v and gate/up, the vision tower's prefix
    assert got["targets"]["model.language_model.layers.0.self_attn.k_proj.weight"] == [
        "model.layers.0.self_attn.qkv_proj.weight"
    ]
    assert got["targets"]["model.visual.blocks.0.attn.qkv.weight"] == ["visual.blocks.0.attn.qkv_proj.weight"]


def load_tiny_state(tiny_model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in tiny_model.model.state_dict().items()}


def tiny_model_engine(tiny_model):
    from paravt_core.engines.transformers_engine import TransformersEngine

    return TransformersEngine(tiny_model.model, tiny_model.processor)


def _gloo_sync(receiver, bucket_bytes: int, port: int | None = None) -> NcclSync:
    """Our side of the weight push into the receiver: one server rank, gloo in place of NCCL."""
    return NcclSync(
        SGLangEngine(receiver.url, timeout_s=120),
        master_address="127.0.0.1",
        master_port=port or free_port(),
        server_ranks=1,
        backend="gloo",
        bucket_bytes=bucket_bytes,
        timeout_s=120,
    )


def test_nccl_push_lands_in_sglangs_receiver_bucket_by_bucket(receiver, tiny_model_dir):
    learner = load(tiny_model_dir).model
    v1 = {k: v.detach().clone() for k, v in learner.state_dict().items()}
    v2 = {k: v + 0.5 for k, v in v1.items()}  # the next version: every tensor changed
    bucket_bytes = 64 * 1024
    sync = _gloo_sync(receiver, bucket_bytes)
    try:
        receiver.set_inflight(3)  # requests being generated: the push must not wait for them
        sync.push(v1, 1)
        first = receiver.log()
        receiver.set_inflight(2)
        sync.push(v2, 2)
        plan = sync.pushed_buckets
        log = receiver.log()
        received = receiver.snapshot()
        # a learner keeping fp32 masters sends the served dtype: converted bucket by bucket, announced as such
        sync.dtype = torch.bfloat16
        sync.push(v1, 3)
        third = receiver.log()[len(log) :]
    finally:
        sync.close()
    served = receiver.finish()

    # the server holds exactly the learner's version-2 tensors
    assert list(received) == list(v2)
    assert all(torch.equal(received[k], v2[k]) and received[k].dtype == v2[k].dtype for k in v2)

    # buckets: the state dict in order, each at most 64 KiB unless one tensor alone is larger
    assert [n for b in plan for n in b] == list(v2)

    def nbytes(names):
        return sum(v2[n].numel() * v2[n].element_size() for n in names)

    assert len(plan) > 1
    for names, after in zip(plan, plan[1:] + [None], strict=True):
        assert nbytes(names) <= bucket_bytes or len(names) == 1
        if after is not None:  # a bucket ends only when the next tensor would not fit
            assert nbytes(names) + nbytes(after[:1]) > bucket_bytes

    second = log[len(first) :]
    requests = [e for e in second if e["event"] == "request"]
    paths = [e["path"] for e in requests]
    assert paths == ["/begin_weight_update"] + ["/update_weights_from_distributed"] * len(plan) + [
        "/end_weight_update"
    ]
    assert all(e["paused"] for e in requests)  # generation paused around the whole session
    assert [e["event"] for e in second][0] == "pause" and second[-1]["event"] == "continue"
    updates = [e for e in requests if e["path"] == "/update_weights_from_distributed"]
    assert [e["names"] for e in updates] == plan  # announced bucket by bucket, in order
    assert [e["flush_cache"] for e in updates] == [False] * (len(plan) - 1) + [True]  # flushed at the end
    assert [e["version"] for e in updates] == [None] * (len(plan) - 1) + ["2"]
    loads = [e["names"] for e in second if e["event"] == "load"]
    assert loads == plan  # what each request announced is what SGLang received and loaded
    flushes = [e for e in second if e["event"] == "flush"]
    assert flushes == [{"event": "flush", "ok": True}]
    replies = [e for e in second if e["event"] == "reply"]
    assert all(r["success"] for r in replies), replies
    # connect: a stale session ended first (none here: refused, harmlessly), generation resumed, then the join
    assert [e.get("path") for e in first if e["event"] in ("request", "continue")][:3] == [
        "/end_weight_update",
        None,
        "/init_weights_update_group",
    ]
    assert sum(e.get("path") == "/init_weights_update_group" for e in log if e["event"] == "request") == 1
    # the third push (bf16): what the server holds is the bf16 conversion of the pushed tensors
    assert all(served[k].dtype == torch.bfloat16 and torch.equal(served[k], v1[k].bfloat16()) for k in v1)
    assert [e["names"] for e in third if e["event"] == "load"] == sync.pushed_buckets
    updates3 = [
        e for e in third if e["event"] == "request" and e["path"] == "/update_weights_from_distributed"
    ]
    announced = [d for e in updates3 for d in e["dtypes"]]
    assert announced == ["bfloat16"] * len(v1)  # every tensor of the tiny model is floating point
    assert sync.version == 3


def _answered_open_update(log: list[dict]) -> bool:
    """Every request has its reply, the last one a failed ``/update_weights_from_distributed`` (the push cut
    short by the kill)."""
    requests = [e for e in log if e["event"] == "request"]
    replies = [e for e in log if e["event"] == "reply"]
    return (
        len(requests) == len(replies)
        and bool(replies)
        and replies[-1]["path"] == "/update_weights_from_distributed"
        and not replies[-1]["success"]
    )


def test_a_learner_killed_mid_push_is_followed_by_one_that_pushes(receiver, tiny_model_dir):
    """Run 1 joins and is killed mid-push (session open, generation paused, its group left behind on the
    server); run 2 joins the same server at the same address and port, pushes, and leaves its group."""
    port = free_port()
    cut = kill_mid_bucket(receiver.url, port, tiny_model_dir)
    assert cut["bucket"] > 0 and 0 < cut["sent"] < cut["of"]  # a later bucket, cut in its middle
    first_group = cut["group"]
    # the server notices the dead peer (gloo: the connection closes) and answers the open update request, the
    # last thing run 1 left; waiting for any failed reply is not enough: run 1's own connect got one before
    # (its harmless end_weight_update with no session open), so the cut could fall before the late answer
    deadline = time.monotonic() + 120
    while not _answered_open_update(receiver.log()):
        assert time.monotonic() < deadline, receiver.log()[-5:]
        time.sleep(0.2)
    cut = len(receiver.log())

    v2 = load_tiny_state(load(tiny_model_dir))
    sync = _gloo_sync(receiver, 64 * 1024, port=port)
    try:
        sync.push(v2, 1)
        received = receiver.snapshot()
    finally:
        sync.close()
    log = receiver.log()[cut:]
    assert sync.group_name != first_group  # a name of its own: SGLang still holds run 1's
    assert all(torch.equal(received[k], v2[k]) for k in v2) and list(received) == list(v2)
    replies = {e["path"]: e for e in log if e["event"] == "reply"}
    # connect ended run 1's open session first (SGLang refuses a second begin while it is open)
    assert log[0] == {"event": "request", "path": "/end_weight_update", "paused": True}
    assert replies["/end_weight_update"]["success"]
    assert [e["event"] for e in log[:4]] == ["request", "runner_end", "reply", "continue"]
    assert replies["/init_weights_update_group"]["success"] and replies["/begin_weight_update"]["success"]
    assert replies["/destroy_weights_update_group"] == {
        "event": "reply",
        "path": "/destroy_weights_update_group",
        "success": True,
        "message": "Succeeded to destroy custom process group.",
    }


def test_sglang_refuses_an_update_outside_a_session(receiver):
    """What today's push did: /update_weights_from_distributed with no begin_weight_update before it."""

    async def bare_update():
        client = SGLangEngine(receiver.url, timeout_s=60)
        try:
            await client.update_weights_from_distributed([("w", torch.zeros(2))], None)
        finally:
            await client.aclose()

    with pytest.raises(EngineError, match="must run between begin_weight_update"):
        asyncio.run(bare_update())
    with pytest.raises(EngineError, match="no weight-update session is open"):
        asyncio.run(_call(receiver.url, "end_weight_update"))


async def _call(url: str, method: str):
    client = SGLangEngine(url, timeout_s=60)
    try:
        return await getattr(client, method)()
    finally:
        await client.aclose()


def test_buckets_cut_in_order():
    t = {
        f"w{i}": torch.zeros(n, dtype=torch.float32) for i, n in enumerate([10, 10, 30, 5, 1])
    }  # 4-byte floats
    plan = buckets(list(t.items()), 80)  # bytes: 40, 40 | 120 | 20, 4
    assert [[n for n, _ in b] for b in plan] == [["w0", "w1"], ["w2"], ["w3", "w4"]]
    with pytest.raises(ValueError):
        buckets(list(t.items()), 0)
    # counted as sent: in bf16 the same 80 bytes hold 20 + 20 | 60 + 10 + 2 bytes (an int tensor as it is)
    plan = buckets([*t.items(), ("ids", torch.zeros(2, dtype=torch.int64))], 80, torch.bfloat16)
    assert [[n for n, _ in b] for b in plan] == [["w0", "w1"], ["w2", "w3", "w4"], ["ids"]]


def test_in_place_pause_is_refused_by_the_config():
    """SGLang's in_place pause keeps running requests in the batch, and its flush after the last bucket is
    refused while any runs (SchedulerWeightUpdaterManager.flush_cache_after_weight_update)."""
    from paravt_core.config import ConfigError, load_config
    from paravt_core.rl.config import RlConfig

    for mode in ("retract", "abort"):
        cfg = load_config(RlConfig, None, ["engine.kind=sglang", f"engine.pause_mode={mode}"])
        assert cfg.engine.pause_mode == mode
    with pytest.raises(ConfigError, match="pause_mode"):
        load_config(RlConfig, None, ["engine.kind=sglang", "engine.pause_mode=in_place"])


def test_the_frozen_tower_goes_with_the_first_push_only(receiver, tiny_model_dir):
    from paravt_core.rl.learner import Learner

    model = load(tiny_model_dir).model
    from paravt_core.rl.config import RlConfig

    cfg = RlConfig()
    learner = Learner(  # freeze_vision by default
        model,
        load(tiny_model_dir).model,
        temperature=cfg.agent.temperature,
        advantage=cfg.advantage,
        loss=cfg.loss,
        optim=cfg.optim,
    )
    frozen = learner.frozen_names()
    v1 = learner.weights()
    assert frozen == {k for k in v1 if k.startswith("model.visual.")} and frozen
    v2 = {k: v + 0.5 for k, v in v1.items()}
    sync = _gloo_sync(receiver, 1 << 20)
    sync.static = frozen
    try:
        sync.push(v1, 1)
        first = [n for b in sync.pushed_buckets for n in b]
        sync.push(v2, 2)
        second = [n for b in sync.pushed_buckets for n in b]
    finally:
        sync.close()
    served = receiver.finish()
    assert first == list(v1) and second == [k for k in v1 if k not in frozen]
    assert all(torch.equal(served[k], v1[k] if k in frozen else v2[k]) for k in v1)
