"""LLM judge for open-ended answers (docs/method.md §5): an OpenAI-compatible endpoint scores 1.0 / 0.5 / 0.0.

The endpoint comes from the environment only: ``LLM_JUDGE_BASE_URL``, ``LLM_JUDGE_API_KEY`` (optional),
``LLM_JUDGE_MODEL`` (default ``gpt-4o-mini``). Each verdict is one chat completion at temperature 0 with
at most 8 new tokens; the first number of the reply is the score, clamped to [0, 1]. HTTP retries and
backoff are ``OpenAIEngine``'s; on top, the whole verdict has a deadline (``deadline_s``) that stays
below the reward timeout. Any failure - timeout, HTTP error, a reply without a number - gives the token
F1 of prediction and gold instead, with the reason recorded and counted. The API key is never logged,
shown in ``repr`` or put in an error message.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import re
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from paravt_core.engines.openai_engine import OpenAIEngine

from .f1 import token_f1

log = logging.getLogger(__name__)

T = TypeVar("T")

ENV_BASE_URL = "LLM_JUDGE_BASE_URL"
ENV_API_KEY = "LLM_JUDGE_API_KEY"
ENV_MODEL = "LLM_JUDGE_MODEL"
DEFAULT_MODEL = "gpt-4o-mini"
MAX_TOKENS = 8

_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")

SYSTEM_PROMPT = "You grade answers to questions about videos. Reply with a single number."
USER_TEMPLATE = (
    "Question: {question}\n"
    "Reference answer: {gold}\n"
    "Predicted answer: {prediction}\n\n"
    "Does the predicted answer mean the same as the reference answer? Reply with one number only: "
    "1.0 if it is equivalent, 0.5 if it is partly equivalent, 0.0 if it is not."
)


class JudgeConfigError(ValueError):
    """The judge cannot be built (no endpoint configured)."""


@dataclass(frozen=True)
class JudgeScore:
    score: float  # in [0, 1]
    source: str  # "judge" or "f1_fallback"
    reason: str | None = None  # None, "judge_timeout", "judge_error", "judge_unparseable"
    raw: str | None = None  # the judge's reply (first 64 characters)


def parse_verdict(reply: str) -> float | None:
    """First number of the reply clamped to [0, 1]; None when there is none."""
    match = _NUMBER.search(reply or "")
    if match is None:
        return None
    try:
        value = float(match.group(0))
    except ValueError:
        return None
    return min(1.0, max(0.0, value))


def judge_messages(question: str, prediction: str, gold: str) -> list[dict]:
    user = USER_TEMPLATE.format(question=question.strip(), gold=gold.strip(), prediction=prediction.strip())
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def _run_blocking(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, also when the caller is inside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


class Judge:
    """Scores (question, prediction, gold) with an OpenAI-compatible model; never raises for a verdict."""

    def __init__(
        self,
        base_url: str,
        model: str = DEFAULT_MODEL,
        *,
        api_key: str | None = None,
        timeout_s: float = 10.0,
        max_retries: int = 2,
        backoff_s: float = 0.5,
        deadline_s: float = 30.0,
    ):
        if not base_url:
            raise JudgeConfigError(f"the LLM judge needs an endpoint: set {ENV_BASE_URL}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._api_key = api_key or ""
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.deadline_s = deadline_s
        self._engine: OpenAIEngine | None = None
        self._lock = threading.Lock()
        self.calls = 0  # verdicts asked of the endpoint
        self.fallbacks = 0  # verdicts replaced by token F1
        self.errors = 0  # timeouts and HTTP failures (replies without a number are counted as fallbacks)

    @classmethod
    def from_env(cls, **kwargs: Any) -> Judge:
        """A judge for ``LLM_JUDGE_BASE_URL`` / ``LLM_JUDGE_API_KEY`` / ``LLM_JUDGE_MODEL``."""
        return cls(
            os.environ.get(ENV_BASE_URL, ""),
            os.environ.get(ENV_MODEL) or DEFAULT_MODEL,
            api_key=os.environ.get(ENV_API_KEY),
            **kwargs,
        )

    def __repr__(self) -> str:  # the key is deliberately absent
        return f"Judge(base_url={self.base_url!r}, model={self.model!r}, calls={self.calls})"

    def counters(self) -> dict[str, int]:
        with self._lock:
            return {"judge_calls": self.calls, "judge_fallbacks": self.fallbacks, "judge_errors": self.errors}

    def _new_engine(self) -> OpenAIEngine:
        return OpenAIEngine(
            self.base_url,
            self.model,
            api_key=self._api_key,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
            backoff_s=self.backoff_s,
        )

    def _redact(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text

    def _count(self, *, fallback: bool = False, error: bool = False) -> None:
        with self._lock:
            self.fallbacks += fallback
            self.errors += error

    async def ascore(self, question: str, prediction: str, gold: str) -> JudgeScore:
        if self._engine is None:
            self._engine = self._new_engine()
        return await self._verdict(self._engine, question, prediction, gold)

    def score(self, question: str, prediction: str, gold: str) -> JudgeScore:
        """Blocking ``ascore`` (its own short-lived HTTP client, safe from any thread)."""

        async def once() -> JudgeScore:
            engine = self._new_engine()
            try:
                return await self._verdict(engine, question, prediction, gold)
            finally:
                await engine.aclose()

        return _run_blocking(once())

    async def _verdict(self, engine: OpenAIEngine, question: str, prediction: str, gold: str) -> JudgeScore:
        with self._lock:
            self.calls += 1
        messages = judge_messages(question, prediction, gold)
        try:
            reply = await asyncio.wait_for(
                engine.chat(messages, temperature=0.0, max_new_tokens=MAX_TOKENS), self.deadline_s
            )
        except TimeoutError:
            return self._fallback(
                prediction, gold, "judge_timeout", f"no verdict within {self.deadline_s:g} s"
            )
        except Exception as err:  # EngineError and anything else: fall back, never fail the reward
            return self._fallback(prediction, gold, "judge_error", f"{type(err).__name__}: {err}")
        value = parse_verdict(reply)
        if value is None:
            self._count(fallback=True)
            log.warning("LLM judge reply has no number (%r); using token F1", reply[:64])
            return JudgeScore(token_f1(prediction, gold), "f1_fallback", "judge_unparseable", reply[:64])
        return JudgeScore(value, "judge", None, reply[:64])

    def _fallback(self, prediction: str, gold: str, reason: str, detail: str) -> JudgeScore:
        self._count(fallback=True, error=True)
        log.warning("LLM judge failed (%s); using token F1", self._redact(detail))
        return JudgeScore(token_f1(prediction, gold), "f1_fallback", reason)
