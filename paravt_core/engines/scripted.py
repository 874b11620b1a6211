"""A scripted engine: predetermined replies, tokenized with the real tokenizer (scenario and fault injection).

The tiny model is random, so its text never contains a tool call. To drive the episode loop through a
given scenario (parallel calls, malformed JSON, a cut generation, an engine failure, a slow engine) tests
and demos script the main agent's replies here; the token ids are the real tokenizer's encoding of the
scripted text (plus ``<|im_end|>`` when the reply "stops"), exactly what a model writing that text with
canonical tokens would return. Every call is recorded in ``batches`` (request tags per call).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .base import Completion, Engine, EngineError, GenerationRequest


@dataclass(frozen=True)
class Reply:
    """One scripted completion. ``finish="length"`` returns the text without eos (cut by the limit)."""

    text: str
    finish: str = "stop"
    delay_s: float = 0.0
    logprob: float = -0.5  # behaviour log-prob reported for every token


ScriptItem = str | Reply | BaseException


class ScriptedEngine(Engine):
    name = "scripted"
    token_level = True

    def __init__(
        self,
        processor: Any,
        main: Sequence[ScriptItem],
        subagent: Callable[[GenerationRequest, int], ScriptItem] | ScriptItem = "A short report.",
    ):
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.eos_token_id = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        self._main = list(main)
        self._subagent = subagent
        self._sub_count = 0
        self.batches: list[list[str]] = []  # tags of the requests of each generate() call
        self.requests: list[GenerationRequest] = []

    def _item(self, request: GenerationRequest) -> ScriptItem:
        if request.tag == "main":
            if not self._main:
                raise EngineError("the script has no main-agent reply left")
            return self._main.pop(0)
        self._sub_count += 1
        if callable(self._subagent) and not isinstance(self._subagent, BaseException):
            return self._subagent(request, self._sub_count - 1)
        return self._subagent

    def complete(self, request: GenerationRequest, item: ScriptItem) -> Completion:
        reply = item if isinstance(item, Reply) else Reply(str(item))
        ids = list(self.tokenizer(reply.text, add_special_tokens=False)["input_ids"])
        limit = request.sampling.max_new_tokens
        finish = reply.finish
        if finish == "stop":
            ids.append(self.eos_token_id)
        if len(ids) > limit:  # the request's limit wins, as in a real engine
            ids, finish = ids[:limit], "length"
        return Completion(
            token_ids=ids,
            text=self.tokenizer.decode(ids, skip_special_tokens=False),
            logprobs=[reply.logprob] * len(ids),
            finish_reason=finish,  # type: ignore[arg-type]
            stop_reason=self.eos_token_id if finish == "stop" else None,
            prompt_tokens=len(request.input_ids),
            request_id=request.request_id,
        )

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        self.batches.append([r.tag for r in requests])
        self.requests.extend(requests)
        items = [self._item(r) for r in requests]
        for item in items:
            if isinstance(item, BaseException):
                raise item
        delay = max((i.delay_s for i in items if isinstance(i, Reply)), default=0.0)
        if delay:
            await asyncio.sleep(delay)
        return [self.complete(r, i) for r, i in zip(requests, items, strict=True)]


class RoutedEngine(Engine):
    """Main-agent requests to one engine, sub-agent requests to another (e.g. scripted main agent, real
    sub-agents): lets a random tiny model show the whole tool machinery."""

    name = "routed"

    def __init__(self, main: Engine, subagent: Engine):
        self.main, self.subagent = main, subagent
        self.processor = subagent.processor or main.processor
        self.token_level = main.token_level and subagent.token_level
        self.subagent_batches: list[int] = []

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        if any(r.tag != requests[0].tag for r in requests):
            raise EngineError("a RoutedEngine call must not mix main-agent and sub-agent requests")
        if requests and requests[0].tag == "main":
            return await self.main.generate(requests)
        self.subagent_batches.append(len(requests))
        return await self.subagent.generate(requests)
