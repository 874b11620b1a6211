"""Tests written for mutants that `make mutation` found alive (docs/mutation.md); values worked out by hand."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import pytest
import torch

from paravt_core.agent.parsing import _short, call_window, open_tag_at_end, parse_tool_calls, think_spans
from paravt_core.config import ParavtRecipe
from paravt_core.rewards.accuracy import (
    AccuracyResult,
    aaccuracy_reward,
    accuracy_reward,
    answer_span,
    interval_iou,
    parse_interval,
    question_kind,
    read_mcq_letter,
    statement_letters,
)
from paravt_core.rewards.compose import acompose, compose, is_degenerate
from paravt_core.rewards.judge import Judge, judge_messages
from paravt_core.rl.advantages import compute_advantages
from paravt_core.rl.loss import decoupled_ppo_loss
from paravt_core.video.errors import InvalidTimeError
from paravt_core.video.timeparse import parse_time, shown
from tests.judge_test_server import ScriptedChatServer


def test_one_token_loss_and_stats_divide_by_one() -> None:
    """One trained token, A = 2, logp = prox = behav: ratio 1, pg = -2, w = 1 -> loss = -2 / 1 token;
    statistics over 1 token: ratio_mean 1, nothing clipped (ratio 1 is inside [0.8, 1.2], both pg terms are
    equal: equal is not clipped), nothing dropped."""
    zeros = torch.zeros(1, 1)
    loss, stats = decoupled_ppo_loss(zeros, zeros, zeros, torch.full((1, 1), 2.0), torch.ones(1, 1))
    assert loss.item() == pytest.approx(-2.0)
    assert stats["ratio_mean"] == pytest.approx(1.0)
    assert stats["clip_fraction"] == 0.0
    assert stats["dropped_fraction"] == 0.0 and stats["tokens"] == 1.0


def test_every_statistic_by_hand() -> None:
    """Two trained tokens and a masked one (its values must count nowhere), A = 1:
    token 0: logp 0.1, prox 0.3, behav 0.0 -> ratio e^-0.2 = 0.818731 (inside [0.8, 1.2]), w = e^0.3;
    token 1: logp -0.1, prox -0.4, behav -0.9 -> ratio e^0.3 = 1.349859 (clipped to 1.2), w = e^0.5;
    token 2 (mask 0): logp 3, prox -1, behav 2.
    approx_kl = ((0.1 - 0.3) + (-0.1 + 0.4)) / 2 = 0.05; behav_kl = (0.3 + 0.5) / 2 = 0.4;
    ratio_mean = (0.818731 + 1.349859) / 2 = 1.084295; clip_fraction 1/2; dropped 0 (both w <= 5);
    loss = (-e^-0.2 x e^0.3 - 1.2 x e^0.5) / 2 = (-1.105171 - 1.978466) / 2 = -1.541818."""
    logp = torch.tensor([[0.1, -0.1, 3.0]])
    prox = torch.tensor([[0.3, -0.4, -1.0]])
    behav = torch.tensor([[0.0, -0.9, 2.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, stats = decoupled_ppo_loss(logp, prox, behav, torch.ones(1, 3), mask)
    assert loss.item() == pytest.approx(-1.541818, abs=1e-5)
    assert stats == pytest.approx(
        {
            "clip_fraction": 0.5,
            "dropped_fraction": 0.0,
            "approx_kl": 0.05,
            "behav_kl": 0.4,
            "ratio_mean": 1.084295,
            "tokens": 2.0,
        },
        abs=1e-5,
    )


def test_gating_without_choices_says_why() -> None:
    from paravt_core.rl.gating import draw_nframes

    with pytest.raises(ValueError, match=r"^nFrames gating needs at least one frame count$"):
        draw_nframes("row", 0, ())


def test_sequence_advantages_with_the_default_knobs() -> None:
    """docs/method.md §5 defaults (bias -0.2, scale 10, clip 20, eps 1e-5). Rewards 1, 0, 3.5 in group 0 and 0.5 alone:
    shaped (R - 0.2) x 10 = 8, -2, 33 -> 20 (clipped), 3. Group 0: mean 26/3 = 8.6667, centred -0.6667,
    -10.6667, 11.3333, unbiased std sqrt(242.6667 / 2) = 11.015141 -> -0.060523, -0.968363, 1.028886;
    a group of one -> 0."""
    from paravt_core.rl.advantages import sequence_advantages

    seq, shaped = sequence_advantages(torch.tensor([1.0, 0.0, 3.5, 0.5]), torch.tensor([0, 0, 0, 1]))
    assert shaped.tolist() == pytest.approx([8.0, -2.0, 20.0, 3.0])
    assert seq.tolist() == pytest.approx([-0.060523, -0.968363, 1.028886, 0.0], abs=1e-5)


def test_token_advantages_with_the_default_knobs() -> None:
    """kl_ctl 0.01, clamp 10, batch norm on, eps 1e-5. Sequence advantages 1 and -1; seq 0's first token has
    logp_behav - logp_ref = 20 -> clamped to 10 -> KL reward -0.1; the masked token (diff 5) counts nowhere.
    Reward-to-go: seq 0: 1 - 0.1 = 0.9, 1.0; seq 1: -1.0. Batch norm over the 3 tokens: mean 0.3, population
    std sqrt(2.54 / 3) = 0.920145 -> 0.652064, 0.760741, -1.412806; the masked position stays 0."""
    from paravt_core.rl.advantages import token_advantages

    behav = torch.tensor([[20.0, 0.0], [0.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = token_advantages(torch.tensor([1.0, -1.0]), behav, torch.zeros(2, 2), mask)
    assert adv.tolist() == [
        pytest.approx([0.652064, 0.760741], abs=1e-5),
        pytest.approx([-1.412806, 0.0], abs=1e-5),
    ]


@pytest.mark.parametrize(
    ("behav", "mask", "kl_mean", "tokens"),
    [
        # (0.5 + 0.25 - 0.25) / 3 tokens; the masked 9 counts nowhere
        ([[0.5, 0.25], [-0.25, 9.0]], [[1.0, 1.0], [1.0, 0.0]], 0.5 / 3, 3.0),
        # one trained token: 0.5 / 1
        ([[0.5, 9.0], [9.0, 9.0]], [[1.0, 0.0], [0.0, 0.0]], 0.5, 1.0),
    ],
)
def test_compute_advantages_statistics(behav, mask, kl_mean, tokens) -> None:
    """Rewards 1, 0 (group 0) and 0.5, 0.5 (group 1: equal -> a zero-advantage group). Shaped with the
    defaults: 8, -2, 3, 3 -> mean 3."""
    from paravt_core.rl.advantages import compute_advantages

    _, stats = compute_advantages(
        torch.tensor([1.0, 0.0, 0.5, 0.5]),
        torch.tensor([0, 0, 1, 1]),
        torch.tensor(behav + [[0.0, 0.0], [0.0, 0.0]]),
        torch.zeros(4, 2),
        torch.tensor(mask + [[0.0, 0.0], [0.0, 0.0]]),
    )
    assert stats == pytest.approx(
        {
            "shaped_reward_mean": 3.0,
            "kl_behav_ref_mean": kl_mean,
            "zero_advantage_groups": 1.0,
            "trained_tokens": tokens,
        }
    )


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


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text")


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


@pytest.mark.parametrize(
    ("batch_norm", "expected"),
    [
        # no batch norm: seq 0: 0.363961 - 0.1 = 0.263961; seq 1: -0.363961
        (False, [[0.263961], [-0.363961]]),
        # batch norm with eps 1: mean -0.05, population std 0.313961 -> +-0.313961 / 1.313961 = +-0.238942
        (True, [[0.238942], [-0.238942]]),
    ],
)
def test_compute_advantages_forwards_every_knob(batch_norm: bool, expected: list) -> None:
    """Non-default knobs, each visible in the result: bias 0.5, scale 2, clip 2.5 -> rewards 1, 0 shape to
    (1.5 x 2 = 3 -> 2.5) and 0.5 x 2 = 1; mean 1.75, unbiased std sqrt(2 x 0.5625) = 1.06066, group eps 1
    -> +-0.75 / 2.06066 = +-0.363961. KL: behav - ref = 3 on seq 0, clamped to 1, x -kl_ctl 0.1 = -0.1."""
    from paravt_core.rl.advantages import compute_advantages

    adv, stats = compute_advantages(
        torch.tensor([1.0, 0.0]),
        torch.tensor([0, 0]),
        torch.tensor([[4.0], [1.0]]),
        torch.tensor([[1.0], [1.0]]),
        torch.ones(2, 1),
        bias=0.5,
        scale=2.0,
        clip=2.5,
        group_eps=1.0,
        kl_ctl=0.1,
        kl_clamp=1.0,
        batch_norm=batch_norm,
        batch_eps=1.0,
    )
    assert adv.tolist() == [pytest.approx(row, abs=1e-5) for row in expected]
    # (3 + 0) / 2 tokens of behav - ref; shaped mean (2.5 + 1) / 2
    assert stats == pytest.approx(
        {
            "shaped_reward_mean": 1.75,
            "kl_behav_ref_mean": 1.5,
            "zero_advantage_groups": 0.0,
            "trained_tokens": 2.0,
        }
    )


def test_group_normalize_default_eps() -> None:
    """Values 1, 3: mean 2, unbiased std sqrt(2) = 1.414214, eps 1e-5 -> +-1 / 1.414224 = +-0.707102."""
    from paravt_core.rl.advantages import group_normalize

    assert group_normalize(torch.tensor([1.0, 3.0]), torch.tensor([0, 0])).tolist() == pytest.approx(
        [-0.707102, 0.707102], abs=1e-6
    )


def test_batch_normalize_of_one_token_is_zero() -> None:
    """One masked token: mean = the value, deviation 0 -> 0 (a count clamped above 1 would halve the mean)."""
    from paravt_core.rl.advantages import batch_normalize

    assert batch_normalize(torch.tensor([[3.0, 7.0]]), torch.tensor([[1.0, 0.0]])).tolist() == [[0.0, 0.0]]


# ---------------------------------------------------------------- rewards/compose.py

COMPOSE_THINK = "<think>\nI look at the frames."
COMPOSE_CALL = (
    '<tool_call>\n{"name": "crop_video", "arguments": {"start_time": 2, "end_time": 5}}\n</tool_call>'
)
# think -> call -> think -> answer "A" (the trace of tests/test_rewards_format.py::TWO_TURNS)
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


# ---------------------------------------------------------------- rewards/accuracy.py


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


# ---------------------------------------------------------------- rl/advantages.py (left over)


def test_compute_advantages_clips_shaped_rewards_at_20_by_default() -> None:
    """Rewards 2.5 and 0 in one group, defaults (bias -0.2, scale 10, clip 20): shaped (2.5 - 0.2) x 10 =
    23 -> clipped to 20, and (0 - 0.2) x 10 = -2; their mean is (20 - 2) / 2 = 9."""
    zeros = torch.zeros(2, 1)
    _, stats = compute_advantages(
        torch.tensor([2.5, 0.0]), torch.tensor([0, 0]), zeros, zeros, torch.ones(2, 1)
    )
    assert stats["shaped_reward_mean"] == pytest.approx(9.0)


def test_compute_advantages_of_an_empty_batch() -> None:
    """No episode: no advantage, and the statistics are zeros (not nan)."""
    empty = torch.zeros(0, 3)
    adv, stats = compute_advantages(torch.zeros(0), torch.zeros(0, dtype=torch.long), empty, empty, empty)
    assert adv.shape == (0, 3)
    assert stats == {
        "shaped_reward_mean": 0.0,
        "kl_behav_ref_mean": 0.0,
        "zero_advantage_groups": 0.0,
        "trained_tokens": 0.0,
    }


# ---------------------------------------------------------------- agent/parsing.py

NOT_A_CALL = "the <tool_code> block is not a call like crop_video(start_time=.., end_time=..)"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("", "the <tool_code> block is empty"),
        ("   ", "the <tool_code> block is empty"),
        ("x" * 4001, "the <tool_code> block is too long"),  # the bound is 4000 characters
        ("crop_video(", NOT_A_CALL),  # a syntax error
        ("x + 1", NOT_A_CALL),  # an expression, not a call
    ],
)
def test_tool_code_errors_are_the_models_messages(body: str, error: str) -> None:
    (call,) = parse_tool_calls(f"<tool_code>{body}</tool_code>")
    assert (call.name, call.arguments, call.error) == (None, None, error)


LITERALS_ONLY = "<tool_code> arguments must be literal numbers or strings"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("crop_video(start_time=open('f'))", LITERALS_ONLY),  # not a literal: nothing is evaluated
        ("crop_video(start_time={1, 2})", LITERALS_ONLY),  # a literal, but not a number or string
        ("crop_video(1)", "<tool_code> takes start_time and end_time (and optionally video_path)"),
        ("crop_video(**a)", "**arguments are not supported in <tool_code>"),
    ],
)
def test_tool_code_errors_after_the_name_keep_the_name(body: str, error: str) -> None:
    (call,) = parse_tool_calls(f"<tool_code>{body}</tool_code>")
    assert (call.name, call.arguments, call.error) == ("crop_video", None, error)


def test_a_tool_code_body_of_exactly_the_bound_is_parsed() -> None:
    body = "crop_video(1, 2" + " " * (4000 - 16) + ")"
    assert len(body) == 4000
    (call,) = parse_tool_calls(f"<tool_code>{body}</tool_code>")
    assert (call.name, call.arguments, call.error) == ("crop_video", {"start_time": 1, "end_time": 2}, None)


def test_a_fenced_tool_code_loses_only_its_backticks() -> None:
    """```X(1, 2)```: the fence's backticks go, the call of a function named X stays."""
    (call,) = parse_tool_calls("<tool_code>```X(1, 2)```</tool_code>")
    assert (call.name, call.arguments, call.error) == ("X", {"start_time": 1, "end_time": 2}, None)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"start_time": -1, "end_time": 2}, "start_time must not be negative, got -1"),
        ({"start": 1, "end_time": "x"}, "end_time must be seconds (e.g. 12.5) or MM:SS or HH:MM:SS, got 'x'"),
        ({}, "start_time is missing"),
        ({"start_time": 1}, "end_time is missing"),
    ],
)
def test_call_window_errors_name_the_argument(arguments: dict, message: str) -> None:
    with pytest.raises(ValueError) as info:
        call_window(arguments)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("text", "tag"),
    [
        ("<think>a</think><think>b", "think"),  # the LAST opening is the one left open
        ("</answer><answer>x", "answer"),  # a closing tag before the opening closes nothing
        ("<think>a</think><answer>B</answer>", None),
        ("<think>a<tool_call>{", "tool_call"),  # both open: the later one
    ],
)
def test_open_tag_at_end_by_hand(text: str, tag: str | None) -> None:
    assert open_tag_at_end(text) == tag


# ---------------------------------------------------------------- video/timeparse.py


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (604800, 604800.0),  # a week, the largest time, as an int
        ("12.5s", 12.5),
        (" 12.5 S ", 12.5),  # unit in any case, spaces around
        ("1:02:03.5", 3723.5),  # (1 x 60 + 2) x 60 + 3.5
        ("1:2:3", 3723.0),
        ("59:59.9", 3599.9),
        ("60:00", 3600.0),  # MM:SS: the minutes are not bounded without hours
        ("1e3", 1000.0),
        (".5", 0.5),
        ("+3", 3.0),
        ("3.", 3.0),
        ("5s", 5.0),  # one digit before the unit
        (".5s", 0.5),  # a number that starts with its point
    ],
)
def test_parse_time_values_by_hand(value, seconds) -> None:
    assert parse_time(value, "t") == seconds


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "t is missing"),
        (True, "t must be a number of seconds, got True"),
        (-(10**400), "t must not be negative, got (an integer of about 401 digits)"),
        (10**400, "t (an integer of about 401 digits) is too large (at most 604800 seconds)"),
        (10**6, "t 1000000 is too large (at most 604800 seconds)"),
        (-5, "t must not be negative, got -5"),
        (-604800, "t must not be negative, got -604800"),
        ([1], "t must be a number of seconds, got list [1]"),
        (float("nan"), "t must be a finite number, got nan"),
        (float("inf"), "t must be a finite number, got inf"),
        (604800.5, "t 604800.5 is too large (at most 604800 seconds)"),
        ("1:60:00", "t '1:60:00': minutes must be below 60"),
        ("0:60", "t '0:60': seconds must be below 60"),
        ("abc", "t must be seconds (e.g. 12.5) or MM:SS or HH:MM:SS, got 'abc'"),
        ("s", "t must be seconds (e.g. 12.5) or MM:SS or HH:MM:SS, got 's'"),
    ],
)
def test_parse_time_messages_by_hand(value, message: str) -> None:
    with pytest.raises(InvalidTimeError) as info:
        parse_time(value, "t")
    assert str(info.value) == message


def test_parse_time_names_a_time_by_default() -> None:
    with pytest.raises(InvalidTimeError, match="^time is missing$"):
        parse_time(None)


def test_a_time_string_over_40_characters_is_refused_before_reading() -> None:
    """41 characters (the bound is 40, after stripping): refused, the echo shortened by reprlib."""
    with pytest.raises(InvalidTimeError) as info:
        parse_time("1" * 41, "t")
    text = str(info.value)
    assert text.startswith("t '11111") and "..." in text
    assert text.endswith("' is too long for a time (seconds, e.g. 12.5, or MM:SS or HH:MM:SS)")
    assert parse_time(" " + "0" * 39 + "1 ", "t") == 1.0  # 40 characters after stripping: read


def test_shown_bounds_what_it_echoes() -> None:
    # reprlib with maxstring 40: a repr of up to 40 characters whole, longer ones cut to 18 + "..." + 19
    assert shown("y" * 38) == "'" + "y" * 38 + "'"
    assert shown("y" * 39) == "'" + "y" * 17 + "..." + "y" * 18 + "'"
    assert shown([[[[1]]]]) == "[[[[...]]]]"  # nesting beyond 3 levels elided
    # 130 bits: int(130 x 0.30103) + 1 = int(39.13) + 1 = 40 ("about": 2**129 has 39 digits)
    assert shown(2**129) == "(an integer of about 40 digits)"
    assert shown(2**127) == str(2**127)  # 128 bits: shown (39 digits, under the 40-character bound)
    assert shown(2**128) == "(an integer of about 39 digits)"  # 129 bits: int(38.83) + 1 = 39
    # a huge int inside a list: its repr raises ValueError (over 4300 digits), the list is described
    assert shown([10**5000]) == "(a list too large to show)"
    # whole up to 42 characters (a reprlib-bounded repr plus its quotes), else the first 40 + "..."
    two = ["y" * 17, "y" * 17]  # "['" + 17 + "', '" + 17 + "']" = 42 characters
    assert len(repr(two)) == 42 and shown(two) == repr(two)
    longer = ["y" * 18, "y" * 17]  # 43 characters
    assert shown(longer) == repr(longer)[:40] + "..."


def test_short_cuts_long_error_details_at_120_characters() -> None:
    """JSON decoder messages are echoed to the model through ``_short``: up to 120 characters whole,
    longer ones cut to 120 + "..."."""
    assert _short("x" * 120) == "x" * 120
    assert _short("x" * 121) == "x" * 120 + "..."
    assert _short("abc", limit=2) == "ab..."
    with pytest.raises(json.JSONDecodeError) as err:  # the detail is the json module's own message
        json.loads("{")
    (call,) = parse_tool_calls("<tool_call>{</tool_call>")
    assert call.error == f"the <tool_call> body is not valid JSON ({err.value})"


@pytest.mark.parametrize(
    ("text", "raw", "error"),
    [
        ("<tool_call>  </tool_call>", "  ", "the <tool_call> block is empty"),
        (
            "<tool_call>[1]</tool_call>",
            "[1]",
            'the <tool_call> body must be a JSON object {"name": ..., "arguments": {...}}',
        ),
    ],
)
def test_tool_call_errors_are_the_models_messages(text: str, raw: str, error: str) -> None:
    (call,) = parse_tool_calls(text)
    assert (call.raw, call.name, call.error) == (raw, None, error)


def test_only_whitespace_may_precede_the_json_object_of_a_block() -> None:
    """``X{...}``: not a JSON object at the block's start, so the block ends at the first closing tag (the
    one inside the would-be string) and its body is the text before it."""
    (call,) = parse_tool_calls('<tool_call>X{"a": "</tool_call>"}</tool_call>')
    assert call.raw == 'X{"a": "' and call.span == (0, 31)


def test_think_spans_by_hand() -> None:
    """ "a" (0), <think> at 1, "x" at 8, </think> at 9-16 -> (1, 17); "b" at 17, <think> at 18, "y" at 25,
    </think> at 26-33 -> (18, 34); an unclosed third block hides nothing."""
    assert think_spans("a<think>x</think>b<think>y</think><think>z") == [(1, 17), (18, 34)]


@pytest.mark.parametrize(
    ("body", "name", "error"),
    [
        ('{"arguments": {}}', None, 'the tool call has no "name" string'),
        (
            '{"name": "crop_video", "arguments": "nope"}',
            "crop_video",
            'the "arguments" string is not a JSON object',
        ),
        (
            '{"name": "crop_video", "arguments": [1]}',
            "crop_video",
            'the tool call needs an "arguments" JSON object',
        ),
    ],
)
def test_tool_call_object_errors(body: str, name: str | None, error: str) -> None:
    (call,) = parse_tool_calls(f"<tool_call>{body}</tool_call>")
    assert (call.name, call.arguments, call.error) == (name, None, error)
