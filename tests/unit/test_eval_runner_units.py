"""The runner's records, retries and concurrency, field by field: scripted main agents per question on the real
tiny model's tokenizer (tests/support/eval_support.KeyedEngine), the real episode loop. Expected values by hand."""

from __future__ import annotations

import asyncio
import random

import pytest

from paravt_core.agent.config import AgentConfig
from paravt_core.engines.base import EngineError, EngineRefused
from paravt_core.engines.scripted import Reply
from paravt_core.eval import benchmarks as B
from paravt_core.eval.records import SampleLog
from paravt_core.eval.runner import RunOptions, run_one, run_samples
from tests.support.eval_support import TINY_AGENT, KeyedEngine, fixture_entry

BASE = AgentConfig.model_validate({**TINY_AGENT, "max_new_tokens": 512})  # scripted replies fit


@pytest.fixture(scope="module")
def video(eval_fixtures) -> str:
    return fixture_entry(eval_fixtures, "videomme")["media_root"] + "/data/fxSynthA001.mp4"


def _mcq(key: str, video: str, **kw) -> B.Sample:
    return B.Sample("videomme", key, video=video, question=f"[{key}] Which shape?", gold="B", letters="ABCD",
                    meta={"duration": "short"}, **kw)  # fmt: skip


class Sleeps:
    """The runner's ``sleep``: records each backoff delay instead of waiting."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def _run(sample, engine, opts, protocol="agentic", bench="videomme", sleep=None, judge=None):
    return asyncio.run(
        run_one(sample, protocol, B.get(bench), engine, BASE, opts, sleep=sleep or Sleeps(), judge=judge)
    )


def _four_decimals(x: float) -> bool:
    return isinstance(x, float) and x >= 0.0 and round(x, 4) == x


def test_a_scored_record_whole(tiny_model, video):
    engine = KeyedEngine(tiny_model.processor, {"[ok]": ["<answer>B</answer>"]})
    rec = _run(_mcq("ok", video), engine, RunOptions(retries=0))
    timings = {k: rec.pop(k) for k in ("latency_s", "wall_s")}
    assert all(_four_decimals(v) for v in timings.values())
    assert rec == {
        "id": "ok",
        "benchmark": "videomme",
        "protocol": "agentic",
        "question": "[ok] Which shape?",
        "gold": "B",
        "qtype": "mcq",
        "letters": "ABCD",
        "status": "ok",
        "prediction": "B",
        "score": 1.0,
        "score_source": "mcq",
        "score_reason": None,
        "error": None,
        "meta": {"duration": "short"},
        "answer": "B",
        "final_text": "<answer>B</answer>",
        "finish_reason": "answer",
        "tool_calls": 0,
        "tool_calls_total": 0,
        "tool_calls_malformed": 0,
        "tool_calls_dropped": 0,
        "tool_rounds": 0,
        "turns": 1,
        "frames": 4,  # TINY_AGENT's overview frames
        "attempts": 1,
        "release_score": 1.0,
        "release_prediction": "B",
    }
    assert list(rec)[:7] == ["id", "benchmark", "protocol", "question", "gold", "qtype", "letters"]


def test_a_grounding_record_carries_its_gold_interval_and_no_letters(tiny_model, video):
    sample = B.Sample("charades", "g", video=video, question="[g] When?", gold="1.0, 3.0", qtype="tvg",
                      gold_interval=(1.0, 3.0))  # fmt: skip
    engine = KeyedEngine(tiny_model.processor, {"[g]": ["<answer>1.0 - 2.0</answer>"]})
    rec = _run(sample, engine, RunOptions(retries=0), bench="charades")
    assert "letters" not in rec
    assert (rec["gold_interval"], rec["prediction"], rec["score"]) == ([1.0, 3.0], [1.0, 2.0], 0.5)


def test_direct_records_the_direct_question(tiny_model, video):
    sample = _mcq("d", video, direct_question="[d] Which shape? (direct)")
    engine = KeyedEngine(tiny_model.processor, {"[d]": ["B"]})
    rec = _run(sample, engine, RunOptions(retries=0), protocol="direct")
    assert (rec["protocol"], rec["question"], rec["score"]) == ("direct", "[d] Which shape? (direct)", 1.0)
    assert "(direct)" in engine.prompts["[d]"][0]


def test_backoff_doubles_from_backoff_s_with_jitter_and_is_capped(tiny_model, video):
    errors = [EngineError("HTTP 503")] * 4
    engine = KeyedEngine(tiny_model.processor, {"[re]": [*errors, "<answer>B</answer>"]})
    sleeps = Sleeps()
    random.seed(7)
    jitter = [0.5 + r / 2 for r in (lambda g: [g.random() for _ in range(4)])(random.Random(7))]
    rec = _run(
        _mcq("re", video), engine, RunOptions(retries=4, backoff_s=1.0, max_backoff_s=3.0), sleep=sleeps
    )
    assert (rec["status"], rec["score"], rec["attempts"]) == ("ok", 1.0, 5)
    # 1, 2, 4 -> 3 (the cap), 8 -> 3; each times a jitter factor in [0.5, 1)
    assert sleeps.delays == pytest.approx([b * j for b, j in zip((1.0, 2.0, 3.0, 3.0), jitter, strict=True)])
    assert [lo * 0.5 <= d <= lo for lo, d in zip((1.0, 2.0, 3.0, 3.0), sleeps.delays, strict=True)] == [
        True
    ] * 4


def test_retries_end_in_an_error_record_with_every_attempt_counted(tiny_model, video):
    engine = KeyedEngine(tiny_model.processor, {"[down]": [EngineError("HTTP 503")]})
    sleeps = Sleeps()
    rec = _run(
        _mcq("down", video), engine, RunOptions(retries=2, backoff_s=0.5, max_backoff_s=30.0), sleep=sleeps
    )
    assert (rec["status"], rec["score"], rec["attempts"], len(sleeps.delays)) == ("error", None, 3, 2)
    assert rec["error"] == {"reason": "engine_error", "message": "EngineError: HTTP 503"}
    assert engine.seen.count("[down]") == 3
    assert (rec["meta"], rec["finish_reason"], rec["turns"]) == (
        {"duration": "short"},
        "engine_error",
        0,
    )  # no turn came back


def test_a_refused_request_is_an_error_at_once(tiny_model, video):
    engine = KeyedEngine(tiny_model.processor, {"[no]": [EngineRefused("HTTP 400: too long")]})
    sleeps = Sleeps()
    rec = _run(_mcq("no", video), engine, RunOptions(retries=3), sleep=sleeps)
    assert (rec["status"], rec["error"]["reason"], rec["attempts"], sleeps.delays) == (
        "error", "engine_refused", 1, [])  # fmt: skip
    assert rec["error"]["message"] == "HTTP 400: too long"
    assert "release_score" not in rec and "score_source" not in rec


def test_an_unexpected_failure_is_an_internal_error_record(tiny_model, video):
    engine = KeyedEngine(tiny_model.processor, {})
    rec = _run(_mcq("x", video), engine, RunOptions(), protocol="bogus")
    assert rec == {
        "id": "x",
        "benchmark": "videomme",
        "protocol": "bogus",
        "question": "[x] Which shape?",
        "gold": "B",
        "qtype": "mcq",
        "letters": "ABCD",
        "status": "error",
        "score": None,
        "error": {
            "reason": "internal_error",
            "message": "ValueError: unknown protocol 'bogus'; known: agentic, direct, reasoning",
        },
        "meta": {"duration": "short"},
    }
    assert engine.generate_calls == 0


def test_a_row_error_keeps_its_own_reason_and_runs_nothing(tiny_model):
    engine = KeyedEngine(tiny_model.processor, {})
    sample = B.Sample("videomme", "r", error="video not found: x.mp4", error_reason="video_not_found",
                      meta={"duration": "long"})  # fmt: skip
    rec = _run(sample, engine, RunOptions())
    assert (rec["status"], rec["score"], rec["attempts"], rec["meta"]) == (
        "error",
        None,
        0,
        {"duration": "long"},
    )
    assert rec["error"] == {"reason": "video_not_found", "message": "video not found: x.mp4"}
    assert engine.generate_calls == 0


def test_a_judge_error_keeps_the_episode_and_says_so(tiny_model, video):
    from paravt_core.rewards.judge import Judge
    from tests.support.judge_test_server import ScriptedChatServer

    sample = B.Sample("mmvu", "oe", video=video, question="[oe] Colour?", gold="blue", qtype="oe")
    engine = KeyedEngine(tiny_model.processor, {"[oe]": ["<answer>navy</answer>"]})
    with ScriptedChatServer(status=503) as server:
        judge = Judge(server.base_url, "judge", timeout_s=5, max_retries=0, backoff_s=0.0, deadline_s=10)
        rec = _run(sample, engine, RunOptions(retries=0), bench="mmvu", judge=judge)
    assert rec["error"] == {"reason": "judge_error", "message": "the judge could not score this answer"}
    assert (rec["attempts"], rec["final_text"], rec["release_score"]) == (1, "<answer>navy</answer>", 0.0)


class Overlap(KeyedEngine):
    """Counts the main generations in flight at once."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.now = self.most = 0

    async def generate(self, requests):
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            return await super().generate(requests)
        finally:
            self.now -= 1


def test_run_samples_honours_its_concurrency_or_a_shared_gate_and_reports_each_record(
    tiny_model, video, tmp_path
):
    script = {f"[c{i}]": [Reply("<answer>B</answer>", delay_s=0.05)] for i in range(4)}
    samples = [_mcq(f"c{i}", video) for i in range(4)]
    bench = B.get("videomme")
    for name, opts, gate, most in (
        ("two", RunOptions(concurrency=2), None, 2),
        ("gated", RunOptions(concurrency=4), asyncio.Semaphore(1), 1),
    ):
        engine = Overlap(tiny_model.processor, script)
        seen: list[dict] = []
        with SampleLog(tmp_path / f"{name}.jsonl") as log:
            ran = asyncio.run(
                run_samples(
                    samples,
                    "agentic",
                    bench,
                    engine,
                    BASE,
                    log,
                    opts,
                    on_done=seen.append,
                    gate=gate,
                )  # fmt: skip
            )
            assert sorted(r["id"] for r in log.records) == ["c0", "c1", "c2", "c3"]
        assert (ran, sorted(r["id"] for r in seen), engine.most) == (4, ["c0", "c1", "c2", "c3"], most)


class Unprocessed(KeyedEngine):
    """An engine without a processor of its own (as the openai kind's): the stage passes the model's."""

    def __init__(self, processor, script) -> None:
        super().__init__(processor, script)
        self.tokenizer, self.processor = processor.tokenizer, None

    def _key(self, request):
        text = self.tokenizer.decode(request.input_ids, skip_special_tokens=False)
        return next((k for k in self.script if k in text), None)


def test_the_processor_given_to_run_one_encodes_the_episode(tiny_model, video):
    engine = Unprocessed(tiny_model.processor, {"[p]": ["<answer>B</answer>"]})
    rec = asyncio.run(
        run_one(
            _mcq("p", video),
            "agentic",
            B.get("videomme"),
            engine,
            BASE,
            RunOptions(retries=0),
            processor=tiny_model.processor,
        )  # fmt: skip
    )
    assert (rec["status"], rec["score"], rec["frames"]) == ("ok", 1.0, 4)
