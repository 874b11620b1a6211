"""The rollout fleet (``engines/fleet.py``) against the REAL ``sglang-router`` 0.3.2 on loopback, in front of
three loopback SGLang contract servers serving the tiny model (``tests/support/fleet_support.py``). Every body the
servers received through the router is checked by SGLang 0.5.23's own schema gate / ``io_struct`` classes
(``tests/support/sglang_side.py``), and every router command by the router's own argument parser."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import sys
import time

import pytest
import torch

from paravt_core.config import ConfigError, load_config
from paravt_core.engines.base import EngineError
from paravt_core.engines.fleet import FleetEngine, FleetVersionError, counter_delta, router_command
from paravt_core.engines.sglang_engine import SGLangServer
from paravt_core.engines.transformers_engine import TransformersEngine
from paravt_core.models import load
from paravt_core.rl.config import RlConfig
from paravt_core.rl.launch import launch, plan, wait_for_workers
from paravt_core.rl.learner import state_checksum
from paravt_core.rl.weight_sync import DiskSync
from tests.support.agent_support import MAX_PIXELS, MIN_PIXELS, image_request, random_frames
from tests.support.fleet_support import LoopbackFleet, parse_router_argv, router_env, router_site
from tests.support.paths import ROOT
from tests.support.ports import free_port, free_port_run
from tests.support.rl_support import tiny_rl_config
from tests.support.sglang_routes import ROUTE_CLASSES

N = 3  # servers
DELAY_S = 2.0  # every /generate waits this long on its server: requests are in flight when one is killed


@pytest.fixture(scope="module")
def fleet(tiny_model_dir, tmp_path_factory):
    f = LoopbackFleet(
        tiny_model_dir,
        tmp_path_factory.mktemp("fleet"),
        n=N,
        pixels=(MAX_PIXELS, MIN_PIXELS),
        delay_s=DELAY_S,
    )
    try:
        yield f
    finally:
        f.close()


def _engine(fleet: LoopbackFleet, processor) -> FleetEngine:
    return FleetEngine(
        fleet.url, worker_urls=fleet.urls, metrics_url=fleet.metrics_url, processor=processor, backoff_s=0.2
    )


def _group_requests(processor, first_group: int, groups: int, size: int, tag: str):
    """``groups`` GRPO groups of ``size`` greedy requests; a group's requests are one prompt (2 frames) with
    the group's routing key, as ``IndependentEngine.track(affinity=...)`` sets it."""
    out = []
    for g in range(first_group, first_group + groups):
        request = image_request(
            processor, random_frames(g, 2, 64, 64), f"question of group {g}", max_new_tokens=6
        )
        out += [
            dataclasses.replace(request, routing_key=f"{tag}-g{g}", request_id=f"{tag}-{g}-{i}")
            for i in range(size)
        ]
    return out


def _generate_calls(fleet: LoopbackFleet, servers: list[int] | None = None) -> list[int]:
    return [len(fleet.generate_bodies(i)) for i in (range(len(fleet.urls)) if servers is None else servers)]


def test_router_commands_pass_the_routers_own_parser():
    site = router_site()
    urls = ["http://127.0.0.1:30001", "http://127.0.0.1:30002"]
    args = parse_router_argv(site, router_command(urls, port=30000, metrics_port=30090, max_retries=3)[3:])
    assert args["worker_urls"] == urls and (args["host"], args["port"]) == ("127.0.0.1", 30000)
    assert (args["policy"], args["assignment_mode"]) == ("manual", "min_group")
    assert args["retry_max_retries"] == 4  # the router counts attempts: 3 retries = 4 attempts
    assert (args["prometheus_host"], args["prometheus_port"]) == ("127.0.0.1", 30090)
    assert args["service_discovery"] is False
    # the Kubernetes path: no worker list, the router watches pods with these labels
    cmd = router_command(
        [],
        policy="cache_aware",
        selector=["app=paravt-rollout", "run=r1"],
        namespace="ml",
        discovery_port=30000,
    )
    args = parse_router_argv(site, cmd[3:])
    assert args["service_discovery"] is True and args["worker_urls"] == []
    assert args["selector"] == {"app": "paravt-rollout", "run": "r1"}
    assert (args["service_discovery_namespace"], args["service_discovery_port"]) == ("ml", 30000)
    assert args["policy"] == "cache_aware"


def test_published_node_with_two_servers(sglang_checker):
    """The 8B recipe with ``engine.servers=2`` on GPUs 6 and 7: one server per GPU (each parsed by SGLang's own
    ``ServerArgs``), the router in front on the recipe's port, the learner on GPUs 0-5 told where they are."""
    cfg = load_config(
        RlConfig,
        ROOT / "configs" / "rl" / "paragrpo_8b.yaml",
        ["engine.servers=2", "engine.gpus=[6,7]", "engine.weight_sync=disk"],
    )
    p = plan(cfg, "/tmp/rl.yaml", gpus=8, model_dir="/models/sft-final", python="python")
    assert [(env, url) for _, env, url in p.fleet] == [
        ({"CUDA_VISIBLE_DEVICES": "6"}, "http://127.0.0.1:30001"),
        ({"CUDA_VISIBLE_DEVICES": "7"}, "http://127.0.0.1:30002"),
    ]
    for cmd, _, _ in p.fleet:
        verdict = sglang_checker.server_args(cmd[3:])
        assert verdict["error"] is None, verdict["error"]
        args = verdict["args"]
        assert (args["tp_size"], args["dp_size"], args["base_gpu_id"]) == (1, 1, 0)
        assert args["model_path"] == "/models/sft-final"
    assert p.router_command[p.router_command.index("--port") + 1] == "30000"
    assert (
        p.learner_env == {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5"} and "--nproc-per-node=6" in p.learner_command
    )
    assert p.overrides == [
        "engine.base_url=http://127.0.0.1:30000",
        "engine.router_metrics_url=http://127.0.0.1:30090/metrics",
        "engine.worker_urls=[http://127.0.0.1:30001,http://127.0.0.1:30002]",
    ]
    learner_cfg = load_config(RlConfig, ROOT / "configs" / "rl" / "paragrpo_8b.yaml", p.overrides)
    assert learner_cfg.engine.worker_urls == ["http://127.0.0.1:30001", "http://127.0.0.1:30002"]
    print(p.describe())


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["engine.servers=2", "engine.gpus=[5,6,7]", "engine.weight_sync=disk"], "equal runs"),
        (["engine.servers=2", "engine.gpus=[6,7]"], "weight pushes from disk"),
        (
            ["engine.servers=2", "engine.gpus=[4,5,6,7]", "engine.tp_size=3", "engine.weight_sync=disk"],
            "divide",
        ),
    ],
)
def test_fleet_topology_errors(overrides, message):
    cfg = load_config(RlConfig, ROOT / "configs" / "rl" / "paragrpo_8b.yaml", overrides)
    with pytest.raises(ConfigError, match=message):
        plan(cfg, "/tmp/rl.yaml", gpus=8, model_dir="/m")


def test_kubernetes_discovery_starts_only_the_router():
    cfg = load_config(
        RlConfig,
        ROOT / "configs" / "rl" / "paragrpo_8b.yaml",
        ["engine.service_selector=[app=paravt-rollout]", "engine.gpus=[]", "engine.weight_sync=disk"],
    )
    p = plan(cfg, "/tmp/rl.yaml", gpus=8, python="python")
    assert p.fleet == [] and "--service-discovery" in p.router_command
    assert p.learner_env == {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}  # every GPU of the node learns
    assert not any(o.startswith("engine.worker_urls") for o in p.overrides)  # the router's /workers list


def test_counter_delta_by_hand():
    before = {"served": {"a": 2.0, "b": 1.0}, "retries": 3.0, "engine_retries": 1, "servers_down": []}
    after = {
        "served": {"a": 5.0, "b": 1.0, "c": 2.0},
        "retries": 7.0,
        "engine_retries": 1,
        "servers_down": ["b"],
    }
    assert counter_delta(before, after) == {
        "served": {"a": 3.0, "b": 0.0, "c": 2.0},
        "retries": 4.0,
        "engine_retries": 0,
        "servers_down": ["b"],
    }


def test_groups_spread_over_the_servers_and_stay_together(fleet, tiny_model, sglang_checker):
    engine = _engine(fleet, tiny_model.processor)
    requests = _group_requests(tiny_model.processor, 0, N, 2, "spread")
    before = _generate_calls(fleet)

    async def run():
        try:  # all at once, as a step's episodes start: a new key goes to the server with the fewest keys
            # in flight (sent one after another, each would find every server idle and take the first)
            return await asyncio.gather(*(engine.generate([r]) for r in requests))
        finally:
            await engine.aclose()

    completions = [c for (c,) in asyncio.run(run())]
    # one group per server (min_group: 3 new keys, arriving together, over 3 idle servers)
    new = [b for i in range(N) for b in fleet.generate_bodies(i)[before[i] :]]
    by_server = [fleet.generate_bodies(i)[before[i] :] for i in range(N)]
    assert [len(b) for b in by_server] == [2, 2, 2], by_server
    groups = [{b["rid"].rsplit("-", 1)[0] for b in bodies} for bodies in by_server]
    assert sorted(len(g) for g in groups) == [1, 1, 1] and set.union(*groups) == {
        f"spread-{g}" for g in range(N)
    }
    # what the router forwarded is what SGLang 0.5.23 accepts: its own /generate schema gate
    assert len(new) == 6 and [sglang_checker.generate_error(b) for b in new] == [None] * 6
    # and the answers are the tiny model's own greedy continuations (the in-process engine on the same request)
    local = asyncio.run(TransformersEngine(tiny_model.model, tiny_model.processor).generate(requests))
    assert [c.token_ids for c in completions] == [c.token_ids for c in local]


def test_weight_push_reaches_every_server_and_versions_agree(fleet, tiny_model_dir, tmp_path, sglang_checker):
    policy = load(tiny_model_dir)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(0.01)
    weights = policy.model.state_dict()
    engine = _engine(fleet, policy.processor)
    sync = DiskSync(engine, policy.model, str(tmp_path / "staging"))
    sync.push(
        weights, 1
    )  # pause, reload from disk, continue: on every server; then each one's version checked
    served = asyncio.run(engine.served_versions())
    assert served == {u: "1" for u in fleet.urls}
    # every server serves exactly the learner's weights
    assert [fleet.state(i)["served_checksums"][-1] for i in range(N)] == [state_checksum(weights)] * N
    for i in range(N):  # the control bodies each server got, by SGLang 0.5.23's io_struct classes
        calls = [c for c in fleet.state(i)["calls"] if c["path"] != "/generate"]
        assert [c["path"] for c in calls][-3:] == [
            "/pause_generation",
            "/update_weights_from_disk",
            "/continue_generation",
        ]
        for c in calls:
            verdict = sglang_checker.io_struct(ROUTE_CLASSES[c["path"]], c["body"])
            assert verdict["error"] is None and verdict["unknown"] == [], (c, verdict)


def test_version_check_refuses_to_roll_out_when_a_server_lags(fleet, tiny_model_dir, tmp_path):
    policy = load(tiny_model_dir)
    engine = _engine(fleet, policy.processor)
    sync = DiskSync(engine, policy.model, str(tmp_path / "staging"))
    sync.push(policy.model.state_dict(), 2)
    assert sync.version == 2
    lagging = fleet.urls[2]

    old = tmp_path / "old"
    policy.model.save_pretrained(old)

    async def roll_back_one():  # a server that missed the push (e.g. restarted from the old checkpoint)
        try:
            await engine.member(lagging).update_weights_from_disk(str(old), weight_version="1")
        finally:
            await engine.member(lagging).aclose()

    asyncio.run(roll_back_one())
    with pytest.raises(FleetVersionError, match="1 of 3 rollout server") as err:
        asyncio.run(engine.check_versions("2"))
    assert err.value.lagging == {lagging: "1"} and err.value.expected == "2"
    # what the stage runs before a step's rollouts: the lagging server gets the current weights once more
    sync.verify()
    assert sync.repushes == 1 and asyncio.run(engine.served_versions()) == {u: "2" for u in fleet.urls}
    # and when it cannot catch up (the staged directory is gone), no rollouts: the step stops
    asyncio.run(roll_back_one())
    shutil.rmtree(tmp_path / "staging")
    with pytest.raises(EngineError, match=f"re-push of version 2 failed on {lagging}"):
        sync.verify()


def test_the_cache_aware_policy_cannot_tell_our_groups_apart(fleet, tiny_model, tmp_path):
    """Why ``manual`` is the default: the router's cache-aware tree matches token ids written as text, our
    prompts carry one collapsed pad per image, so three groups' prompts (same template, same frame count)
    share most of their text and follow the first one to its server (the load gap stays under 64)."""
    site = router_site()
    port = free_port()
    router = SGLangServer(
        router_command(fleet.urls, port=port, policy="cache_aware", health_interval_s=2),
        f"http://127.0.0.1:{port}",
        log_path=str(tmp_path / "router.log"),
        env=router_env(site),
    ).start(timeout_s=120, poll_s=0.5)
    try:
        wait_for_workers(router.base_url, N, 120)
        engine = FleetEngine(
            router.base_url, worker_urls=fleet.urls, processor=tiny_model.processor, routing=False
        )
        requests = _group_requests(tiny_model.processor, 20, N, 2, "cache")
        before = _generate_calls(fleet)

        async def run():
            try:
                for r in requests:  # one after another, as the episodes' first turns leave
                    await engine.generate([r])
            finally:
                await engine.aclose()

        asyncio.run(run())
        new = [a - b for a, b in zip(_generate_calls(fleet), before, strict=True)]
    finally:
        router.stop()
    print("cache_aware: requests per server", new)
    assert sorted(new) == [0, 0, 2 * N]


def test_a_server_killed_mid_step_is_retried_elsewhere_and_counted(
    fleet, tiny_model, tiny_model_dir, tmp_path
):
    """Last in this module: it leaves the fleet one server short."""
    engine = _engine(fleet, tiny_model.processor)
    requests = _group_requests(tiny_model.processor, 10, N, 2, "kill")
    before = _generate_calls(fleet)
    counters_before = asyncio.run(engine.counters())
    victim = None

    async def run():
        nonlocal victim
        tasks = [asyncio.ensure_future(engine.generate([r])) for r in requests]
        deadline = time.monotonic() + 60
        while victim is None and time.monotonic() < deadline:  # the first server holding a request: kill it
            await asyncio.sleep(0.02)
            now = await asyncio.to_thread(_generate_calls, fleet)
            victim = next((i for i in range(N) if now[i] > before[i]), None)
        assert victim is not None
        fleet.kill(victim)
        try:
            return await asyncio.gather(*tasks)
        finally:
            await engine.aclose()

    completions = [c for (c,) in asyncio.run(run())]
    local = asyncio.run(TransformersEngine(tiny_model.model, tiny_model.processor).generate(requests))
    assert [c.token_ids for c in completions] == [c.token_ids for c in local]  # the step completes, correctly
    survivors = [i for i in range(N) if i != victim]
    # the victim answered nothing (each /generate waits DELAY_S first): its group was served by the others
    after = dict(zip(survivors, _generate_calls(fleet, survivors), strict=True))
    assert sum(after[i] - before[i] for i in survivors) == len(requests)
    counters = counter_delta(counters_before, asyncio.run(engine.counters()))
    print("fleet counters over the step:", counters)
    assert counters["retries"] + counters["engine_retries"] >= 1  # counted: by the router, by us, or both
    assert counters["failed"].get(fleet.urls[victim], 0) >= 1
    # the next push skips the dead server (listed down) and the live ones agree on the version
    policy = load(tiny_model_dir)
    sync = DiskSync(engine, policy.model, str(tmp_path / "staging"))
    sync.push(policy.model.state_dict(), 3)
    assert engine.servers_down == [fleet.urls[victim]]
    assert asyncio.run(engine.served_versions([fleet.urls[i] for i in survivors])) == {
        fleet.urls[i]: "3" for i in survivors
    }


def test_rl_stage_through_the_launcher_with_two_servers_behind_the_router(
    rl_data,
    tiny_model_dir,
    tmp_path,
    monkeypatch,
):
    """``rl.launch`` with ``engine.servers=2`` on CPU: two loopback servers, the real router, the learner in
    this process talking to the router; two steps, each pushed to both servers and checked."""
    monkeypatch.setenv("PARAVT_ROUTER_SITE", str(router_site()))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    port = free_port_run(4)  # the router, two servers, the router's metrics: one run, none handed out twice
    cfg = tiny_rl_config(
        rl_data,
        tiny_model_dir,
        str(tmp_path / "out"),
        "steps=2",
        "prompts_per_step=2",
        "group_size=2",
        "checkpoint.every=2",
        "engine.kind=sglang",
        "engine.servers=2",
        f"engine.port={port}",
        f"engine.router_metrics_port={port + 3}",
        f"engine.staging_dir={tmp_path / 'weights'}",
    )

    def loopback(model_dir: str, server_port: int) -> list[str]:
        script = str(ROOT / "tests" / "support" / "contract_server_main.py")
        return [
            sys.executable,
            script,
            model_dir,
            str(server_port),
            str(cfg.agent.max_pixels),
            str(cfg.agent.min_pixels),
        ]

    p = plan(cfg, "/tmp/rl.yaml", gpus=0, model_dir=tiny_model_dir, server_command=loopback)
    assert [url for _, _, url in p.fleet] == [f"http://127.0.0.1:{port + 1}", f"http://127.0.0.1:{port + 2}"]
    assert p.router_command[2] == "sglang_router.launch_router" and p.in_process
    summary = launch(cfg, gpus=0, learner_procs=1, server_command=loopback, start_timeout_s=300)
    assert summary["steps"] == 2 and summary["policy_version"] == 2
    history = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    for h in history:  # two groups a step, one per server (the router's own counts), none failed
        served = h["fleet_served"]
        assert sorted(served) == [url for _, _, url in p.fleet] and all(v >= 2 for v in served.values()), h
        assert not any(h["fleet_failed"].values()) and h["fleet_servers_down"] == []
    config = (tmp_path / "out" / "config.yaml").read_text()
    assert f"base_url: http://127.0.0.1:{port}" in config  # the learner talked to the router
