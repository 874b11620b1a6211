"""A loopback rollout fleet for the tests: the REAL ``sglang-router`` 0.3.2 (its Rust binary, from the side site
``scripts/setup.sh`` makes in ``.venv-router``) in front of N loopback SGLang contract servers
(``tests/support/contract_server_main.py``: SGLang's ``/generate``, ``/health``, ``/model_info`` and weight-update
endpoints serving the tiny model), started with the production launch code (``SGLangServer``,
``engines.fleet.router_command``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from paravt_core.engines.fleet import router_command
from paravt_core.engines.sglang_engine import SGLangServer
from paravt_core.rl.launch import wait_for_workers
from tests.support.paths import ROOT
from tests.support.ports import free_port, free_ports

ROUTER_VERSION = "0.3.2"


def router_site() -> Path:
    """The side site with sglang-router; fails under CI (skips elsewhere) when setup did not make it."""
    site = Path(os.environ.get("PARAVT_ROUTER_SITE", ROOT / ".venv-router"))
    if not (site / f"sglang_router-{ROUTER_VERSION}.dist-info").is_dir():
        message = f"sglang-router {ROUTER_VERSION} is not set up in {site} (scripts/setup.sh makes it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return site


def router_env(site: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    return env


def parse_router_argv(site: Path, argv: list[str]) -> dict[str, Any]:
    """``argv`` through the router's own launcher parser and checks (``parse_router_args``,
    ``RouterArgs._validate_router_args``): the resulting ``RouterArgs`` as a dict."""
    code = (
        "import dataclasses, json, sys\n"
        "from sglang_router.launch_router import parse_router_args\n"
        "args = parse_router_args(sys.argv[1:])\n"
        "args._validate_router_args()\n"
        "print(json.dumps(dataclasses.asdict(args), default=str))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *argv], env=router_env(site), capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


class LoopbackFleet:
    """``n`` contract servers (processes) and the real router in front of them."""

    def __init__(
        self, model_dir: str, workdir: Path, *, n: int = 3, pixels: tuple[int, int], delay_s: float = 0.0
    ):
        site = router_site()
        self.servers: list[SGLangServer] = []
        self.router: SGLangServer | None = None
        try:
            for i in range(n):
                port = free_port()
                cmd = [
                    sys.executable,
                    str(ROOT / "tests" / "support" / "contract_server_main.py"),
                    model_dir,
                    str(port),
                ]
                cmd += [str(pixels[0]), str(pixels[1])]
                env = dict(os.environ, PARAVT_CONTRACT_DELAY_S=str(delay_s), OMP_NUM_THREADS="1")
                server = SGLangServer(
                    cmd, f"http://127.0.0.1:{port}", log_path=str(workdir / f"server-{i}.log"), env=env
                )
                self.servers.append(server.spawn())
            for server in self.servers:
                server.wait_healthy(timeout_s=300, poll_s=0.5)
            self.urls = [s.base_url for s in self.servers]
            port, metrics = free_ports(2)
            self.command = router_command(self.urls, port=port, metrics_port=metrics, health_interval_s=2)
            self.router = SGLangServer(
                self.command,
                f"http://127.0.0.1:{port}",
                log_path=str(workdir / "router.log"),
                env=router_env(site),
            ).start(timeout_s=120, poll_s=0.5)
            wait_for_workers(self.router.base_url, n, 120)
            self.url = self.router.base_url
            self.metrics_url = f"http://127.0.0.1:{metrics}/metrics"
        except BaseException:
            self.close()
            raise

    def state(self, i: int) -> dict[str, Any]:
        """What server ``i`` was asked (path and body of every call) and the checksums of what it served."""
        return httpx.get(self.urls[i] + "/paravt_test/state", timeout=30).json()

    def generate_bodies(self, i: int) -> list[dict]:
        return [c["body"] for c in self.state(i)["calls"] if c["path"] == "/generate"]

    def kill(self, i: int) -> None:
        """SIGKILL server ``i`` (no goodbye: its connections drop, as when a pod dies)."""
        process = self.servers[i].process
        assert process is not None
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)

    def close(self) -> None:
        if self.router is not None:
            self.router.stop()
        for server in self.servers:
            server.stop()
