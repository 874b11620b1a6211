"""SGLang 0.5.23's own code for the contract tests, run in side processes (``tests/support/sglang_side.py``).

The site directory is made by ``scripts/setup.sh`` (``PARAVT_SGLANG_SITE`` overrides the path). Where it is
missing the tests fail under ``CI=true`` (the project's setup must have made it) and skip elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.paths import ROOT

SIDE = ROOT / "tests" / "support" / "sglang_side.py"


def sglang_site() -> Path:
    """The side site with SGLang 0.5.23's package; fails in CI (skips elsewhere) when it is not set up."""
    site = Path(os.environ.get("PARAVT_SGLANG_SITE", ROOT / ".venv-bench" / "sglang-site"))
    if not (site / "sglang" / "srt" / "managers" / "io_struct.py").is_file():
        message = f"SGLang 0.5.23's package is not set up in {site} (scripts/setup.sh makes it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return site


def side_env(site: Path) -> dict[str, str]:
    env = dict(os.environ)
    # the side site first, then the project (for nothing of ours: SGLang's modules are all it imports)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    env["PARAVT_SGLANG_SITE"] = str(site)
    env["OMP_NUM_THREADS"] = "1"
    return env


class SGLangChecker:
    """One long-lived side process answering schema / io_struct / ServerArgs questions."""

    def __init__(self, site: Path):
        self.process = subprocess.Popen(
            [sys.executable, str(SIDE), "check"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=side_env(site),
            text=True,
        )

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"SGLang side process exited ({self.process.poll()})")
        return json.loads(line)

    def generate_error(self, body: dict) -> str | None:
        """The /generate schema gate's verdict: None (accepted) or its error message."""
        return self._ask({"op": "generate", "body": body})["error"]

    def io_struct(self, cls: str, body: dict) -> dict[str, Any]:
        """``{"error": None | str, "fields": {...}, "unknown": [keys the class does not have]}``."""
        return self._ask({"op": "io_struct", "cls": cls, "body": body})

    def server_args(self, argv: list[str]) -> dict[str, Any]:
        return self._ask({"op": "server_args", "argv": argv})

    def server_env(self, argv: list[str]) -> dict[str, str]:
        """What SGLang's launch sets in its own process environment for ``argv`` (name -> value)."""
        verdict = self._ask({"op": "server_env", "argv": argv})
        if verdict["error"]:
            raise RuntimeError(verdict["error"])
        return verdict["set"]

    def weights_checksum(self, path: str | Path) -> dict[str, Any]:
        """``/weights_checker``'s checksum answer from a server holding the state dict saved at ``path``."""
        verdict = self._ask({"op": "weights_checksum", "path": str(path)})
        if verdict["error"]:
            raise RuntimeError(verdict["error"])
        return verdict["answer"]

    def model_dtype(self, path: str, dtype: str = "auto") -> str:
        """The dtype SGLang serves the checkpoint at ``path`` in when launched with ``--dtype dtype``."""
        verdict = self._ask({"op": "model_dtype", "path": str(path), "dtype": dtype})
        if verdict["error"]:
            raise RuntimeError(verdict["error"])
        return verdict["dtype"]

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(30)


def sglang_load_targets(site: Path, model_dir: str, names: list[str]) -> dict[str, Any]:
    """SGLang's Qwen3-VL model class, built on the meta device for ``model_dir``'s config, fed each of
    ``names`` through its ``load_weights`` (``sglang_side.py names``): ``{"unconsumed": [...], "targets":
    {name: [parameters loaded]}, "params": [its parameter names]}``."""
    done = subprocess.run(
        [sys.executable, str(SIDE), "names", model_dir],
        input=json.dumps(names),
        capture_output=True,
        text=True,
        env=side_env(site),
        timeout=600,
    )
    if done.returncode:
        raise RuntimeError(f"sglang_side.py names failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


class SGLangReceiver:
    """The loopback weight receiver built from SGLang's scheduler-side code (``sglang_side.py serve``)."""

    def __init__(self, site: Path, workdir: Path, port: int = 0, wedge: bool = False):
        """``port``: listen there (0: any free port). ``wedge``: a failed distributed update holds the server
        for good, as NCCL's stuck receive does (``sglang_side.py serve --wedge``)."""
        self.port_file, self.out_file = workdir / "port", workdir / "received.pt"
        options = ["--port", str(port)] + (["--wedge"] if wedge else [])
        self.process = subprocess.Popen(
            [sys.executable, str(SIDE), "serve", str(self.port_file), str(self.out_file), *options],
            env=side_env(site),
        )
        deadline = time.monotonic() + 300  # importing SGLang's modules takes minutes on a loaded machine
        while not (self.port_file.is_file() and self.port_file.read_text()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()  # never left running behind a failed start
                raise RuntimeError("SGLang receiver did not start")
            time.sleep(0.1)
        self.url = f"http://127.0.0.1:{self.port_file.read_text()}"

    def log(self) -> list[dict]:
        return httpx.get(self.url + "/log", timeout=30).json()

    def set_inflight(self, n: int) -> None:
        httpx.post(self.url + "/inflight", json={"n": n}, timeout=30)

    def snapshot(self) -> dict:
        """The tensors received so far (name -> tensor)."""
        import torch

        path = self.out_file.with_suffix(".snapshot.pt")
        httpx.post(self.url + "/snapshot", json={"path": str(path)}, timeout=60)
        return torch.load(path)

    def weights_checker(self) -> dict:
        """``POST /weights_checker`` (action ``checksum``): SGLang's checksum answer for what it holds."""
        return httpx.post(self.url + "/weights_checker", json={"action": "checksum"}, timeout=60).json()

    def finish(self) -> dict:
        """Stop it; returns the tensors it received (name -> tensor)."""
        import torch

        httpx.post(self.url + "/shutdown", timeout=60)
        self.process.wait(60)
        return torch.load(self.out_file)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def kill_mid_bucket(url: str, port: int, model_dir: str) -> dict[str, Any]:
    """A learner process (``tests/support/nccl_push_victim.py``: ``NcclSync``'s bucketed push of the tiny model's weights
    + 0.5 over gloo) joins the server at ``url`` (rendezvous at ``port``) and is SIGKILLed once it has sent part
    of a bucket: it says so on its stdout and waits (no timing involved). Returns what it said: ``group`` (its
    group name), ``bucket`` (the index of the cut bucket), ``sent`` of ``of`` tensors of it sent."""
    victim = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "support" / "nccl_push_victim.py"), url, str(port), model_dir],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
        text=True,
    )
    try:
        assert victim.stdout is not None
        for line in victim.stdout:  # ends when the victim exits: it failed before the middle of a bucket
            if line.startswith("MID-BUCKET "):
                return json.loads(line.removeprefix("MID-BUCKET "))
        raise AssertionError(f"the learner did not reach the middle of a bucket (exit {victim.wait()})")
    finally:
        victim.kill()  # SIGKILL
        victim.wait()
