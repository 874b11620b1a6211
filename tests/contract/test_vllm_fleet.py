"""A fleet of two real vLLM servers (the CPU build), launched through the stage's own build
(``engine.servers=2``): the requests of one GRPO group stay on one server and groups spread over both; the
disk push reaches both (each then serves the learner's new log-probs); a server found lagging gets the current
weights once more; ``stop`` ends both."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from pydantic import TypeAdapter

from paravt_core.engines.base import GenerationRequest, SamplingParams
from paravt_core.engines.kinds.base import BuildContext
from paravt_core.engines.registry import build, engine_config
from paravt_core.engines.vllm_fleet import VllmFleet
from paravt_core.models import load
from paravt_core.rl.weight_sync import DiskSync
from tests.fixtures.served import unavailable
from tests.support.paths import ROOT
from tests.support.ports import free_port_run
from tests.support.vllm_support import _gap, _learner_logprobs, _moved, _sample, _weights

VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


@pytest.fixture(scope="module")
def fleet(tiny_model_dir, tiny_model, tmp_path_factory):
    if not VLLM_PYTHON.exists():
        unavailable(
            f"vLLM's CPU build is not set up in {VLLM_PYTHON.parent.parent} (scripts/setup.sh makes it)"
        )
    port = free_port_run(2)  # engine.port + i
    config = TypeAdapter(engine_config("rl")).validate_python(
        {"kind": "vllm", "servers": 2, "python": str(VLLM_PYTHON), "port": port, "max_model_len": 4096,
         "max_images": 8, "enforce_eager": True, "cpu_kvcache_gib": 1}
    )  # fmt: skip
    log = tmp_path_factory.mktemp("vllm-fleet") / "server.log"
    context = BuildContext(stage="rl", model=tiny_model_dir, processor=tiny_model.processor, dtype="float32",
                           log_path=str(log))  # fmt: skip
    engine = build(config, context)
    assert isinstance(engine, VllmFleet) and len(engine.members) == 2
    try:
        yield engine
    finally:
        engine.server.stop()


def _request(key: str, i: int) -> GenerationRequest:
    text = f"Group {key}, episode {i}: say something."
    return GenerationRequest(messages=[{"role": "user", "content": text}], routing_key=key,
                             sampling=SamplingParams(temperature=0.7, max_new_tokens=4, seed=i))  # fmt: skip


def test_a_groups_requests_stay_on_one_server_and_groups_spread(fleet):
    before = [m.attempts for m in fleet.members]
    requests = [_request(k, i) for k in ("a", "b") for i in range(3)]
    completions = asyncio.run(fleet.generate(requests))
    assert len(completions) == 6 and all(c.token_ids for c in completions)
    assert sorted(fleet.assignments[k] for k in ("a", "b")) == [0, 1]  # one server each
    assert [m.attempts - b for m, b in zip(fleet.members, before, strict=True)] == [3, 3]
    # a group's next turn comes back to its server, even with nothing of it in flight
    asyncio.run(fleet.generate([_request("a", 9)]))
    server = fleet.assignments["a"]
    assert fleet.members[server].attempts - before[server] == 4


def test_a_disk_push_reaches_every_server_and_a_lagging_one_is_pushed_again(tiny_model_dir, fleet, tmp_path):
    old, new = load(tiny_model_dir), _moved(tiny_model_dir, seed=4)
    sync = DiskSync(fleet, new.model, str(tmp_path / "staging"))
    sync.push(_weights(new.model), version=1)
    for member in fleet.members:  # both serve the new weights: the same images, the learner's new log-probs
        seq, served = _sample(member, old.processor)
        assert _gap(served, _learner_logprobs(new.model, seq)) < 1e-5
        assert _gap(served, _learner_logprobs(old.model, seq)) > 1e-3
    assert set(asyncio.run(fleet.served_versions()).values()) == {"1"}
    # one server restarted on other weights (here: told another version): found, pushed again, then equal
    lagging = fleet.members[1]
    staging = tmp_path / "other"
    DiskSync(lagging, old.model, str(staging)).push(_weights(old.model), version=7)
    sync.verify()
    assert sync.repushes == 1 and set(asyncio.run(fleet.served_versions()).values()) == {"1"}
    seq, served = _sample(lagging, old.processor)
    assert _gap(served, _learner_logprobs(new.model, seq)) < 1e-5


def test_stop_ends_every_server(fleet):
    roots = [m.root for m in fleet.members]
    fleet.server.stop()
    for root in roots:
        with pytest.raises(httpx.ConnectError):
            httpx.get(root + "/health", timeout=5)
