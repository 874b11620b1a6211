"""Cross-sample batching on one engine: concurrent episodes' generation calls merged into one batch.

Every episode calls ``engine.generate`` on its own (one main-agent prompt, or one turn's sub-agents). With many
samples in flight, an in-process engine would run those calls one after the other, each a batch of one.
``CoalescingEngine`` wraps it: calls that arrive while a batch runs (or within ``window_s`` of the first)
are queued and sent together as one ``inner.generate`` call (at most ``max_requests`` requests; the inner
engine groups them by sampling parameters), and every caller gets its own completions back in order. If the
merged call fails, every caller gets the error (the runner retries the affected samples).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from paravt_core.engines.base import Completion, Engine, GenerationRequest


@dataclass
class _Pending:
    requests: list[GenerationRequest]
    future: asyncio.Future = field(repr=False)


class CoalescingEngine(Engine):
    name = "coalescing"

    def __init__(self, inner: Engine, *, max_requests: int = 32, window_s: float = 0.01):
        self.inner = inner
        self.processor = inner.processor
        self.token_level = inner.token_level
        self.max_requests = max_requests
        self.window_s = window_s
        self._queue: list[_Pending] = []
        self._worker: asyncio.Task | None = None
        self.batch_sizes: list[int] = []  # requests per inner call (for the benchmark and tests)

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        loop = asyncio.get_running_loop()
        pending = _Pending(list(requests), loop.create_future())
        self._queue.append(pending)
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._drain())
        return await pending.future

    async def _drain(self) -> None:
        while self._queue:
            await asyncio.sleep(self.window_s)  # let the other in-flight episodes reach their next call
            batch: list[_Pending] = []
            size = 0
            while self._queue and (not batch or size + len(self._queue[0].requests) <= self.max_requests):
                item = self._queue.pop(0)
                if item.future.cancelled():  # its caller gave up (timeout): do not generate for it
                    continue
                batch.append(item)
                size += len(item.requests)
            if not batch:
                continue
            merged = [r for item in batch for r in item.requests]
            self.batch_sizes.append(len(merged))
            try:
                completions = await self.inner.generate(merged)
            except Exception as err:  # every caller of the batch sees the failure
                for item in batch:
                    if not item.future.done():
                        item.future.set_exception(err)
                continue
            offset = 0
            for item in batch:
                part = completions[offset : offset + len(item.requests)]
                offset += len(item.requests)
                if not item.future.done():
                    item.future.set_result(part)

    async def aclose(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
        await self.inner.aclose()
