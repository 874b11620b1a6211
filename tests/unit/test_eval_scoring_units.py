"""``score_sample`` field by field: every ``Score`` it returns compared whole (score, what was compared, the
reason, the source, the error) against values worked out by hand beside each case."""

from __future__ import annotations

import asyncio

import pytest

from paravt_core.eval.benchmarks import Sample
from paravt_core.eval.scoring import Score, prediction_of, score_sample
from paravt_core.rewards.judge import Judge
from tests.support.judge_test_server import ScriptedChatServer

MCQ = Sample("videomme", "q1", question="Q", gold="B", qtype="mcq", letters="ABCD")
# the gold text is not an interval: a grounding sample with gold_interval is scored by the numbers only
TVG = Sample("charades", "q2", question="Q", gold="not an interval", qtype="tvg", gold_interval=(1.0, 4.0))
OE = Sample("mmvu", "q3", question="What colour is the square?", gold="blue", qtype="oe")


def _score(sample: Sample, prediction: str, judge: Judge | None = None) -> Score:
    return asyncio.run(score_sample(sample, prediction, judge))


def _judge(server: ScriptedChatServer) -> Judge:
    return Judge(
        server.base_url, "judge", api_key="k", timeout_s=5, max_retries=0, backoff_s=0.0, deadline_s=10
    )


@pytest.mark.parametrize(
    ("prediction", "expected"),
    [
        ("<answer>B</answer>", Score(1.0, "B", None, "mcq")),
        ("<answer>C</answer>", Score(0.0, "C", None, "mcq")),  # read, compared, wrong: no reason
        ("<answer>E</answer>", Score(0.0, "E", "letter_out_of_range", "mcq")),  # only A-D exist
        ("<answer>A or B</answer>", Score(0.0, None, "hedged_letter", "mcq")),
        ("", Score(0.0, None, "empty_answer", "mcq")),
    ],
)
def test_multiple_choice_scores_whole(prediction: str, expected: Score) -> None:
    assert _score(MCQ, prediction) == expected


def test_multiple_choice_without_an_option_range_compares_any_letter() -> None:
    # letters "" (a row whose options are not known): E is not refused as out of range, just wrong
    sample = Sample("x", "q", gold="B", qtype="mcq")
    assert _score(sample, "<answer>E</answer>") == Score(0.0, "E", None, "mcq")
    assert _score(sample, "<answer>B</answer>") == Score(1.0, "B", None, "mcq")


@pytest.mark.parametrize(
    ("prediction", "expected"),
    [
        # [2, 3] inside the gold [1, 4]: IoU = 1 / 3
        ("<answer>2.0 - 3.0</answer>", Score(1 / 3, [2.0, 3.0], None, "tvg")),
        ("<answer>4 to 1</answer>", Score(1.0, [1.0, 4.0], None, "tvg")),  # reversed: swapped
        ("<answer>  </answer>", Score(0.0, None, "empty_answer", "tvg")),
        ("<think>hmm</think>", Score(0.0, None, "empty_answer", "tvg")),  # reasoning only: no answer
        ("<answer>no idea</answer>", Score(0.0, None, "unparseable_interval", "tvg")),
    ],
)
def test_grounding_with_gold_seconds_scores_whole(prediction: str, expected: Score) -> None:
    assert _score(TVG, prediction) == expected


def test_grounding_without_gold_seconds_reads_the_gold_text_and_lists_the_interval() -> None:
    # no gold_interval: the reward function parses the gold "1.0, 4.0"; its (start, end) tuple becomes a list
    sample = Sample("charades", "q", gold="1.0, 4.0", qtype="tvg")
    assert _score(sample, "<answer>2.0 - 3.0</answer>") == Score(1 / 3, [2.0, 3.0], None, "tvg")


def test_open_ended_without_a_judge_is_token_f1_of_the_normalized_answer() -> None:
    # tokens {dark, blue} vs {blue}: precision 1/2, recall 1 -> F1 = 2/3; parsed: the normalized text
    got = _score(OE, "<answer>Dark blue.</answer>")
    assert got == Score(pytest.approx(2 / 3), "dark blue", None, "f1")


def test_open_ended_with_a_judge_sends_the_question_and_keeps_its_reply() -> None:
    with ScriptedChatServer(reply="0.5") as server:
        got = _score(OE, "<answer>navy</answer>", _judge(server))
        user = server.bodies[0]["messages"][-1]["content"][0]["text"]
    assert got == Score(0.5, "0.5", None, "judge")
    assert "Question: What colour is the square?\n" in user
    assert "Predicted answer: navy\n" in user


def test_multiple_choice_and_grounding_are_not_sent_to_a_judge() -> None:
    with ScriptedChatServer(reply="0.0") as server:
        judge = _judge(server)
        assert _score(MCQ, "<answer>B</answer>", judge) == Score(1.0, "B", None, "mcq")
        plain = Sample("charades", "q", gold="1.0, 4.0", qtype="tvg")
        assert _score(plain, "<answer>1 - 4</answer>", judge) == Score(1.0, [1.0, 4.0], None, "tvg")
        assert server.attempts == 0


@pytest.mark.parametrize(
    ("server_kw", "expected"),
    [
        # the judge is down: no verdict, no score (token F1 would be 0 here, and is not kept)
        ({"status": 503}, Score(None, None, "judge_error", "f1_fallback", "judge_error")),
        # a reply without a number: its text is what was compared
        ({"reply": "maybe"}, Score(None, "maybe", "judge_unparseable", "f1_fallback", "judge_unparseable")),
    ],
)
def test_a_judge_that_cannot_answer_makes_an_error(server_kw: dict, expected: Score) -> None:
    with ScriptedChatServer(**server_kw) as server:
        assert _score(OE, "<answer>navy</answer>", _judge(server)) == expected


def test_prediction_of_is_the_final_reply_or_empty() -> None:
    assert prediction_of(None) == ""
    assert prediction_of("") == ""
    assert prediction_of("<answer>A</answer> then B") == "<answer>A</answer> then B"


def test_the_reward_functions_reason_is_kept_when_they_score_zero_unread() -> None:
    # open-ended: an empty answer is not compared; a grounding sample without gold seconds: no interval read
    assert _score(OE, "<answer></answer>") == Score(0.0, None, "empty_answer", "rule")
    plain = Sample("charades", "q", gold="1.0, 4.0", qtype="tvg")
    assert _score(plain, "<answer>soon</answer>") == Score(0.0, None, "unparseable_interval", "rule")
