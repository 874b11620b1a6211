"""R_fmt, R_tool, compose and the degenerate guard (docs/method.md §5); every expected value worked out by hand.

PARA-GRPO: answer_suffix on (base 0.2 / 0.3 / 0.2), lambda_anchor 0.5 (anchor terms 0.2 / 0.15 / -0.15).
Vanilla: answer_suffix off (base 0.3 / 0.2 / 0.1), lambda_anchor 0. Then +0.3 think before the first tool
call, +0.1 balanced when the score so far is > 0, clip at 1.0 from above.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paravt_core.agent.episode import CallRecord
from paravt_core.config import ParavtRecipe
from paravt_core.rewards.compose import acompose, compose, is_degenerate
from paravt_core.rewards.format import format_reward
from paravt_core.rewards.judge import Judge, judge_messages
from paravt_core.rewards.tool import tool_reward
from tests.support.judge_test_server import ScriptedChatServer

THINK = "<think>\nI look at the frames."  # forced prefix + 21 characters of reasoning (>= 10)
CALL = '<tool_call>\n{"name": "crop_video", "arguments": {"start_time": 2, "end_time": 5}}\n</tool_call>'

PARA = {"answer_suffix": True, "anchor_weight": 0.5}
VANILLA = {"answer_suffix": False, "anchor_weight": 0.0}

FORMAT_CASES = [
    # (id, text, PARA-GRPO score, vanilla score)
    # full flow: .2+.3+.2 + .2+.15 + .1 = 1.15 -> 1.0 | .3+.2+.1 + .1 = 0.7
    ("full_flow", THINK + "</think><answer>B</answer>", 1.0, 0.7),
    # think never closed, its 21-character body runs until <answer> so it is present (docs/method.md §5):
    # .2+.3+.2 + 0+0-.15, unbalanced = 0.55 | .3+.2+.1 = 0.6 (closing it pays more: 1.0 | 0.7, full_flow)
    ("think_unclosed", THINK + "<answer>B</answer>", 0.55, 0.6),
    # open think of 2 characters before <answer>: 0+.3+.2 - .15 = 0.35 | 0+.2+.1 = 0.3
    ("think_unclosed_short", "<think>\nok<answer>B</answer>", 0.35, 0.3),
    # open think running until a tool call: present (.2), no think-before-tool (needs </think>):
    # .2 - .15 = 0.05 | .3
    ("think_unclosed_then_call", THINK + CALL, 0.05, 0.3),
    # open think of 2 characters: its body stops at <tool_call> (the call's JSON is not think text):
    # 0 - .15 = -0.15 | 0
    ("think_unclosed_short_then_call", "<think>\nok" + CALL, -0.15, 0.0),
    # the body of an open think also stops at <|im_end|>: "ok" -> 0 - .15 = -0.15 | 0
    ("think_unclosed_until_im_end", "<think>\nok<|im_end|>0123456789", -0.15, 0.0),
    # think of 2 chars: 0+.3+.2 + .2+.15 + .1 = 0.95 | 0+.2+.1+.1 = 0.4
    ("think_too_short", "<think>\nok</think><answer>B</answer>", 0.95, 0.4),
    # empty answer body: .2+0+.2 + .2+0 + .1 = 0.7 | .3+0+.1+.1 = 0.5
    ("answer_empty", THINK + "</think><answer>  </answer>", 0.7, 0.5),
    # </answer> missing: .2+.3+0 + .2+0, unbalanced = 0.7 | .3+.2+0 = 0.5
    ("answer_unclosed", THINK + "</think><answer>B", 0.7, 0.5),
    # think, then a call (no answer yet): .2 + .2 + .3 + .1 = 0.8 | .3 + .3 + .1 = 0.7
    ("think_then_call", THINK + "</think>\n" + CALL, 0.8, 0.7),
    # call first, think after: .2 + .2 + 0 + .1 = 0.5 | .3 + 0 + .1 = 0.4
    ("call_then_think", CALL + THINK + "</think>", 0.5, 0.4),
    # two turns, think before the call, then the answer: 1.45 -> 1.0 | .3+.2+.1+.3+.1 = 1.0
    (
        "two_turns",
        THINK + "</think>\n" + CALL + "\n<think>\nthe report says red</think><answer>A</answer>",
        1.0,
        1.0,
    ),
    # stray </think>: 0+.3+.2 + .2+.15, unbalanced = 0.85 | 0+.2+.1 = 0.3
    ("unbalanced_close", "<think>\nok</think></think><answer>B</answer>", 0.85, 0.3),
    # a think reopened inside a think (the first, open, body "abc" stops at the second <think>):
    # .2+.3+.2 + .2+.15-.15, unbalanced = 0.9 | .3+.2+.1 = 0.6
    ("nested_think", "<think>\nabc " + THINK + "</think><answer>B</answer>", 0.9, 0.6),
    # generation cut inside the think (15-character body, open until the end): .2 - .15 = 0.05,
    # unbalanced | .3
    ("cut_in_think", "<think>\nhmm, the circle", 0.05, 0.3),
    # cut inside a short think: 0 - .15 = -0.15 (negative, no balance bonus) | 0
    ("cut_in_short_think", "<think>\nhmm", -0.15, 0.0),
    # nothing: 0 | 0
    ("empty", "", 0.0, 0.0),
    # plain answer without any tag: 0 | 0
    ("no_tags", "B", 0.0, 0.0),
]


@pytest.mark.parametrize(("name", "text", "para", "vanilla"), FORMAT_CASES, ids=[c[0] for c in FORMAT_CASES])
def test_format_reward_by_hand(name, text, para, vanilla):
    assert format_reward(text, **PARA).score == pytest.approx(para)
    assert format_reward(text, **VANILLA).score == pytest.approx(vanilla)


def test_parts_are_reported_one_by_one():
    parts = format_reward(THINK + "</think>\n" + CALL, **PARA).parts
    assert parts == pytest.approx(
        {
            "think": 0.2,
            "answer": 0.0,
            "answer_closed": 0.0,
            "anchor_close": 0.2,  # 0.5 x 0.4
            "anchor_flow": 0.0,
            "anchor_unclosed": 0.0,
            "think_before_tool": 0.3,
            "balanced": 0.1,
        }
    )


@pytest.mark.parametrize("recipe", [PARA, VANILLA], ids=["para_grpo", "vanilla"])
@pytest.mark.parametrize(
    "body",
    [
        "I look at the frames.{close}<answer>B</answer>",
        "I look at the frames.{close}\n" + CALL,
        "ok{close}<answer>B</answer>",
    ],
)
def test_closing_think_scores_higher_than_leaving_it_open(recipe, body):
    """The release's format reward paid for leaving </think> open; ours must prefer closing it."""
    closed = format_reward("<think>\n" + body.replace("{close}", "</think>"), **recipe).score
    opened = format_reward("<think>\n" + body.replace("{close}", ""), **recipe).score
    assert closed > opened


@dataclass
class Call:
    parsed: bool = True
    executed: bool = True
    ok: bool = True


@pytest.mark.parametrize(
    ("calls", "acc", "score", "level"),
    [
        ([], 1.0, 0.0, 0.0),  # no call: 0 even with a right answer
        ([Call(parsed=False, executed=False, ok=False)], 1.0, 0.0, 0.0),  # garbage block: no level, no bonus
        ([Call(executed=False, ok=False)], 0.0, 0.1, 0.1),  # parsed, rejected (e.g. over max_parallel)
        ([Call(ok=False)], 0.0, 0.1, 0.1),  # executed but failed (bad window)
        ([Call(ok=False)], 1.0, 0.6, 0.1),  # 0.1 + 0.5
        ([Call()], 0.0, 0.3, 0.3),  # one success: the 0.3 level the release could not reach
        ([Call(ok=False), Call()], 0.4, 0.8, 0.3),  # 0.3 + 0.5 (any R_acc > 0)
    ],
)
def test_tool_reward_levels(calls, acc, score, level):
    result = tool_reward(calls, acc)
    assert result.score == pytest.approx(score)
    assert result.level == pytest.approx(level)


def test_tool_reward_reads_real_call_records():
    ok = CallRecord(turn=0, index=0, form="tool_call", raw="{}", parsed=True, executed=True, ok=True)
    rejected = CallRecord(turn=0, index=1, form="tool_call", raw="{}", parsed=True, error="too many calls")
    assert tool_reward([rejected], 0.0).score == pytest.approx(0.1)
    assert tool_reward([rejected, ok], 1.0).score == pytest.approx(0.8)  # 0.3 + 0.5


TWO_TURNS = THINK + "</think>\n" + CALL + "\n<think>\nthe report says red</think><answer>A</answer>"


@pytest.mark.parametrize(
    ("text", "calls", "gold", "qtype", "recipe", "total", "acc", "fmt", "tool"),
    [
        # 1 + 1.0 x 1.0 + (0.3 + 0.5) = 2.8
        (TWO_TURNS, [Call()], "A", "mcq", ParavtRecipe.para_grpo(), 2.8, 1.0, 1.0, 0.8),
        # format_weight 0.5: 1 + 0.5 x 1.0 + 0.8 = 2.3
        (
            TWO_TURNS,
            [Call()],
            "A",
            "mcq",
            ParavtRecipe.para_grpo(reward={"format_weight": 0.5}),
            2.3,
            1.0,
            1.0,
            0.8,
        ),
        # wrong letter: 0 + 1.0 + 0.3 = 1.3
        (TWO_TURNS, [Call()], "B", "mcq", ParavtRecipe.vanilla_grpo(), 1.3, 0.0, 1.0, 0.3),
        # no <answer>: R_acc 0 (no_answer); R_fmt .2 + .2 + .1 = 0.5; no call -> 0.5
        (THINK + "</think>", [], "B", "mcq", ParavtRecipe.para_grpo(), 0.5, 0.0, 0.5, 0.0),
        # tvg IoU 0.5 (3-6 vs 2-5) + vanilla full flow 0.7 + 0 = 1.2
        (
            THINK + "</think><answer>3 - 6</answer>",
            [],
            "2, 5",
            "tvg",
            ParavtRecipe.vanilla_grpo(),
            1.2,
            0.5,
            0.7,
            0.0,
        ),
    ],
)
def test_compose_by_hand(text, calls, gold, qtype, recipe, total, acc, fmt, tool):
    out = compose(text, calls, gold, qtype, recipe)
    assert (out.total, out.accuracy, out.format, out.tool) == pytest.approx((total, acc, fmt, tool))


def test_compose_reason_when_no_answer_tag():
    out = compose(THINK + "</think> B", [], "B", "mcq", ParavtRecipe.para_grpo())
    assert out.accuracy == 0.0 and out.reason == "no_answer"  # RL reads the <answer> tag only


def test_degenerate_guard_zeroes_the_total():
    spam = "<|im_start|>assistant\n" * 5 + "<think>\nI look at the frames.</think><answer>A</answer>"
    assert len(spam) < 300  # 5 x 23 + 54 = 169 characters
    out = compose(spam, [Call()], "A", "mcq", ParavtRecipe.para_grpo())
    assert out.degenerate and out.total == 0.0
    assert out.accuracy == 1.0  # the parts stay visible for the metrics
    # four markers are not degenerate: 1 + 1.0 + 0.8
    ok = compose(spam.replace("<|im_start|>", "", 1), [Call()], "A", "mcq", ParavtRecipe.para_grpo())
    assert not ok.degenerate and ok.total == pytest.approx(2.8)


def test_acompose_matches_compose():
    import asyncio

    recipe = ParavtRecipe.para_grpo()
    sync = compose(TWO_TURNS, [Call()], "A", "mcq", recipe)
    assert asyncio.run(acompose(TWO_TURNS, [Call()], "A", "mcq", recipe)) == sync


_PIECES = st.sampled_from(
    [
        "<think>",
        "</think>",
        "<answer>",
        "</answer>",
        "<tool_call>",
        "</tool_call>",
        "<|im_start|>",
        "B",
        "\n",
        "thinking hard",
    ]
)
_TEXT = st.one_of(st.text(max_size=300), st.lists(_PIECES, max_size=30).map("".join))


@settings(max_examples=300, deadline=None)
@given(
    text=_TEXT,
    calls=st.lists(st.builds(Call, st.booleans(), st.booleans(), st.booleans()), max_size=4),
    acc=st.floats(0.0, 1.0),
    suffix=st.booleans(),
    anchor=st.floats(0.0, 1.0),
)
def test_rewards_stay_in_documented_ranges(text, calls, acc, suffix, anchor):
    fmt = format_reward(text, answer_suffix=suffix, anchor_weight=anchor).score
    assert -0.3 * anchor - 1e-9 <= fmt <= 1.0
    assert 0.0 <= tool_reward(calls, acc).score <= 1.0
    out = compose(text, calls, "B", "mcq", ParavtRecipe.para_grpo())
    # R_acc <= 1, R_fmt <= 1, R_tool <= 0.8: total <= 2.8; lowest is R_fmt's -0.15
    assert -0.15 - 1e-9 <= out.total <= 2.8 + 1e-9
    assert out.failure is None


class _Bare:
    """A call record without the attributes: getattr's defaults decide."""


def test_tool_reward_reads_missing_attributes_as_false() -> None:
    from paravt_core.rewards.tool import tool_reward

    result = tool_reward([_Bare(), _Bare()], 1.0)
    assert (result.score, result.level, result.calls, result.succeeded) == (0.0, 0.0, 2, 0)


class _OnlyOk:
    parsed, ok = True, True  # no `executed`: not a success


class _OnlyExecuted:
    parsed, executed = True, True  # no `ok`: not a success


def test_tool_reward_needs_both_executed_and_ok_and_never_raises() -> None:
    from paravt_core.rewards.tool import ToolResult, tool_reward

    # parsed but not succeeded: level 0.1, + 0.5 for R_acc > 0
    assert tool_reward([_OnlyOk()], 1.0) == ToolResult(0.6, 0.1, 1, 0)
    assert tool_reward([_OnlyExecuted()], 1.0) == ToolResult(0.6, 0.1, 1, 0)
    assert tool_reward(None, 1.0) == ToolResult(0.0, 0.0, 0, 0)  # type: ignore[arg-type]  # len(None) fails


def test_format_reward_never_raises_and_marks_the_error() -> None:
    from paravt_core.rewards.format import FormatResult, format_reward

    assert format_reward(_Unprintable(), answer_suffix=True, anchor_weight=0.5) == FormatResult(
        0.0, {"error": 0.0}
    )


def test_the_legacy_tool_code_form_is_a_tool_call_for_the_format_reward() -> None:
    from paravt_core.rewards.format import format_reward

    text = "<think>\nI look at the frames.</think><tool_code>crop_video(start_time=1, end_time=3)</tool_code>"
    assert format_reward(text, answer_suffix=True, anchor_weight=0.5).parts["think_before_tool"] == 0.3


@pytest.mark.parametrize(
    "text",
    [
        "<think>\nab <think>\nI look at the frames.</think><answer>B</answer>",  # think reopened
        "<think>\nI look at the frames.</think></think><answer>B</answer>",  # stray closing tag
        "<think>\nI look at the frames.</think><answer>B</answer><tool_call>",  # a tag never closed
    ],
)
def test_an_unbalanced_text_with_the_flow_is_not_compliant(text: str) -> None:
    from paravt_core.rewards.format import format_reward

    result = format_reward(text, answer_suffix=True, anchor_weight=0.5)
    assert result.parts["anchor_flow"] == pytest.approx(0.15) and result.compliant is False


COMPOSE_THINK = "<think>\nI look at the frames."


COMPOSE_CALL = (
    '<tool_call>\n{"name": "crop_video", "arguments": {"start_time": 2, "end_time": 5}}\n</tool_call>'
)


# think -> call -> think -> answer "A" (the trace of tests/unit/test_rewards_format.py::TWO_TURNS)
COMPOSE_TWO_TURNS = (
    COMPOSE_THINK + "</think>\n" + COMPOSE_CALL + "\n<think>\nthe report says red</think><answer>A</answer>"
)


@dataclass(frozen=True)
class _Call:
    parsed: bool = True
    executed: bool = True
    ok: bool = True


def test_compose_keeps_every_part_in_its_breakdown() -> None:
    """PARA-GRPO, format_weight 0.5, gold A, one call that ran: R_acc 1 (letter A); R_fmt parts (docs/method.md §5,
    answer suffix on, anchor weight 0.5): think .2, answer .3, answer closed .2, anchor close .2 (0.4 x
    0.5), anchor flow .15 (0.3 x 0.5), no open think 0, think before the tool .3, balanced .1 = 1.45 ->
    clipped 1.0; R_tool level .3 + .5 (correct) = 0.8. Total 1 + 0.5 x 1.0 + 0.8 = 2.3."""
    recipe = ParavtRecipe.para_grpo(reward={"format_weight": 0.5})
    out = compose(COMPOSE_TWO_TURNS, [_Call()], "A", "mcq", recipe)
    parts = {
        "think": 0.2,
        "answer": 0.3,
        "answer_closed": 0.2,
        "anchor_close": 0.2,
        "anchor_flow": 0.15,
        "anchor_unclosed": 0.0,
        "think_before_tool": 0.3,
        "balanced": 0.1,
    }
    assert out.format_weight == 0.5 and out.parsed == "A"
    got = out.to_dict()
    assert got.pop("format_parts") == pytest.approx(parts)
    assert got == pytest.approx(
        {
            "total": 2.3,
            "accuracy": 1.0,
            "format": 1.0,
            "tool": 0.8,
            "tool_level": 0.3,
            "compliant": True,
            "degenerate": False,
            "reason": None,
            "failure": None,
        }
    )
    assert asyncio.run(acompose(COMPOSE_TWO_TURNS, [_Call()], "A", "mcq", recipe)).to_dict() == out.to_dict()


def test_a_reward_that_cannot_be_computed_is_zero_with_its_reason() -> None:
    """No recipe (None): reading its reward settings raises AttributeError inside compose / acompose; the
    sample scores 0 in every part and says why."""
    zero = {
        "total": 0.0,
        "accuracy": 0.0,
        "format": 0.0,
        "tool": 0.0,
        "format_parts": {},
        "tool_level": 0.0,
        "compliant": False,
        "degenerate": False,
        "reason": None,
        "failure": "reward_error:AttributeError",
    }
    assert compose(COMPOSE_TWO_TURNS, [], "A", "mcq", None).to_dict() == zero  # type: ignore[arg-type]
    assert asyncio.run(acompose(COMPOSE_TWO_TURNS, [], "A", "mcq", None)).to_dict() == zero  # type: ignore[arg-type]


def test_acompose_without_an_answer_tag_scores_no_answer() -> None:
    """No <answer>: R_acc 0 with reason no_answer; R_fmt .2 (think) + .2 (anchor close) + .1 (balanced) = 0.5
    (PARA-GRPO), no call -> total 0.5, the same as compose."""
    recipe = ParavtRecipe.para_grpo()
    text = COMPOSE_THINK + "</think> A"
    out = asyncio.run(acompose(text, [], "A", "mcq", recipe))
    assert (out.accuracy, out.reason, out.parsed, out.total) == (0.0, "no_answer", None, pytest.approx(0.5))
    assert out.to_dict() == compose(text, [], "A", "mcq", recipe).to_dict()


def test_the_degenerate_guard_reads_its_thresholds_from_the_recipe() -> None:
    """Guard at >= 2 markers in fewer than 100 characters: two markers in 2 x 22 + 35 = 79 characters trip
    it; the same two markers padded to 169 characters do not (the defaults, 5 and 300, would say the
    opposite for both)."""
    recipe = ParavtRecipe.para_grpo(reward={"degenerate_im_starts": 2, "degenerate_max_chars": 100})
    short = "<|im_start|>assistant\n" * 2 + "<think>ab</think><answer>A</answer>"
    assert len(short) == 79
    assert compose(short, [], "A", "mcq", recipe).degenerate
    padded = short + "x" * (169 - len(short))
    out = compose(padded, [], "A", "mcq", recipe)
    assert not out.degenerate and out.total > 0


def test_compose_reads_the_unclosed_penalty_switch_from_the_recipe() -> None:
    """The open think block's penalty is the recipe's ablation switch (anchoring.unclosed_penalty): the
    forced <think> prefix and 21 characters, a call, then the answer, the think never closed. The two
    breakdowns differ only by the anchor's unclosed term, anchor weight 0.5 x -0.3 = -0.15 with the switch
    on, 0 with it off: 0.55 vs 0.70 (0.70 worked out in test_ablations.py for the same text)."""
    think = "<think>\nI look at the frames."
    call = '<tool_call>\n{"name": "crop_video", "arguments": {"start_time": 2, "end_time": 5}}\n</tool_call>'
    text = think + call + "<answer>A</answer>"
    on = compose(text, [], "A", "mcq", ParavtRecipe.para_grpo())
    off = compose(text, [], "A", "mcq", ParavtRecipe.para_grpo(anchoring={"unclosed_penalty": False}))
    assert (on.format_parts["anchor_unclosed"], off.format_parts["anchor_unclosed"]) == pytest.approx(
        (-0.15, 0.0)
    )
    assert (on.format, off.format) == pytest.approx((0.55, 0.70))


@pytest.mark.parametrize(
    ("markers", "length", "expected"),
    [(5, 299, True), (5, 300, False), (4, 299, False), (5, 60, True)],
)
def test_is_degenerate_defaults_and_boundaries(markers: int, length: int, expected: bool) -> None:
    """Defaults: >= 5 markers (12 characters each) in fewer than 300 characters."""
    text = "<|im_start|>" * markers
    text += "x" * (length - len(text))
    assert len(text) == length
    assert is_degenerate(text) is expected


def test_compose_hands_the_question_to_the_judge_in_llm_mode() -> None:
    """llm mode, open-ended: the answer goes to the judge with the question (the judge's prompt is the one
    judge_messages builds from question, answer and gold); the judge says 1.0 where token F1 says 0.5."""
    recipe = ParavtRecipe.para_grpo(reward={"mode": "llm"})
    text = COMPOSE_THINK + "</think><answer>red circle</answer>"
    with ScriptedChatServer(reply="1.0") as server:
        judge = Judge(
            server.base_url, "judge-model", api_key="k", timeout_s=5.0, max_retries=0, deadline_s=10.0
        )
        sync = compose(text, [], "a red square", "oe", recipe, question="What moves?", judge=judge)
        async_ = asyncio.run(
            acompose(text, [], "a red square", "oe", recipe, question="What moves?", judge=judge)
        )
        default = compose(text, [], "a red square", "oe", recipe, judge=judge)  # no question given: ""
        adefault = asyncio.run(acompose(text, [], "a red square", "oe", recipe, judge=judge))
        prompts = [body["messages"][-1]["content"][0]["text"] for body in server.bodies]
    assert (sync.accuracy, async_.accuracy, default.accuracy, adefault.accuracy) == (1.0, 1.0, 1.0, 1.0)
    asked = judge_messages("What moves?", "red circle", "a red square")[-1]["content"]
    unasked = judge_messages("", "red circle", "a red square")[-1]["content"]
    assert prompts == [asked, asked, unasked, unasked]


def test_acompose_past_the_reward_timeout_scores_zero() -> None:
    """The judge stalls 3 s; the recipe allows a sample 0.3 s (its judge deadline 0.1 s is for the
    judge's own fallback, the Judge here has 10 s): the sample scores 0 with reason reward_timeout."""
    recipe = ParavtRecipe.para_grpo(reward={"mode": "llm", "timeout_s": 0.3, "judge": {"deadline_s": 0.1}})
    text = COMPOSE_THINK + "</think><answer>red circle</answer>"
    with ScriptedChatServer(reply="1.0", delay_s=3.0) as server:
        judge = Judge(
            server.base_url, "judge-model", api_key="k", timeout_s=5.0, max_retries=0, deadline_s=10.0
        )
        out = asyncio.run(acompose(text, [], "a red square", "oe", recipe, judge=judge))
    assert (out.total, out.failure) == (0.0, "reward_timeout")


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_a_think_body_of_exactly_ten_characters_earns_the_think_points() -> None:
    body = "0123456789"  # 10 characters: docs/method.md §5 says ">= 10"
    assert len(body) == 10
    parts = format_reward(f"<think>{body}</think><answer>B</answer>", **PARA).parts
    assert parts["think"] == pytest.approx(0.2)
    parts = format_reward(f"<think>{body[:9]}</think><answer>B</answer>", **PARA).parts
    assert parts["think"] == 0.0  # 9 characters: short


def test_the_flow_anchor_needs_the_think_closed_before_the_answer() -> None:
    """``<think>…<answer>B</answer></think>``: the answer sits inside the think block, so no flow bonus.
    By hand (PARA-GRPO): think .2 + answer .3 + closed .2 + anchor_close .5 x .4 = .2 + flow 0 + balanced .1
    = 1.0 (the clip hides the missing flow term, so the parts are checked)."""
    result = format_reward("<think>\nI look at the frames.<answer>B</answer></think>", **PARA)
    assert result.parts["anchor_flow"] == 0.0
    assert not result.compliant
    assert result.score == pytest.approx(1.0)
    # the same text with </think> first gets the flow term: .5 x .3 = .15
    ordered = format_reward("<think>\nI look at the frames.</think><answer>B</answer>", **PARA)
    assert ordered.parts["anchor_flow"] == pytest.approx(0.15) and ordered.compliant
