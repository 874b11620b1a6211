"""R_acc (docs/method.md §5): normalization, MCQ letters, temporal IoU, token F1; values worked out by hand."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paravt_core.rewards.accuracy import (
    AccuracyResult,
    aaccuracy_reward,
    accuracy_reward,
    answer_span,
    extract_answer_text,
    interval_iou,
    normalize_answer,
    parse_interval,
    parse_mcq_letter,
    question_kind,
    read_mcq_letter,
    statement_letters,
    token_f1,
)
from paravt_core.rewards.judge import Judge, judge_messages
from tests.support.judge_test_server import ScriptedChatServer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The  Red-Circle!", "red circle"),  # lower, "-" and "!" -> spaces, "the" dropped, spaces collapsed
        ("An apple, a day", "apple day"),  # both articles dropped
        ("  2.0, 5.0 ", "2 0 5 0"),  # punctuation becomes spaces (so "2.0,5.0" != "2.0, 5.0" only by spacing)
        ("", ""),
    ],
)
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


def test_extract_answer_text_is_the_last_complete_answer():
    text = "<answer>A</answer> second thoughts <answer> B </answer> <answer>C"  # last one never closed
    assert extract_answer_text(text) == "B"
    assert extract_answer_text("just B") is None


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("<answer>B</answer>", "B"),
        ("<answer>(C)</answer>", "C"),
        ("<answer>D.</answer>", "D"),
        ("<answer>The answer is E.</answer>", "E"),
        ("<answer>answer: (F)</answer>", "F"),
        ("<answer>Option G</answer>", "G"),
        ("<answer>H. the red circle</answer>", "H"),  # lettered option text
        ("<answer>A</answer> wait <answer>J</answer>", "J"),  # the LAST answer counts
        ("<think>\nA looks wrong</think> B", "B"),  # plain answer (no tag), think block ignored
        ("The answer is C", "C"),  # plain eval answer
        ("<answer>A or B</answer>", None),  # hedged
        ("<answer>B/C</answer>", None),  # hedged
        ("<answer>the answer is a red circle</answer>", None),  # the article "a" is not option A
        ("<answer>K</answer>", None),  # outside A-J
        ("<answer>I think it is red</answer>", None),  # the pronoun I is not option I
        # forms lmms-eval and the release both read
        ("<answer>**B**</answer>", "B"),
        ("**B**", "B"),
        ("<answer>B, because the circle turns red</answer>", "B"),
        ("<answer>B - the red circle</answer>", "B"),
        ("The correct option is B.", "B"),
        ("The best option is B.", "B"),
        ("Based on the frames, B is correct.", "B"),
        ("I choose B.", "B"),
        ("<answer>D. Both A and B.</answer>", "D"),  # letters inside the option's text are not a hedge
        ("Ｂ", "B"),  # full-width letter (NFKC)
        # the LAST statement decides
        ("I thought the answer is A, but the answer is B", "B"),
        ("<answer>The answer is C. On reflection the answer is A.</answer>", "A"),
        ("the answer is B or C", None),  # two options named as the answer
        ("It is either A or B", None),
        ("<answer>C) A blue square</answer>", "C"),  # the article of the option's text is not a second letter
        ("<answer>(C) A blue square</answer>", "C"),
        ("The answer is (C) A blue square.", "C"),
        ("<answer>A B.</answer>", None),  # two bare letters
        ("", None),
    ],
)
def test_parse_mcq_letter(text, letter):
    assert parse_mcq_letter(text) == letter


@pytest.mark.parametrize(
    ("text", "interval"),
    [
        ("2, 5", (2.0, 5.0)),
        ("2 - 5", (2.0, 5.0)),
        ("2-5", (2.0, 5.0)),
        ("2 to 5", (2.0, 5.0)),
        ("2–5", (2.0, 5.0)),  # en dash
        ("[2.5, 7.25]", (2.5, 7.25)),
        ("1:05 - 1:10", (65.0, 70.0)),  # m:ss -> 60 + 5, 60 + 10
        ("0:01:05 to 0:01:10", (65.0, 70.0)),  # h:mm:ss
        ("from 2.5s to 5s", (2.5, 5.0)),
        ("The event happens in the 12.3 - 15.8 seconds.", (12.3, 15.8)),  # the forced-answer format
        ("<answer>8, 3</answer>", (3.0, 8.0)),  # reversed -> swapped
        ("I checked 0 - 10 first. <answer>4 - 6</answer>", (4.0, 6.0)),  # answer tag wins
        # plain text: the FIRST interval, as lmms-eval's Charades scorer and the release's driver read it
        ("I checked 0 - 10, then it is 4 - 6", (0.0, 10.0)),
        ("Start time: 24.3 seconds\nEnd time: 30.4 seconds", (24.3, 30.4)),  # two-line form
        ("Start time: 24.3 seconds / End time: 30.4 seconds", (24.3, 30.4)),
        ("The event starts at 0:12 and ends at 0:20.", (12.0, 20.0)),
        ("<answer>1.0 - 2.0 seconds, or maybe 5 - 9</answer>", (1.0, 2.0)),  # first of the final answer
        ("1:75 - 1:80", None),  # seconds >= 60 are not clock times
        ("around seven", None),
        ("7", None),
    ],
)
def test_parse_interval(text, interval):
    assert parse_interval(text) == interval


@pytest.mark.parametrize(
    ("pred", "gold", "iou"),
    [
        ((2.0, 5.0), (2.0, 5.0), 1.0),
        ((3.0, 6.0), (2.0, 5.0), 0.5),  # inter 5-3 = 2; union 3 + 3 - 2 = 4
        ((4.0, 8.0), (2.0, 5.0), 1 / 6),  # inter 5-4 = 1; union 4 + 3 - 1 = 6
        ((6.0, 3.0), (2.0, 5.0), 0.5),  # reversed prediction reordered to (3, 6)
        ((5.0, 5.0), (2.0, 5.0), 0.0),  # degenerate: no length, no overlap
        ((5.0, 5.0), (5.0, 5.0), 0.0),  # both degenerate: union 0 -> 0
        ((8.0, 10.0), (2.0, 5.0), 0.0),  # disjoint
        ((0.0, 10.0), (2.0, 5.0), 0.3),  # inter 3; union 10 + 3 - 3 = 10
    ],
)
def test_interval_iou(pred, gold, iou):
    assert interval_iou(pred, gold) == pytest.approx(iou)


@pytest.mark.parametrize(
    ("pred", "gold", "f1"),
    [
        ("red circle", "a red square", 0.5),  # [red, circle] vs [red, square]: P = R = 1/2
        ("red red circle", "red circle", 0.8),  # common 2: P = 2/3, R = 1 -> 2 * (2/3) / (5/3)
        ("blue", "red", 0.0),
        ("the", "a", 1.0),  # both empty after dropping articles
        ("", "red", 0.0),
    ],
)
def test_token_f1(pred, gold, f1):
    assert token_f1(pred, gold) == pytest.approx(f1)


@pytest.mark.parametrize(
    ("prediction", "gold", "qtype", "mode", "score", "reason"),
    [
        # exact match first (normalized), whatever the type
        ("<answer>The Red Circle.</answer>", "red circle", "oe", "exact", 1.0, None),
        ("<answer>B</answer>", "B", "mcq", "f1", 1.0, None),
        # mcq
        ("<answer>The answer is C</answer>", "B", "mcq", "f1", 0.0, None),
        ("<answer>b</answer>", "B. the blue square", "mcq", "f1", 1.0, None),  # a lone letter, any case
        ("<answer>the b</answer>", "B", "mcq", "f1", 0.0, "unparseable_letter"),  # not a lone letter
        # hedges never reach the exact match: normalized, "A, B" would be "b" (the article rule eats "A")
        ("<answer>A, B</answer>", "B", "mcq", "f1", 0.0, "hedged_letter"),
        ("<answer>A/B</answer>", "B", "mcq", "f1", 0.0, "hedged_letter"),
        ("<answer>A B</answer>", "B", "mcq", "f1", 0.0, "hedged_letter"),
        ("<answer>red ball</answer>", "Red ball.", "mcq", "f1", 1.0, None),  # text gold: exact match
        ("<answer>B</answer>", "B. the blue square", "mcq", "f1", 1.0, None),  # gold letter parsed too
        ("Option D", "D", "mcq", "f1", 1.0, None),  # plain answer without tags
        ("<answer>A or B</answer>", "A", "mcq", "f1", 0.0, "hedged_letter"),
        ("<answer>maybe</answer>", "A", "mcq", "f1", 0.0, "unparseable_letter"),
        ("<answer>B</answer>", "?", "mcq", "f1", 0.0, "bad_gold"),
        # tvg: IoU against the gold pair
        ("<answer>3 - 6</answer>", "2.0, 5.0", "tvg", "f1", 0.5, None),
        ("<answer>2, 5</answer>", "2.0, 5.0", "tvg", "f1", 1.0, None),  # no text match, IoU 1
        ("The event happens in the 2.5 - 5.0 seconds.", "2.0, 5.0", "tvg", "f1", 2.5 / 3, None),
        ("<answer>0:00:02 - 0:00:04</answer>", "2, 5", "tvg", "f1", 2 / 3, None),  # inter 2, union 3
        ("<answer>somewhere early</answer>", "2, 5", "tvg", "f1", 0.0, "unparseable_interval"),
        # open-ended: token F1 / exact / judge
        ("<answer>red circle</answer>", "a red square", "oe", "f1", 0.5, None),
        ("<answer>red circle</answer>", "a red square", "oe", "exact", 0.0, None),
        ("<answer>red circle</answer>", "a red square", "oe", "llm", 0.5, "no_judge"),  # F1 without judge
        ("<answer>red circle</answer>", "a red square", None, "f1", 0.5, None),  # unknown type -> oe
        # empty
        ("<answer> </answer>", "red", "oe", "f1", 0.0, "empty_answer"),
        ("", "B", "mcq", "f1", 0.0, "empty_answer"),
    ],
)
def test_accuracy_reward(prediction, gold, qtype, mode, score, reason):
    result = accuracy_reward(prediction, gold, qtype, mode)
    assert result.score == pytest.approx(score)
    assert result.reason == reason


_PIECES = st.sampled_from(
    ["<answer>", "</answer>", "<think>", "</think>", "B", " or ", "2 - 5", "1:05", "answer is", "\n", "x"]
)
_TEXT = st.one_of(st.text(max_size=200), st.lists(_PIECES, max_size=20).map("".join))


@settings(max_examples=300, deadline=None)
@given(prediction=_TEXT, gold=_TEXT, qtype=st.sampled_from(["mcq", "tvg", "oe", None, "weird"]))
def test_accuracy_stays_in_range_and_never_raises(prediction, gold, qtype):
    for mode in ("f1", "exact", "llm"):
        result = accuracy_reward(prediction, gold, qtype, mode)
        assert 0.0 <= result.score <= 1.0


@settings(max_examples=200, deadline=None)
@given(a=st.floats(allow_nan=True), b=st.floats(), c=st.floats(), d=st.floats())
def test_iou_in_unit_range(a, b, c, d):
    assert 0.0 <= interval_iou((a, b), (c, d)) <= 1.0


def _judge(server: ScriptedChatServer) -> Judge:
    return Judge(server.base_url, "judge-model", api_key="k", timeout_s=5.0, max_retries=0, deadline_s=10.0)


def test_the_judges_verdict_is_kept_whole() -> None:
    """A garbage reply: the judge falls back to token F1 of "red circle" vs "a red square" (1 common token
    of 2 and 2 after normalization: P = R = 1/2, F1 = 0.5) and says why; the reply is kept (first 64 chars).
    A number: the judge's score, no reason, the reply kept."""
    for call in ("sync", "async"):
        for reply, expected in (
            ("they look alike!", AccuracyResult(0.5, "judge_unparseable", "they look alike!", "f1_fallback")),
            ("0.25", AccuracyResult(0.25, None, "0.25", "judge")),
        ):
            with ScriptedChatServer(reply=reply) as server:
                args = ("<answer>red circle</answer>", "a red square", "oe", "llm", _judge(server))
                if call == "sync":
                    got = accuracy_reward(*args, question="What moves?")
                else:
                    got = asyncio.run(aaccuracy_reward(*args, question="What moves?"))
                prompt = server.bodies[0]["messages"][-1]["content"][0]["text"]
            assert got == expected, (call, reply)
            assert prompt == judge_messages("What moves?", "red circle", "a red square")[-1]["content"]


def test_without_a_judge_llm_mode_falls_back_to_token_f1() -> None:
    """No judge given: token F1 (0.5, as above) with reason no_judge, for both entry points."""
    expected = AccuracyResult(0.5, "no_judge", "red circle", "f1_fallback")
    assert accuracy_reward("<answer>red circle</answer>", "a red square", "oe", "llm") == expected
    assert (
        asyncio.run(aaccuracy_reward("<answer>red circle</answer>", "a red square", "oe", "llm")) == expected
    )


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_a_prediction_that_cannot_be_read_scores_zero_with_the_error() -> None:
    expected = AccuracyResult(0.0, "error:RuntimeError")
    assert accuracy_reward(_Unprintable(), "A", "mcq") == expected  # type: ignore[arg-type]
    assert asyncio.run(aaccuracy_reward(_Unprintable(), "A", "mcq")) == expected  # type: ignore[arg-type]


def test_an_unreadable_first_interval_gives_way_to_the_next() -> None:
    """700000 s is beyond parse_time's bound (a week, 604800 s): that pair is skipped, 3-6 is read."""
    assert parse_interval("<answer>700000 to 800000, I mean 3 to 6</answer>") == (3.0, 6.0)


@pytest.mark.parametrize(
    "pred",
    [("x", 1.0), (0.0,), None, (0.0, float("nan")), (float("-inf"), 1.0), (0.0, float("inf"))],
)
def test_interval_iou_of_unusable_intervals_is_zero(pred) -> None:
    assert interval_iou(pred, (0.0, 1.0)) == 0.0
    assert interval_iou((0.0, 1.0), pred) == 0.0


def test_interval_iou_of_sub_second_intervals() -> None:
    # [0.2, 0.6] and [0.4, 0.8]: overlap 0.2 s, union 0.6 s -> 1/3; a union under one second is still a union
    assert interval_iou((0.2, 0.6), (0.4, 0.8)) == pytest.approx(1 / 3)
    assert interval_iou((0.0, 0.5), (0.0, 0.5)) == 1.0
    assert interval_iou((0.3, 0.3), (0.3, 0.3)) == 0.0  # two points: union 0, no overlap to speak of


def test_statement_letters_in_order_of_appearance() -> None:
    """Every committing statement, ordered by where its letter stands: "answer is A" (A), "B is correct"
    (B); markup is dropped first ("**C**") and full-width letters are read after NFKC ("Ｄ" -> "D")."""
    assert statement_letters("I thought the answer is A, but B is correct.") == ["A", "B"]
    assert statement_letters("B is the best. Earlier I said the answer is C") == ["B", "C"]
    assert statement_letters("the answer is **C**") == ["C"]
    assert statement_letters("the answer is Ｄ") == ["D"]
    assert statement_letters("no letter here") == []


@pytest.mark.parametrize(
    ("span", "expected"),
    [
        # a statement, then an alternative: two different letters -> refused
        ("the answer is B or C", (None, "hedged_letter")),
        # the "alternative" is the same letter: one letter, not a hedge (statement and leading-letter paths)
        ("the answer is B or B", ("B", None)),
        ("B or B", ("B", None)),
        # one lower-case letter with trailing dots: the dots go, the lone letter is read
        ("b..", ("B", None)),
        ("b.X", (None, "unparseable_letter")),  # only dots are stripped
        # a trailing letter on its own
        ("so the person holds the cup. B", ("B", None)),
        # a trailing hedge
        ("it is A or B", (None, "hedged_letter")),
        # "option X" without a statement (the weakest reading), and its hedge
        ("I'd say option C fits", ("C", None)),
        ("maybe option C or D fits", (None, "hedged_letter")),
        ("option C or C fits", ("C", None)),  # the same letter twice is no hedge
        # the LAST "option X" is the reading, and only an alternative right after it is a hedge
        ("option A is out, option B or D, option C fits", ("C", None)),
    ],
)
def test_mcq_letter_readings_by_hand(span: str, expected: tuple) -> None:
    assert read_mcq_letter(f"<answer>{span}</answer>") == expected


@pytest.mark.parametrize(
    ("question_type", "kind"),
    [(None, "oe"), ("", "oe"), (" MCQ ", "mcq"), ("tvg", "tvg"), ("open_ended", "oe"), ("OE", "oe")],
)
def test_question_kind(question_type, kind) -> None:
    assert question_kind(question_type) == kind


@pytest.mark.parametrize(
    ("prediction", "gold", "qtype", "mode", "expected"),
    [
        # a letter gold is compared as a letter; the letter is what was compared
        ("<answer>B</answer>", "B", "mcq", "f1", AccuracyResult(1.0, None, "B", "mcq")),
        ("<answer>C</answer>", "B", "mcq", "f1", AccuracyResult(0.0, None, "C", "mcq")),
        # a gold that is no letter: the normalized text must match ("The red square." -> "red square")
        (
            "<answer>The red square.</answer>",
            "red square",
            "mcq",
            "f1",
            AccuracyResult(1.0, None, "red square", "exact"),
        ),
        # ... else a letter answer means the gold is bad, and no letter says why
        ("<answer>B</answer>", "red square", "mcq", "f1", AccuracyResult(0.0, "bad_gold", "B")),
        ("<answer>it is red</answer>", "red square", "mcq", "f1", AccuracyResult(0.0, "unparseable_letter")),
        # grounding: [3, 6] vs [2, 5] overlap 2 of a 4-second union -> IoU 0.5; a gold without a pair is bad
        ("<answer>3 - 6</answer>", "2, 5", "tvg", "f1", AccuracyResult(0.5, None, (3.0, 6.0), "tvg")),
        ("<answer>3 - 6</answer>", "soon", "tvg", "f1", AccuracyResult(0.0, "bad_gold", (3.0, 6.0))),
        # open-ended: exact mode pays only an exact match; f1 mode pays token F1 (1 of 2 tokens each way: 0.5)
        ("<answer>blue</answer>", "red", "oe", "exact", AccuracyResult(0.0, None, "blue", "exact")),
        (
            "<answer>red circle</answer>",
            "a red square",
            "oe",
            "f1",
            AccuracyResult(0.5, None, "red circle", "f1"),
        ),
    ],
)
def test_accuracy_results_whole_by_hand(prediction, gold, qtype, mode, expected) -> None:
    assert accuracy_reward(prediction, gold, qtype, mode) == expected


def test_answer_span_of_a_plain_answer_drops_blocks_and_tags() -> None:
    assert answer_span("<think>hmm</think>red square") == "red square"
    assert answer_span("<tool_call>{}</tool_call> the cup </answer>") == "the cup"


def test_the_judge_gets_an_empty_question_by_default() -> None:
    with ScriptedChatServer(reply="1.0") as server:
        judge = _judge(server)
        accuracy_reward("<answer>red circle</answer>", "a red square", "oe", "llm", judge)
        asyncio.run(aaccuracy_reward("<answer>red circle</answer>", "a red square", "oe", "llm", judge))
        prompts = [body["messages"][-1]["content"][0]["text"] for body in server.bodies]
    assert prompts == [judge_messages("", "red circle", "a red square")[-1]["content"]] * 2
