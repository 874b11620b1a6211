"""R_fmt: the format reward with PARA-GRPO's anchoring on the structural tags (docs/method.md §5). Pure.

It reads the main agent's whole text (every turn, the forced ``<think>\\n`` prefix included: the prefix is
part of the completion for this reward). Line by line against docs/method.md §5:

- base part, ``answer_suffix`` on (PARA-GRPO): +0.2 a think block of >= 10 characters is present,
  +0.3 an ``<answer>`` with a non-empty body, +0.2 that answer closed by ``</answer>``;
  ``answer_suffix`` off (vanilla): +0.3 / +0.2 / +0.1 for the same three.
- anchor part, times ``anchor_weight`` (lambda_anchor): +0.4 if a ``</think>`` closes a think block,
  +0.3 if the whole flow ``<think>`` -> ``</think>`` -> ``<answer>`` (non-empty) ``</answer>`` appears in
  that order, -0.3 if a think block is opened and never closed.
- +0.3 if a closed think block comes before the first tool call (no tool call: no bonus).
- +0.1 if the score so far is > 0 and every tag pair is balanced (each tag closed once after it opens,
  no nesting of a tag inside itself).
- the sum is clipped at 1.0 from above only (it may be negative: at worst -0.3 x lambda_anchor).

A think block is *present* when it is closed, or when it was opened (by the forced prefix or the model) and
runs until a tool call, an ``<answer>``, ``<|im_end|>`` or the end of the text: its body is the text up to
that point (docs/method.md §5). Such an open block earns the +0.2 but also the anchor's penalty, and the closed-only
terms (+0.4 close, the flow, think-before-tool, balanced) go to a closed block, so closing ``</think>``
still pays strictly more (``tests/unit/test_rewards_format.py`` checks that for both recipes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MIN_THINK_CHARS = 10
PAIRED_TAGS = ("think", "answer", "tool_call", "tool_code", "tool_response")
_TAG = re.compile(r"<(/?)(" + "|".join(PAIRED_TAGS) + r")>")

# (think, answer body, answer closed) weights of the base part, by answer_suffix.
BASE_WEIGHTS = {True: (0.2, 0.3, 0.2), False: (0.3, 0.2, 0.1)}
ANCHOR_CLOSE, ANCHOR_FLOW, ANCHOR_UNCLOSED = 0.4, 0.3, -0.3
THINK_BEFORE_TOOL = 0.3
BALANCED = 0.1
CLIP_MAX = 1.0
# Where the body of a think block that is never closed ends (docs/method.md §5): a tool call (either form), an answer,
# the end of the turn, or the block opened again.
_OPEN_THINK_END = re.compile(r"<tool_call>|<tool_code>|<answer>|<\|im_end\|>|<think>")


@dataclass(frozen=True)
class FormatResult:
    score: float  # clipped total, <= 1.0 (may be negative)
    parts: dict[str, float] = field(default_factory=dict)  # every term as added (weights applied)
    compliant: bool = False  # the full think -> answer flow is present and every tag is balanced


@dataclass(frozen=True)
class _Block:
    tag: str
    start: int  # offset of the opening tag
    body_start: int
    end: int | None  # offset of the closing tag, None when never closed


def _blocks(text: str) -> tuple[list[_Block], bool]:
    """Blocks of each paired tag in order of opening, and whether every pair is balanced.

    A tag opened again before its closing leaves the first one unclosed (and unbalanced); a closing tag
    without an opening is unbalanced."""
    blocks: list[_Block] = []
    open_at: dict[str, tuple[int, int]] = {}
    balanced = True
    for m in _TAG.finditer(text):
        closing, tag = m.group(1) == "/", m.group(2)
        if not closing:
            if tag in open_at:
                start, body = open_at.pop(tag)
                blocks.append(_Block(tag, start, body, None))
                balanced = False
            open_at[tag] = (m.start(), m.end())
        elif tag in open_at:
            start, body = open_at.pop(tag)
            blocks.append(_Block(tag, start, body, m.start()))
        else:
            balanced = False
    for tag, (start, body) in open_at.items():
        blocks.append(_Block(tag, start, body, None))
        balanced = False
    blocks.sort(key=lambda b: b.start)
    return blocks, balanced


def _think_body(text: str, block: _Block) -> str:
    """The body of a think block: up to ``</think>``, or for an open block up to ``_OPEN_THINK_END``."""
    if block.end is not None:
        return text[block.body_start : block.end]
    stop = _OPEN_THINK_END.search(text, block.body_start)
    return text[block.body_start : stop.start() if stop else len(text)]


def format_reward(
    text: str, *, answer_suffix: bool, anchor_weight: float, unclosed_penalty: bool = True
) -> FormatResult:
    """R_fmt of the main agent's text (forced prefix + every generated turn). Never raises.
    ``unclosed_penalty`` off drops the anchor's penalty for a think block left open (an ablation)."""
    try:
        return _format_reward(str(text), answer_suffix, float(anchor_weight), bool(unclosed_penalty))
    except Exception:  # pure string work; kept total for the "a reward never raises" contract
        return FormatResult(0.0, {"error": 0.0})


def _format_reward(
    text: str, answer_suffix: bool, anchor_weight: float, unclosed_penalty: bool
) -> FormatResult:
    blocks, balanced = _blocks(text)
    thinks = [b for b in blocks if b.tag == "think"]
    closed_thinks = [b for b in thinks if b.end is not None]
    answers = [b for b in blocks if b.tag == "answer"]
    calls = [b for b in blocks if b.tag in ("tool_call", "tool_code")]

    w_think, w_answer, w_close = BASE_WEIGHTS[answer_suffix]
    parts: dict[str, float] = {}
    long_think = any(len(_think_body(text, b).strip()) >= MIN_THINK_CHARS for b in thinks)
    parts["think"] = w_think if long_think else 0.0

    last_answer = answers[-1] if answers else None
    answer_body = ""
    if last_answer is not None:
        stop = last_answer.end if last_answer.end is not None else len(text)
        answer_body = text[last_answer.body_start : stop].strip()
    parts["answer"] = w_answer if answer_body else 0.0
    parts["answer_closed"] = w_close if last_answer is not None and last_answer.end is not None else 0.0

    # Anchor: closing </think>, the full flow in order, and the penalty for a think left open.
    flow = any(
        t.end is not None and a.end is not None and a.start > t.end and text[a.body_start : a.end].strip()
        for t in closed_thinks
        for a in answers
    )
    parts["anchor_close"] = anchor_weight * ANCHOR_CLOSE if closed_thinks else 0.0
    parts["anchor_flow"] = anchor_weight * ANCHOR_FLOW if flow else 0.0
    unclosed = len(closed_thinks) < len(thinks)
    parts["anchor_unclosed"] = anchor_weight * ANCHOR_UNCLOSED if unclosed and unclosed_penalty else 0.0

    first_call = calls[0].start if calls else None
    think_first = first_call is not None and any(
        t.end is not None and t.end < first_call for t in closed_thinks
    )
    parts["think_before_tool"] = THINK_BEFORE_TOOL if think_first else 0.0

    so_far = sum(parts.values())
    parts["balanced"] = BALANCED if so_far > 0 and balanced else 0.0
    total = min(CLIP_MAX, sum(parts.values()))
    return FormatResult(round(total, 10), parts, compliant=flow and balanced)
