"""The RL stage's process topology on one node: SGLang server(s) on the GPUs the config reserves, the learner
under ``torchrun`` on the others (what the pipeline's RL step runs).

    python -m paravt_core.rl.launch --config configs/rl/paragrpo_8b.yaml [key=value ...]

1. ``engine.kind=sglang`` without ``engine.base_url``: the model URI is resolved to a local directory
   (``models.resolve_model_dir``: an ``s3://`` checkpoint is downloaded; ``--model-path`` only opens local
   directories or hub ids), and one server is started on ``engine.gpus`` (``CUDA_VISIBLE_DEVICES`` pins it;
   its TP ranks count from ``--base-gpu-id 0`` of what it sees), ``tp_size`` x ``dp_size`` = the GPUs it has;
   the launcher waits for ``/health``.
2. The learner: ``torchrun --nproc-per-node N -m paravt_core.cli rl --config <resolved config>`` with
   ``engine.base_url`` pointing at that server and, for the NCCL push, ``engine.server_ranks`` = its TP size
   (SGLang refuses a distributed update with data-parallel replicas). ``CUDA_VISIBLE_DEVICES`` = the other
   GPUs; N = their number (on a CPU machine ``learner_procs``, gloo).
   One learner process needing no pinning (a CPU machine, or one GPU and a running server) runs in the
   launcher's own process instead.
3. The server is stopped when the learner exits, however it exits.

A rollout fleet (``engine.servers`` = R > 1): ``engine.gpus`` is cut into R equal runs, one server each (ports
``engine.port + 1 ..``), and one ``sglang-router`` on ``engine.port`` in front of them
(``engines/fleet.py``); the learner gets the router as ``engine.base_url``, the servers as
``engine.worker_urls`` and the router's Prometheus endpoint. With ``engine.service_selector`` the servers are
other pods: only the router starts here, with ``--service-discovery``, and finds them itself. The router runs
from the Python that runs this (``sglang-router`` in the RL image), with ``$PARAVT_ROUTER_SITE`` put first on
its ``PYTHONPATH`` when set (the tests' ``.venv-router``).

``plan`` is the pure part (commands and environments), tested against SGLang's own ``ServerArgs`` parser.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from paravt_core.config import ConfigError, config_to_yaml, load_config
from paravt_core.engines.registry import KINDS
from paravt_core.rl.config import RlConfig


@dataclasses.dataclass
class Plan:
    learner_command: list[str]
    learner_env: dict[str, str]  # variables set on top of ours
    server_command: list[str] | None  # None: no server to start (in-process engine, or engine.base_url)
    server_env: dict[str, str]
    base_url: str
    overrides: list[str]  # what the learner gets on top of the config
    in_process: bool  # one learner process needing no pinning: the stage runs in this process (no torchrun)
    # a rollout fleet: its servers (command, environment, URL) and the router in front of them
    fleet: list[tuple[list[str], dict[str, str], str]] = dataclasses.field(default_factory=list)
    router_command: list[str] | None = None

    def describe(self) -> str:
        """The commands as a shell would run them (logs, the README)."""

        def line(env: dict[str, str], cmd: list[str]) -> str:
            return " ".join([*(f"{k}={v}" for k, v in env.items()), *map(_quote, cmd)])

        out = []
        if self.server_command:
            out.append(line(self.server_env, self.server_command) + " &")
        out += [line(env, cmd) + " &" for cmd, env, _ in self.fleet]
        if self.router_command:
            out.append(line({}, self.router_command) + " &")
        out.append(line(self.learner_env, self.learner_command))
        if self.in_process:
            out.append("(one learner process: the stage runs in the launcher's process)")
        return "\n".join(out)


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def plan(
    cfg: RlConfig,
    config_path: str,
    *,
    gpus: int,
    model_dir: str | None = None,
    learner_procs: int = 1,
    python: str = sys.executable,
    server_command: Callable[[str, int], list[str]] | None = None,
) -> Plan:
    """Commands for ``gpus`` GPUs on this node (0: a CPU machine, ``learner_procs`` gloo ranks).
    ``model_dir``: the local directory of ``cfg.model`` (needed when a server is launched);
    ``server_command(model_dir, port)``: replaces SGLang's command (tests use a loopback server)."""
    e = cfg.engine
    base_url = getattr(e, "base_url", "")  # the in-process kind has none
    # a server started for this run (a kind that launches, no base_url) runs on engine.gpus, kept from the
    # learner; this launcher starts SGLang's itself (its fleet and router too), other kinds' the stage starts
    reserves = KINDS[e.kind].launches and not base_url
    launch_server = reserves and e.kind == "sglang"
    overrides: list[str] = []
    server_cmd: list[str] | None = None
    server_env: dict[str, str] = {}
    rollout = list(e.gpus) if reserves else []
    if any(g < 0 or g >= gpus for g in rollout) or len(set(rollout)) != len(rollout):
        raise ConfigError(f"engine.gpus {rollout} are not distinct GPUs of this node's {gpus}")
    if reserves and gpus and not rollout and not getattr(e, "service_selector", []):
        raise ConfigError(f"engine.kind={e.kind} without engine.base_url: reserve its GPUs in engine.gpus")
    learner_gpus = [g for g in range(gpus) if g not in rollout]
    if gpus and not learner_gpus:
        raise ConfigError(f"engine.gpus {rollout} leave no GPU of {gpus} for the learner")
    if launch_server and (e.servers > 1 or e.service_selector):
        return _fleet_plan(
            cfg, config_path, gpus, rollout, learner_gpus, model_dir, learner_procs, python, server_command
        )
    if launch_server:
        if model_dir is None:
            raise ValueError("model_dir: the local directory of cfg.model is needed to launch the server")
        n = max(len(rollout), 1)
        tp = e.tp_size or n
        if n % tp:
            raise ConfigError(f"engine.tp_size={tp} does not divide the {n} GPUs of engine.gpus")
        dp = n // tp
        if e.weight_sync == "distributed" and dp != 1:
            raise ConfigError(
                "engine.weight_sync=distributed needs one TP group (SGLang refuses a distributed weight update "
                f"with data-parallel replicas): engine.tp_size={tp} over {n} GPUs gives {dp} replicas"
            )
        from paravt_core.engines.sglang_engine import launch_command

        if server_command is not None:
            server_cmd = server_command(model_dir, e.port)
        else:
            server_cmd = launch_command(
                model_dir,
                port=e.port,
                tp_size=tp,
                dp_size=dp,
                base_gpu_id=0,  # of the GPUs CUDA_VISIBLE_DEVICES shows it
                mem_fraction_static=e.mem_fraction_static,
                **_pixels(cfg),  # the encoder's budget (one for all)
                deterministic_inference=e.deterministic_inference,
                dtype=cfg.dtype,
            )
            server_cmd[0] = python
        if rollout:
            server_env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, rollout))
        base_url = f"http://127.0.0.1:{e.port}"
        overrides.append(f"engine.base_url={base_url}")
        if e.weight_sync == "distributed":
            overrides.append(f"engine.server_ranks={tp}")
    nproc = len(learner_gpus) if gpus else learner_procs
    learner_env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, learner_gpus))} if gpus else {}
    learner_cmd = [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    learner_cmd += ["-m", "paravt_core.cli", "rl", "--config", config_path, *overrides]
    in_process = nproc == 1 and not rollout
    return Plan(learner_cmd, learner_env, server_cmd, server_env, base_url, overrides, in_process)


def _pixels(cfg: RlConfig) -> dict[str, int | None]:
    """``launch_command``'s pixel arguments: the frame path's budget, as the episode encoder's (None: the
    checkpoint's own processor settings)."""
    lo, hi = cfg.agent.frames.processor_pixels(cfg.agent) or (None, None)
    return {"min_pixels": lo, "max_pixels": hi}


def _learner(
    config_path: str,
    gpus: int,
    learner_gpus: list[int],
    learner_procs: int,
    python: str,
    overrides: list[str],
) -> tuple[list[str], dict[str, str], bool]:
    nproc = len(learner_gpus) if gpus else learner_procs
    env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, learner_gpus))} if gpus else {}
    cmd = [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    cmd += ["-m", "paravt_core.cli", "rl", "--config", config_path, *overrides]
    return cmd, env, nproc == 1


def _fleet_plan(
    cfg: RlConfig,
    config_path: str,
    gpus: int,
    rollout: list[int],
    learner_gpus: list[int],
    model_dir: str | None,
    learner_procs: int,
    python: str,
    server_command: Callable[[str, int], list[str]] | None,
) -> Plan:
    """R servers on R equal runs of ``engine.gpus`` (or none: discovered pods) behind one router."""
    from paravt_core.engines.fleet import router_command
    from paravt_core.engines.sglang_engine import launch_command

    e = cfg.engine
    if e.weight_sync != "disk":
        raise ConfigError(
            "a rollout fleet (engine.servers > 1) takes weight pushes from disk: engine.weight_sync=disk"
        )
    fleet: list[tuple[list[str], dict[str, str], str]] = []
    taken = range(e.port, e.port + 1 + (0 if e.service_selector else e.servers))
    if e.router_metrics_port in taken:  # the router would fail at start with "address already in use"
        raise ConfigError(
            f"engine.router_metrics_port={e.router_metrics_port} is one of the fleet's ports "
            f"{taken.start}-{taken.stop - 1} (the router on engine.port, server i on engine.port+1+i)"
        )
    if not e.service_selector:
        if model_dir is None:
            raise ValueError("model_dir: the local directory of cfg.model is needed to launch the servers")
        if gpus and len(rollout) % e.servers:
            raise ConfigError(
                f"engine.gpus {rollout} do not split into engine.servers={e.servers} equal runs"
            )
        per = len(rollout) // e.servers if gpus else 1
        tp = e.tp_size or per
        if per % tp:
            raise ConfigError(f"engine.tp_size={tp} does not divide the {per} GPUs of each server")
        for i in range(e.servers):
            port = e.port + 1 + i
            if server_command is not None:
                cmd = server_command(model_dir, port)
            else:
                cmd = launch_command(
                    model_dir,
                    port=port,
                    tp_size=tp,
                    dp_size=per // tp,
                    base_gpu_id=0,
                    mem_fraction_static=e.mem_fraction_static,
                    **_pixels(cfg),  # the encoder's budget (one for all)
                    deterministic_inference=e.deterministic_inference,
                    dtype=cfg.dtype,
                )
                cmd[0] = python
            env = (
                {"CUDA_VISIBLE_DEVICES": ",".join(map(str, rollout[i * per : (i + 1) * per]))} if gpus else {}
            )
            fleet.append((cmd, env, f"http://127.0.0.1:{port}"))
    router = router_command(
        [url for _, _, url in fleet],
        port=e.port,
        policy=e.router_policy,
        max_retries=e.router_retries,
        metrics_port=e.router_metrics_port,
        selector=e.service_selector,
        namespace=e.service_namespace,
        discovery_port=e.service_port,
        python=python,
    )
    base_url = f"http://127.0.0.1:{e.port}"
    overrides = [
        f"engine.base_url={base_url}",
        f"engine.router_metrics_url=http://127.0.0.1:{e.router_metrics_port}/metrics",
    ]
    if fleet:
        overrides.append("engine.worker_urls=[" + ",".join(url for _, _, url in fleet) + "]")
    learner_cmd, learner_env, one = _learner(
        config_path, gpus, learner_gpus, learner_procs, python, overrides
    )
    return Plan(learner_cmd, learner_env, None, {}, base_url, overrides, one and not rollout, fleet, router)


def wait_for_workers(router_url: str, n: int, timeout_s: float) -> None:
    """Until the router lists ``n`` healthy servers (it registers them in the background)."""
    import time

    import httpx

    from paravt_core.engines.base import EngineError

    deadline = time.monotonic() + timeout_s
    healthy = 0
    while time.monotonic() < deadline:
        try:
            workers = httpx.get(router_url + "/workers", timeout=5.0).json()["workers"]
            healthy = sum(bool(w.get("is_healthy")) for w in workers)
            if healthy >= n:
                return
        except (httpx.HTTPError, KeyError, ValueError):
            pass
        time.sleep(0.5)
    raise EngineError(f"router {router_url}: {healthy} of {n} servers healthy after {timeout_s:g} s")


def launch(
    cfg: RlConfig,
    *,
    gpus: int | None = None,
    learner_procs: int = 1,
    server_command: Callable[[str, int], list[str]] | None = None,
    start_timeout_s: float = 900.0,
    log_dir: str | None = None,
) -> dict[str, Any]:
    """Run the topology (see the module docstring); returns the stage's ``metrics.json``."""
    from paravt_core import storage
    from paravt_core.engines.sglang_engine import SGLangServer

    if gpus is None:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    model_dir = None
    if cfg.engine.kind == "sglang" and not cfg.engine.base_url and not cfg.engine.service_selector:
        from paravt_core.models import resolve_model_dir

        model_dir = str(resolve_model_dir(cfg.model))
    work = tempfile.mkdtemp(prefix="paravt-rl-launch-")
    config_path = os.path.join(work, "rl.yaml")
    with open(config_path, "w") as f:
        f.write(config_to_yaml(cfg))
    p = plan(
        cfg,
        config_path,
        gpus=gpus,
        model_dir=model_dir,
        learner_procs=learner_procs,
        server_command=server_command,
    )
    print(f"rl launch ({gpus} GPU(s)):\n{p.describe()}", flush=True)
    server = None
    started: list[SGLangServer] = []  # the fleet's servers, then its router
    if p.server_command is not None:
        log = os.path.join(log_dir or work, "sglang-server.log")
        server = SGLangServer(p.server_command, p.base_url, log_path=log, env={**os.environ, **p.server_env})
        server.start(timeout_s=start_timeout_s)
    try:
        for i, (cmd, env, url) in enumerate(p.fleet):
            log = os.path.join(log_dir or work, f"sglang-server-{i}.log")
            started.append(SGLangServer(cmd, url, log_path=log, env={**os.environ, **env}).spawn())
        for s in started:
            s.wait_healthy(timeout_s=start_timeout_s)
        if p.router_command is not None:
            env = dict(os.environ)
            site = os.environ.get("PARAVT_ROUTER_SITE")
            if site:
                env["PYTHONPATH"] = os.pathsep.join(x for x in (site, env.get("PYTHONPATH", "")) if x)
            log = os.path.join(log_dir or work, "sglang-router.log")
            started.append(
                SGLangServer(p.router_command, p.base_url, log_path=log, env=env).start(timeout_s=120)
            )
            wait_for_workers(p.base_url, len(p.fleet), 120 if p.fleet else start_timeout_s)
    except BaseException:
        for s in reversed(started):
            s.stop()
        raise
    try:
        if p.in_process:
            from paravt_core.rl.stage import run

            run(load_config(RlConfig, config_path, p.overrides))
        else:
            subprocess.run(p.learner_command, env={**os.environ, **p.learner_env}, check=True)
    finally:
        if server is not None:
            server.stop()
        for s in reversed(started):
            s.stop()
    return json.loads(storage.read_bytes(storage.join(cfg.output, "metrics.json")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m paravt_core.rl.launch", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--config", required=True)
    parser.add_argument("--learner-procs", type=int, default=1, help="learner ranks on a CPU machine (gloo)")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides")
    args = parser.parse_args(argv)
    cfg = load_config(RlConfig, args.config, args.overrides)
    summary = launch(cfg, learner_procs=args.learner_procs)
    print(json.dumps({k: v for k, v in summary.items() if k != "last_step"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
