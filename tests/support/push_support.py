"""Shared by several test modules (from tests/contract/test_push_interrupt.py, where it was first written)."""

from __future__ import annotations

from pathlib import Path

from paravt_core.engines.sglang_engine import SGLangEngine
from tests.support.sglang_support import SGLangReceiver, sglang_site


class _OwnedServer:
    """What ``SGLangEngine.launch`` leaves on ``engine.server`` (stop / start), over the receiver: a restart
    is a new receiver process (a new port, which the engine is pointed at)."""

    def __init__(self, engine: SGLangEngine, receiver: SGLangReceiver, workdir: Path):
        self.engine, self.receiver, self.workdir, self.starts = engine, receiver, workdir, 0

    def stop(self, timeout_s: float = 30.0) -> None:
        self.receiver.kill()

    def start(self) -> None:
        self.starts += 1
        self.workdir.mkdir()
        self.receiver = SGLangReceiver(sglang_site(), self.workdir)
        self.engine.base_url = self.receiver.url
