"""IndependentEngine: every episode turn goes to the server on its own (continuous batching), bounded."""

from __future__ import annotations

import asyncio

import pytest

from paravt_core.engines.base import (
    Completion,
    Engine,
    EngineError,
    EngineRefused,
    GenerationRequest,
    SamplingParams,
)
from paravt_core.engines.coalesce import CoalescingEngine
from paravt_core.engines.independent import IndependentEngine, request_seed


class _Gated(Engine):
    """Answers a request at once unless its first token is gated; a gated one waits for ``release``."""

    name = "gated"

    def __init__(self, gated: set[int]):
        self.gated, self.release = gated, asyncio.Event()
        self.calls: list[list[int]] = []  # first input token of each request, per call
        self.seeds: list[list[int | None]] = []
        self.in_flight = 0
        self.peak = 0
        self.fail_next = 0
        self.error: type[EngineError] = EngineError

    async def generate(self, requests):
        self.calls.append([r.input_ids[0] for r in requests])
        self.seeds.append([r.sampling.seed for r in requests])
        if self.fail_next:
            self.fail_next -= 1
            raise self.error("injected")
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            if any(r.input_ids[0] in self.gated for r in requests):
                await self.release.wait()
            await asyncio.sleep(0)
        finally:
            self.in_flight -= 1
        return [Completion(token_ids=[1], text="x", logprobs=[0.0], finish_reason="stop") for _ in requests]


def _request(token: int) -> GenerationRequest:
    return GenerationRequest(input_ids=[token], sampling=SamplingParams(max_new_tokens=1))


async def _episode(engine, key: int, turns: int, done: list[int]) -> None:
    async with engine.track(key, reserved=True):
        for _ in range(turns):
            await engine.generate([_request(key)])
    done.append(key)


def test_a_slow_episode_does_not_hold_the_others():
    async def scenario(wrap):
        inner = _Gated(gated={0})  # episode 0's first turn is slow (a long generation)
        engine = wrap(inner)
        engine.reserve(3)
        done: list[int] = []
        tasks = [asyncio.create_task(_episode(engine, k, 3, done)) for k in range(3)]
        for _ in range(50):
            await asyncio.sleep(0)
        finished_while_slow = list(done)
        inner.release.set()
        await asyncio.gather(*tasks)
        return finished_while_slow, inner

    # independent: episodes 1 and 2 run all three turns while episode 0's first request is still out
    finished, inner = asyncio.run(scenario(lambda e: IndependentEngine(e, seed=None)))
    assert sorted(finished) == [1, 2]
    assert all(len(c) == 1 for c in inner.calls) and len(inner.calls) == 9  # one request per episode turn
    # lock-step (the in-process engine's coalescer): nobody gets past the slow turn
    finished, inner = asyncio.run(scenario(lambda e: CoalescingEngine(e, seed=None)))
    assert finished == [] and inner.calls[0] == [0, 1, 2]


def test_concurrency_is_bounded_and_seeds_follow_the_episode():
    async def scenario():
        inner = _Gated(gated=set())
        engine = IndependentEngine(inner, max_concurrency=2, seed=7)
        done: list[int] = []
        await asyncio.gather(*(_episode(engine, k, 2, done) for k in range(5)))
        return inner, engine

    inner, engine = asyncio.run(scenario())
    assert inner.peak == 2 and engine.peak_in_flight == 2
    assert engine.batches == 10 and engine.requests == 10
    by_episode: dict[int, list[int | None]] = {}
    for tokens, seeds in zip(inner.calls, inner.seeds, strict=True):
        by_episode.setdefault(tokens[0], []).extend(seeds)
    # call n of episode k: (7 * 1000003 + k * 10007 + n * 101) mod 2^31, independent of the interleaving
    assert by_episode == {
        k: [(7 * 1_000_003 + k * 10_007 + n * 101) % 2**31 for n in range(2)] for k in range(5)
    }
    assert request_seed(7, 1, 0, 1) == request_seed(7, 1, 0, 0) + 1


def test_engine_errors_are_retried_then_raised():
    async def scenario(fails: int):
        inner = _Gated(gated=set())
        inner.fail_next = fails
        engine = IndependentEngine(inner, seed=None, max_retries=2)
        try:
            return await engine.generate([_request(3)]), engine
        except EngineError as err:
            return err, engine

    out, engine = asyncio.run(scenario(2))
    assert isinstance(out, list) and engine.retries == 2
    out, engine = asyncio.run(scenario(3))
    assert isinstance(out, EngineError)
    with pytest.raises(ValueError):
        IndependentEngine(_Gated(set()), max_concurrency=0)


@pytest.mark.parametrize("wrapper", [IndependentEngine, CoalescingEngine])
def test_both_wrappers_share_one_retry_rule(wrapper):
    """``engines.base.generate_with_retries`` serves both: max_retries=1 -> one failure is retried and
    counted once, two failures raise the second error after one counted retry (2 calls to the inner engine)."""

    async def scenario(fails: int, error: type[EngineError] = EngineError):
        inner = _Gated(gated=set())
        inner.fail_next, inner.error = fails, error
        engine = wrapper(inner, seed=None, max_retries=1)
        try:
            async with engine.track(0):
                out = await engine.generate([_request(3)])
        except EngineError as err:
            out = err
        return out, engine, inner

    out, engine, inner = asyncio.run(scenario(1))
    assert isinstance(out, list) and engine.retries == 1 and len(inner.calls) == 2
    out, engine, inner = asyncio.run(scenario(2))
    assert isinstance(out, EngineError) and engine.retries == 1 and len(inner.calls) == 2
    out, engine, inner = asyncio.run(scenario(1, EngineRefused))  # a refusal is the same on every attempt
    assert isinstance(out, EngineRefused) and engine.retries == 0 and len(inner.calls) == 1
