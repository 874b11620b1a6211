"""A server process this program started (an SGLang or vLLM server): spawned in its own process group, waited
for until ``/health`` answers, stopped with everything it spawned."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any

import httpx

from .base import EngineError


class ServerProcess:
    """``command`` serving at ``base_url``. ``stop`` ends exactly the process group ``spawn`` made."""

    label = "server"  # what log lines and errors call it

    def __init__(
        self,
        command: list[str],
        base_url: str,
        *,
        log_path: str | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ):
        """``env``: the process environment (e.g. ``CUDA_VISIBLE_DEVICES`` pinning it); default: ours."""
        self.command, self.base_url, self.log_path, self.env, self.cwd = command, base_url, log_path, env, cwd
        self.process: subprocess.Popen | None = None
        self._log: Any = None

    def start(self, *, timeout_s: float = 900.0, poll_s: float = 2.0) -> ServerProcess:
        return self.spawn().wait_healthy(timeout_s=timeout_s, poll_s=poll_s)

    def spawn(self) -> ServerProcess:
        """Start the process without waiting (several servers come up side by side)."""
        self._log = open(self.log_path, "ab") if self.log_path else None  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            self.command,
            stdout=self._log or subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,  # its own process group, so stop() ends the workers it spawns too
        )
        return self

    def wait_healthy(self, *, timeout_s: float = 900.0, poll_s: float = 2.0) -> ServerProcess:
        assert self.process is not None, "spawn() first"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._close_log()
                log = f" (its log: {self.log_path})" if self.log_path else ""
                raise EngineError(
                    f"{self.label} exited with code {self.process.returncode}{log}: {' '.join(self.command)}"
                )
            try:
                if httpx.get(self.base_url + "/health", timeout=5.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(poll_s)
        self.stop()
        raise EngineError(f"{self.label} not healthy after {timeout_s:g} s")

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)  # the group we created: the server and its workers
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
