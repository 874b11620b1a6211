"""Episodes' generate calls sent to a server independently, for servers that batch continuously (SGLang).

``CoalescingEngine`` holds every episode's turn until all tracked episodes wait, then sends one body: right
for the in-process engine (one ``generate`` batch at a time), wrong for SGLang, whose scheduler adds a request
to the running batch the moment it arrives and returns each one when *it* is done. In lock-step every turn
waits for the slowest episode of the step; here an episode's next turn leaves as soon as its last one came back
(one HTTP request per episode turn), with at most ``max_concurrency`` calls in flight.

Same interface as ``CoalescingEngine`` (``track``, ``reserve``, ``reseed``, counters), so the rollout code
treats both alike. Sampling seeds (taken by a server with deterministic inference): request ``j`` of the
``n``-th call of episode ``key`` gets ``seed(base, key, n, j)``, so an episode's samples depend on its own
history only, not on the timing of others.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import threading
import weakref
from collections.abc import AsyncIterator, Sequence
from typing import Any

from .base import Completion, Engine, EngineError, GenerationRequest, generate_with_retries

_EPISODE: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar(
    "paravt_independent", default=None
)  # [episode key, calls made so far, routing key or None]


def request_seed(base: int, key: int, call: int, index: int) -> int:
    """A 31-bit seed from (base, episode key, call number within the episode, request index in the call)."""
    return (base * 1_000_003 + key * 10_007 + call * 101 + index) % (2**31)


class IndependentEngine(Engine):
    def __init__(
        self, inner: Engine, *, max_concurrency: int = 256, seed: int | None = 0, max_retries: int = 2
    ):
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        self.inner = inner
        self.name = f"independent-{inner.name}"
        self.token_level = inner.token_level
        self.processor = inner.processor
        self.max_concurrency, self.max_retries = max_concurrency, max_retries
        self._seed = seed
        # one semaphore per event loop (the rollout thread and the learner's loop may both call)
        self._limits: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()
        self.batches = 0  # generate calls sent to the inner engine
        self.requests = 0
        self.retries = 0
        self.peak_in_flight = 0
        self._in_flight = 0

    def reseed(self, seed: int | None) -> None:
        self._seed = seed

    def reserve(self, n: int) -> None:
        """Nothing to wait for: calls never wait on other episodes (kept for ``CoalescingEngine``'s interface)."""

    @contextlib.asynccontextmanager
    async def track(
        self, key: int, *, reserved: bool = False, affinity: str | None = None
    ) -> AsyncIterator[None]:
        """``affinity``: the routing key of every request of this episode (its GRPO group: a router keeps
        the group on one server, whose prefix cache then holds the group's shared prompt and frames)."""
        token = _EPISODE.set([key, 0, affinity])
        try:
            yield
        finally:
            _EPISODE.reset(token)

    def _limit(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        with self._lock:
            sem = self._limits.get(loop)
            if sem is None:
                sem = self._limits[loop] = asyncio.Semaphore(self.max_concurrency)
        return sem

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        requests = list(requests)
        episode = _EPISODE.get()
        if episode is not None and episode[2] is not None:
            requests = [dataclasses.replace(r, routing_key=episode[2]) for r in requests]
        if episode is not None and self._seed is not None:
            key, call, _ = episode
            episode[1] += 1
            requests = [
                dataclasses.replace(
                    r, sampling=dataclasses.replace(r.sampling, seed=request_seed(self._seed, key, call, j))
                )
                for j, r in enumerate(requests)
            ]
        async with self._limit():
            self._in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
            self.batches += 1
            self.requests += len(requests)
            try:
                return await generate_with_retries(
                    self.inner, requests, max_retries=self.max_retries, on_retry=self._count_retry
                )
            finally:
                self._in_flight -= 1

    def _count_retry(self, _err: EngineError) -> None:
        self.retries += 1

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __getattr__(self, name: str) -> Any:  # weight_version, server, update calls ... of the inner engine
        return getattr(self.inner, name)
