"""Behaviours that a one-token slip in the code would change and no other test pinned (issue 22).

Each test names the slip it catches; every expected value is worked out by hand in the comments.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from paravt_core import storage
from paravt_core.agent.conversation import Conversation
from paravt_core.agent.episode import arun_episode
from paravt_core.agent.parsing import format_tool_call
from paravt_core.agent.segments import SegmentEncoder
from paravt_core.engines.base import Completion
from paravt_core.engines.scripted import ScriptedEngine
from paravt_core.eval.records import shard_of
from paravt_core.rewards.format import format_reward
from paravt_core.rl.loss import decoupled_ppo_loss
from paravt_core.sft.data import RankIndices, StreamPosition
from paravt_core.sft.packing import Packer, Sample
from paravt_core.video.errors import InvalidTimeError
from paravt_core.video.timeparse import parse_time
from tests.agent_support import MAX_PIXELS, MIN_PIXELS, tiny_agent_config, video  # noqa: F401

PARA = {"answer_suffix": True, "anchor_weight": 0.5}


# ------------------------------------------------------------------------------ 1. storage.safe_join


def test_safe_join_refuses_a_sibling_that_shares_the_roots_name(tmp_path: Path) -> None:
    """``root/link -> root-evil``: ``/x/root-evil/f`` starts with the string ``/x/root`` but is not below
    ``/x/root/``; a prefix check without the separator would accept it."""
    root, evil = tmp_path / "root", tmp_path / "root-evil"
    root.mkdir()
    evil.mkdir()
    (root / "link").symlink_to(evil, target_is_directory=True)
    with pytest.raises(storage.UnsafePathError, match="through an existing symlink"):
        storage.safe_join(root, "link/x.mp4")
    # the root itself and a real child stay accepted
    assert storage.safe_join(root, "a/x.mp4") == str(root / "a" / "x.mp4")


# ------------------------------------------------------------------------------ 3. format reward


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


# ------------------------------------------------------------------------------ 4. behaviour-weight cap


@pytest.mark.parametrize("log_w", [0.0, 1.5])
def test_a_token_whose_behaviour_weight_is_exactly_the_cap_is_kept(log_w: float) -> None:
    """docs/method.md §5: tokens with w > cap are dropped, so w == cap stays. Token 0 has w = exp(log_w) (the cap is
    taken as that very float), token 1 has w = exp(log_w + 1) > cap and is dropped.
    A = 1, logp = prox: ratio 1, pg = -1 per token; loss = -(w0 x 1 + 0) / 2 tokens."""
    prox = torch.tensor([[log_w, log_w + 1.0]])
    behav = torch.zeros(1, 2)
    cap = float(torch.exp(torch.tensor(log_w)))  # the weight of token 0, bit for bit
    loss, stats = decoupled_ppo_loss(
        prox.clone(), prox, behav, torch.ones(1, 2), torch.ones(1, 2), behav_weight_cap=cap
    )
    assert stats["dropped_fraction"] == pytest.approx(0.5)  # only token 1
    assert loss.item() == pytest.approx(-cap / 2)


# ------------------------------------------------------------------------------ 5. packing


def _sample(n: int, index: int) -> Sample:
    ids = torch.arange(n)
    return Sample(ids, ids.clone(), torch.zeros(n, dtype=torch.int), ids.expand(3, -1), index=index)


def test_a_bin_landing_exactly_on_the_close_threshold_closes() -> None:
    """packing_length 10, close_slack 3: a bin closes at >= 10 - 3 = 7 tokens.
    4 -> A=[4]; 3 -> A=[4,3] = 7 tokens: exactly the threshold, emitted; 6 -> B=[6] (6 < 7, stays open)."""
    packer = Packer(10, max_open=4, close_slack=3)
    out = [[len(s) for s in b] for i, n in enumerate([4, 3, 6]) for b in packer.add(_sample(n, i))]
    assert out == [[4, 3]]
    assert packer.pending() == [[2]]


# ------------------------------------------------------------------------------ 6. SFT resume on ranks


@pytest.mark.parametrize(
    ("world", "expected"),
    [
        # next_index 7 (odd), 2 ranks: rank r takes g % 2 == r from 7 on -> rank 0: 8, 10, 12; rank 1: 7, 9, 11
        (2, [[8, 10, 12], [7, 9, 11]]),
        # 3 ranks: rank 0: 9, 12, 15; rank 1: 7, 10, 13; rank 2: 8, 11, 14
        (3, [[9, 12, 15], [7, 10, 13], [8, 11, 14]]),
    ],
)
def test_resume_from_an_odd_position_gives_each_rank_its_own_rows(world: int, expected: list) -> None:
    pos = StreamPosition()
    pos.mark(range(7))  # rows 0..6 trained: resume at 7
    assert pos.next_index == 7
    got = [list(itertools.islice(RankIndices(pos, r, world), 3)) for r in range(world)]
    assert got == expected
    assert got[0] != got[1]  # never the same rows on two ranks


# ------------------------------------------------------------------------------ 7. chat completions cut by length


@pytest.mark.parametrize(("reason", "eos"), [("stop", True), ("length", False), ("content_filter", False)])
def test_only_a_real_stop_puts_an_end_of_turn_token_in_the_trace(tiny_model, reason: str, eos: bool) -> None:
    """A chat engine returns text; ``<|im_end|>`` goes into the trace only when the server says ``stop``."""
    encoder = SegmentEncoder(tiny_model.processor, max_pixels=MAX_PIXELS, min_pixels=MIN_PIXELS)
    conv = Conversation(encoder)
    text = "<answer>B</answer>"
    completion = Completion(token_ids=[], text=text, logprobs=None, finish_reason=reason, exact_tokens=False)
    body = conv.add_generation(completion, turn=0)
    (seg,) = conv.trace.segments
    plain = encoder.count(text)
    assert seg.token_ids == plain + [encoder.eos_token_id] * eos
    assert body == text


# ------------------------------------------------------------------------------ 8. time parsing


@pytest.mark.parametrize("text", ["1:60", "0:60", "1:60.0", "1:60:00", "0:00:60"])
def test_sixty_is_not_a_valid_second_or_minute(text: str) -> None:
    with pytest.raises(InvalidTimeError, match="must be below 60"):
        parse_time(text)


@pytest.mark.parametrize(("text", "seconds"), [("1:59", 119.0), ("1:59.5", 119.5), ("1:59:59", 7199.0)])
def test_just_below_sixty_is_a_time(text: str, seconds: float) -> None:
    assert parse_time(text) == seconds  # 60 + 59; 60 + 59.5; 3600 + 59 x 60 + 59


# ------------------------------------------------------------------------------ 10. forced answer budget


def test_with_no_tool_round_the_forced_answer_budget_is_max_new_tokens(tiny_model, video) -> None:  # noqa: F811
    """``max_turns = 0``: the first turn is the last, but no tool round preceded it, so no forced-answer
    instruction was shown and the turn keeps ``max_new_tokens`` (100), not the forced answer's 64."""
    engine = ScriptedEngine(tiny_model.processor, ["<answer>B</answer>"])
    cfg = tiny_agent_config(max_turns=0, forced_answer="mcq", max_new_tokens=100)
    result = asyncio.run(arun_episode({"video": str(video), "question": "q"}, engine, cfg))
    assert result.finish_reason == "answer"
    assert [r.sampling.max_new_tokens for r in engine.requests] == [100]
    assert "ONLY the letter" not in result.main.text


# ------------------------------------------------------------------------------ 11. report truncation


@pytest.mark.parametrize(("delta", "truncated"), [(-1, True), (0, False), (1, False)])
def test_a_report_of_exactly_its_token_limit_is_not_truncated(tiny_model, video, delta, truncated) -> None:  # noqa: F811
    """The report has n tokens; limit n - 1 cuts it (mark added), limits n and n + 1 keep it whole."""
    report = "first second third fourth"
    n = len(tiny_model.tokenizer(report, add_special_tokens=False)["input_ids"])
    engine = ScriptedEngine(
        tiny_model.processor, [format_tool_call("crop_video", {"start_time": 0, "end_time": 2}), "<answer>x</answer>"],
        subagent=report,
    )  # fmt: skip
    cfg = tiny_agent_config(subagent={"max_report_tokens": n + delta, "max_new_tokens": 64})
    result = asyncio.run(arun_episode({"video": str(video), "question": "q"}, engine, cfg))
    (call,) = result.calls
    assert call.truncated is truncated
    assert call.report_tokens == min(n, n + delta)
    assert call.report.endswith(" [truncated]") is truncated
    if not truncated:
        assert call.report == report


# ------------------------------------------------------------------------------ 12. shard assignment


def test_shards_do_not_depend_on_pythonhashseed() -> None:
    """Two processes with different hash seeds (salted ``hash()`` would differ) give the same shards."""
    code = "import json; from paravt_core.eval.records import shard_of; print(json.dumps([shard_of(f'q{i}', 4) for i in range(64)]))"  # fmt: skip
    runs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
        )
        runs.append(json.loads(out.stdout))
    assert runs[0] == runs[1] == [shard_of(f"q{i}", 4) for i in range(64)]
    # Worked out with coreutils' sha256sum: the first 8 bytes as a big-endian integer, mod 4, is the 16th
    # hex digit mod 4 (16^k is divisible by 4 for k >= 1). q0: 341c0a3e67c31467 -> 7 % 4 = 3;
    # q1: ...ae52 -> 2; q2: ...9063 -> 3; q3: ...d9cf -> 15 % 4 = 3; q4: ...5df3 -> 3; q5: ...e7cd -> 13 % 4 = 1;
    # q6: ...0ac1 -> 1; q7: ...68cf -> 3.
    assert runs[0][:8] == [3, 2, 3, 3, 3, 1, 1, 3]
