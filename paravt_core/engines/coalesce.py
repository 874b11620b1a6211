"""Coalesce the generate calls of concurrent episodes into batched calls of one in-process engine.

Every episode of a rollout step runs as its own asyncio task and calls ``engine.generate`` with one main-agent
request, or with its turn's sub-agent requests. Served one by one, the transformers engine would run those
calls back to back (it holds a lock). ``CoalescingEngine`` holds each call until every *tracked* episode is
either waiting on the engine or finished, then sends all waiting requests as one ``generate`` (the inner
engine batches the requests that share sampling parameters). The trigger is a count, not a timer, so the
batches - and with per-batch seeds the sampled tokens - are the same on every run: a resumed RL run
reproduces the uninterrupted one.

Sampling seeds: requests of a dispatched batch get ``seed = base + batches since reseed`` (``reseed`` sets
the base, e.g. from the RL step), so an episode's sampling is reproducible without giving every request its own
seed (distinct seeds would split the batch).

Calls made outside ``track()`` go straight to the inner engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
from collections.abc import AsyncIterator, Sequence
from typing import Any

from .base import Completion, Engine, EngineError, GenerationRequest, generate_with_retries

_EPISODE: contextvars.ContextVar[int | None] = contextvars.ContextVar("paravt_rl_episode", default=None)


@dataclasses.dataclass
class _Waiting:
    key: int
    requests: list[GenerationRequest]
    future: asyncio.Future


class CoalescingEngine(Engine):
    def __init__(self, inner: Engine, *, seed: int | None = 0, max_retries: int = 2):
        self.inner = inner
        self.name = f"coalesced-{inner.name}"
        self.token_level = inner.token_level
        self.processor = inner.processor
        self.max_retries = max_retries
        self._seed = seed
        self._active = 0
        self._waiting: list[_Waiting] = []
        self._busy = False
        self._since_reseed = 0
        self.batches = 0  # generate calls sent to the inner engine
        self.requests = 0  # requests they carried
        self.retries = 0

    def reseed(self, seed: int | None) -> None:
        """Base of the per-batch seeds (None: unseeded sampling); batches count from 0 again."""
        self._seed = seed
        self._since_reseed = 0

    def reserve(self, n: int) -> None:
        """Announce ``n`` episodes that will enter ``track(..., reserved=True)``: no batch is sent before
        each of them waits on the engine or has finished, however late it starts (e.g. after decoding its
        group's overview). This makes the batches independent of thread timing."""
        self._active += n

    @contextlib.asynccontextmanager
    async def track(
        self, key: int, *, reserved: bool = False, affinity: str | None = None
    ) -> AsyncIterator[None]:
        """Run one episode inside this block; ``key`` orders its requests within a batch (``affinity``, a
        router's routing key, means nothing to one in-process engine)."""
        token = _EPISODE.set(key)
        if not reserved:
            self._active += 1
        try:
            yield
        finally:
            self._active -= 1
            _EPISODE.reset(token)
            self._maybe_dispatch()

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        key = _EPISODE.get()
        if key is None:
            return await self.inner.generate(list(requests))
        future = asyncio.get_running_loop().create_future()
        self._waiting.append(_Waiting(key, list(requests), future))
        self._maybe_dispatch()
        return await future

    def _maybe_dispatch(self) -> None:
        if self._busy or not self._waiting or len(self._waiting) < self._active:
            return
        batch = sorted(self._waiting, key=lambda w: w.key)
        self._waiting = []
        self._busy = True
        asyncio.get_running_loop().create_task(self._dispatch(batch))

    async def _dispatch(self, batch: list[_Waiting]) -> None:
        seed = None if self._seed is None else self._seed + self._since_reseed
        self._since_reseed += 1
        flat: list[GenerationRequest] = []
        for waiting in batch:
            for request in waiting.requests:
                sampling = dataclasses.replace(request.sampling, seed=seed)
                flat.append(dataclasses.replace(request, sampling=sampling))
        self.batches += 1
        self.requests += len(flat)
        try:
            completions = await self._generate_with_retries(flat)
        except Exception as err:
            for waiting in batch:
                if not waiting.future.done():
                    waiting.future.set_exception(err)
        else:
            at = 0
            for waiting in batch:
                n = len(waiting.requests)
                if not waiting.future.done():  # the episode may have stopped waiting (timeout)
                    waiting.future.set_result(completions[at : at + n])
                at += n
        finally:
            self._busy = False
            self._maybe_dispatch()

    async def _generate_with_retries(self, requests: list[GenerationRequest]) -> list[Completion]:
        return await generate_with_retries(
            self.inner, requests, max_retries=self.max_retries, on_retry=self._count_retry
        )

    def _count_retry(self, _err: EngineError) -> None:
        self.retries += 1

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __getattr__(self, name: str) -> Any:  # load_weights, weight_version, model ... of the inner engine
        return getattr(self.inner, name)
