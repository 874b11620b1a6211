"""R_fmt, R_tool, compose and the degenerate guard (docs/method.md §5); every expected value worked out by hand.

PARA-GRPO: answer_suffix on (base 0.2 / 0.3 / 0.2), lambda_anchor 0.5 (anchor terms 0.2 / 0.15 / -0.15).
Vanilla: answer_suffix off (base 0.3 / 0.2 / 0.1), lambda_anchor 0. Then +0.3 think before the first tool
call, +0.1 balanced when the score so far is > 0, clip at 1.0 from above.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paravt_core.agent.episode import CallRecord
from paravt_core.config import ParavtRecipe
from paravt_core.rewards.compose import acompose, compose
from paravt_core.rewards.format import format_reward
from paravt_core.rewards.tool import tool_reward

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
