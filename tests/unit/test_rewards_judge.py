"""The LLM judge against a real OpenAI-compatible server on loopback that answers, answers garbage,
stalls and fails (tests/support/judge_test_server.py)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from paravt_core.rewards.accuracy import aaccuracy_reward, accuracy_reward
from paravt_core.rewards.judge import Judge, JudgeConfigError, parse_verdict
from tests.support.judge_test_server import ScriptedChatServer

KEY = "sk-test-0123456789abcdef"
QUESTION, PRED, GOLD = "What moves?", "red circle", "a red square"  # token F1 = 0.5 (see F1 tests)


def _judge(server: ScriptedChatServer, **kwargs) -> Judge:
    options = {"timeout_s": 5.0, "max_retries": 0, "backoff_s": 0.01, "deadline_s": 10.0, **kwargs}
    return Judge(server.base_url, "judge-model", api_key=KEY, **options)


@pytest.mark.parametrize(
    ("reply", "value"),
    [
        ("1.0", 1.0),
        ("0.5", 0.5),
        ("0", 0.0),
        ("Score: 0.5 (partly)", 0.5),
        ("7", 1.0),
        ("-2", 0.0),
        ("yes", None),
    ],
)
def test_parse_verdict_first_number_clamped(reply, value):
    assert parse_verdict(reply) == value


@pytest.mark.parametrize(("reply", "score"), [("1.0", 1.0), ("0.5", 0.5), ("0.0", 0.0), ("3", 1.0)])
def test_judge_answers(reply, score):
    with ScriptedChatServer(reply=reply) as server:
        judge = _judge(server)
        verdict = judge.score(QUESTION, PRED, GOLD)
        assert (verdict.score, verdict.source, verdict.reason) == (score, "judge", None)
        body = server.bodies[0]
        assert body["model"] == "judge-model" and body["temperature"] == 0.0 and body["max_tokens"] == 8
        prompt = body["messages"][-1]["content"][0]["text"]
        assert QUESTION in prompt and PRED in prompt and GOLD in prompt
        assert server.auth_headers[0] == f"Bearer {KEY}"
        assert judge.counters() == {"judge_calls": 1, "judge_fallbacks": 0, "judge_errors": 0}


def test_garbage_reply_falls_back_to_f1():
    with ScriptedChatServer(reply="they look alike!") as server:
        judge = _judge(server)
        verdict = judge.score(QUESTION, PRED, GOLD)
    assert (verdict.score, verdict.source, verdict.reason) == (0.5, "f1_fallback", "judge_unparseable")
    assert judge.counters() == {"judge_calls": 1, "judge_fallbacks": 1, "judge_errors": 0}


def test_stalling_server_hits_the_deadline_and_falls_back():
    with ScriptedChatServer(reply="1.0", delay_s=3.0) as server:
        judge = _judge(server, deadline_s=0.3)
        verdict = asyncio.run(judge.ascore(QUESTION, PRED, GOLD))
    assert (verdict.score, verdict.source, verdict.reason) == (0.5, "f1_fallback", "judge_timeout")
    assert judge.counters() == {"judge_calls": 1, "judge_fallbacks": 1, "judge_errors": 1}


def test_per_attempt_timeout_is_retried_then_falls_back():
    with ScriptedChatServer(reply="1.0", delay_s=2.0) as server:
        judge = _judge(server, timeout_s=0.2, max_retries=1)
        verdict = judge.score(QUESTION, PRED, GOLD)
        assert server.attempts == 2  # first try + one retry
    assert (verdict.score, verdict.reason) == (0.5, "judge_error")


def test_failing_server_is_retried_then_falls_back_without_leaking_the_key(caplog):
    with ScriptedChatServer(status=503) as server, caplog.at_level(logging.WARNING):
        judge = _judge(server, max_retries=2)
        verdict = judge.score(QUESTION, PRED, GOLD)
        assert server.attempts == 3  # 1 + 2 retries of a 503
    assert (verdict.score, verdict.reason) == (0.5, "judge_error")
    assert "HTTP 503" in caplog.text  # the failure is logged ...
    assert KEY not in caplog.text  # ... but the key the server echoed back is not
    assert KEY not in repr(judge) and KEY not in str(verdict)
    assert judge.counters() == {"judge_calls": 1, "judge_fallbacks": 1, "judge_errors": 1}


def test_llm_mode_routes_open_ended_answers_through_the_judge():
    with ScriptedChatServer(reply="1.0") as server:
        judge = _judge(server)
        sync = accuracy_reward(f"<answer>{PRED}</answer>", GOLD, "oe", "llm", judge, question=QUESTION)
        async_ = asyncio.run(aaccuracy_reward(f"<answer>{PRED}</answer>", GOLD, "oe", "llm", judge))
        # MCQ and grounding never reach the judge
        mcq = accuracy_reward("<answer>B</answer>", "B", "mcq", "llm", judge)
        assert server.attempts == 2
    assert (sync.score, sync.source) == (1.0, "judge")
    assert (async_.score, async_.source) == (1.0, "judge")
    assert mcq.score == 1.0


def test_from_env(monkeypatch):
    monkeypatch.delenv("LLM_JUDGE_BASE_URL", raising=False)
    with pytest.raises(JudgeConfigError, match="LLM_JUDGE_BASE_URL"):
        Judge.from_env()
    monkeypatch.setenv("LLM_JUDGE_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("LLM_JUDGE_API_KEY", KEY)
    monkeypatch.delenv("LLM_JUDGE_MODEL", raising=False)
    judge = Judge.from_env()
    assert judge.model == "gpt-4o-mini" and KEY not in repr(judge)
