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

    def describe(self) -> str:
        """The commands as a shell would run them (logs, the README)."""

        def line(env: dict[str, str], cmd: list[str]) -> str:
            return " ".join([*(f"{k}={v}" for k, v in env.items()), *map(_quote, cmd)])

        out = []
        if self.server_command:
            out.append(line(self.server_env, self.server_command) + " &")
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
    launch_server = e.kind == "sglang" and not e.base_url
    overrides: list[str] = []
    server_cmd: list[str] | None = None
    server_env: dict[str, str] = {}
    base_url = e.base_url
    rollout = list(e.gpus) if launch_server else []
    if any(g < 0 or g >= gpus for g in rollout) or len(set(rollout)) != len(rollout):
        raise ConfigError(f"engine.gpus {rollout} are not distinct GPUs of this node's {gpus}")
    if launch_server and gpus and not rollout:
        raise ConfigError("engine.kind=sglang without engine.base_url: reserve its GPUs in engine.gpus")
    learner_gpus = [g for g in range(gpus) if g not in rollout]
    if gpus and not learner_gpus:
        raise ConfigError(f"engine.gpus {rollout} leave no GPU of {gpus} for the learner")
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
                max_pixels=cfg.agent.max_pixels,
                min_pixels=cfg.agent.min_pixels,
                deterministic_inference=e.deterministic_inference,
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
    if cfg.engine.kind == "sglang" and not cfg.engine.base_url:
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
    if p.server_command is not None:
        log = os.path.join(log_dir or work, "sglang-server.log")
        server = SGLangServer(p.server_command, p.base_url, log_path=log, env={**os.environ, **p.server_env})
        server.start(timeout_s=start_timeout_s)
    try:
        if p.in_process:
            from paravt_core.rl.stage import run

            run(load_config(RlConfig, config_path, p.overrides))
        else:
            subprocess.run(p.learner_command, env={**os.environ, **p.learner_env}, check=True)
    finally:
        if server is not None:
            server.stop()
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
