"""The episode reward R = R_acc + format_weight * R_fmt + tool_weight * R_tool, with every part kept (docs/method.md §5;
``reward.tool_weight`` is 1 but in the ablation without R_tool): the weighted sum over the terms of
``paravt_core.rewards.terms`` (those three, then any registered with ``register_term``).

``compose`` (sync) and ``acompose`` (async: awaits the judge, bounded by ``reward.timeout_s``) take the main
agent's text (forced prefix + every turn), its call records, the gold answer and the ``paravt:`` recipe.
R_acc reads the last complete ``<answer>`` only: a completion without one scores 0 there
(``no_answer``), whatever else it wrote. The degenerate guard sets the total to 0 for a completion with at
least ``degenerate_im_starts`` ``<|im_start|>`` markers in fewer than ``degenerate_max_chars`` characters
(a model that learned to spam chat headers). Nothing here raises: a failure is a zero total with a reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .accuracy import AccuracyResult, aaccuracy_reward, accuracy_reward, extract_answer_text
from .format import FormatResult
from .terms import RewardInput, reward_terms, term_names
from .tool import CallLike, ToolResult

if TYPE_CHECKING:
    from paravt_core.config import ParavtRecipe

    from .judge import Judge

IM_START = "<|im_start|>"


@dataclass(frozen=True, init=False)
class RewardBreakdown:
    """The total and every term's score (before its weight) by name, in term order: ``scores["format"]``,
    or as an attribute, ``.format``. Scores are given as a mapping or as keywords::

        RewardBreakdown(total=1.0, accuracy=1.0, format=0.0, tool=0.0)
    """

    total: float
    scores: Mapping[str, float]
    format_weight: float = 1.0
    format_parts: dict[str, float] = field(default_factory=dict)
    tool_level: float = 0.0
    compliant: bool = False  # think -> answer flow present, every tag balanced
    degenerate: bool = False
    reason: str | None = None  # why R_acc could not compare (no_answer, unparseable_letter, ...)
    failure: str | None = None  # why the whole reward is 0 (reward_error, reward_timeout)
    parsed: Any = None  # what R_acc compared

    def __init__(
        self,
        total: float,
        scores: Mapping[str, float] | None = None,
        *,
        format_weight: float = 1.0,
        format_parts: dict[str, float] | None = None,
        tool_level: float = 0.0,
        compliant: bool = False,
        degenerate: bool = False,
        reason: str | None = None,
        failure: str | None = None,
        parsed: Any = None,
        **named: float,
    ) -> None:
        values = {
            "total": total,
            "scores": {**(scores or {}), **named},
            "format_weight": format_weight,
            "format_parts": dict(format_parts or {}),
            "tool_level": tool_level,
            "compliant": compliant,
            "degenerate": degenerate,
            "reason": reason,
            "failure": failure,
            "parsed": parsed,
        }
        for key, value in values.items():  # frozen: set once, here
            object.__setattr__(self, key, value)

    def __getattr__(self, name: str) -> float:
        """A term's score as an attribute (``.accuracy``); only called for names that are not fields."""
        scores = self.__dict__.get("scores")  # absent while a pickle is being restored
        if scores is not None and name in scores:
            return scores[name]
        raise AttributeError(f"RewardBreakdown has no field or reward term {name!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            **self.scores,
            "format_parts": dict(self.format_parts),
            "tool_level": self.tool_level,
            "compliant": self.compliant,
            "degenerate": self.degenerate,
            "reason": self.reason,
            "failure": self.failure,
        }


def is_degenerate(text: str, *, im_starts: int = 5, max_chars: int = 300) -> bool:
    return text.count(IM_START) >= im_starts and len(text) < max_chars


def failed(why: str) -> RewardBreakdown:
    """The zero reward of a sample whose reward could not be computed: every term 0."""
    return RewardBreakdown(0.0, dict.fromkeys(term_names(), 0.0), failure=why)


def _assemble(
    text: str,
    calls: Sequence[CallLike],
    acc: AccuracyResult,
    recipe: ParavtRecipe,
    *,
    gold: str,
    question_type: str | None,
    question: str,
) -> RewardBreakdown:
    inp = RewardInput(text, calls, gold, question_type, question, recipe, acc)
    scored = [(term, *term.score(inp)) for term in reward_terms()]
    degenerate = is_degenerate(
        text, im_starts=recipe.reward.degenerate_im_starts, max_chars=recipe.reward.degenerate_max_chars
    )
    total = 0.0
    for term, score, _ in scored:  # in order, one addition each: acc + w_fmt * fmt + w_tool * tool
        total += term.weight_in(recipe) * score
    # the built-in terms' details (R_fmt's parts and compliance, R_tool's level) keep fields of their own
    results = {term.name: result for term, _, result in scored}
    fmt, tool = results.get("format"), results.get("tool")
    return RewardBreakdown(
        total=0.0 if degenerate else total,
        scores={term.name: score for term, score, _ in scored},
        format_weight=recipe.reward.format_weight,
        format_parts=fmt.parts if isinstance(fmt, FormatResult) else {},
        tool_level=tool.level if isinstance(tool, ToolResult) else 0.0,
        compliant=fmt.compliant if isinstance(fmt, FormatResult) else False,
        degenerate=degenerate,
        reason=acc.reason,
        parsed=acc.parsed,
    )


def compose(
    text: str,
    calls: Sequence[CallLike],
    gold: str,
    question_type: str | None,
    recipe: ParavtRecipe,
    *,
    question: str = "",
    judge: Judge | None = None,
) -> RewardBreakdown:
    """The reward of one episode from its main-agent text and call records. Never raises."""
    try:
        text = str(text)
        if extract_answer_text(text) is None:
            acc = AccuracyResult(0.0, "no_answer")
        else:
            acc = accuracy_reward(text, gold, question_type, recipe.reward.mode, judge, question=question)
        return _assemble(text, calls, acc, recipe, gold=gold, question_type=question_type, question=question)
    except Exception as err:
        return failed(f"reward_error:{type(err).__name__}")


async def acompose(
    text: str,
    calls: Sequence[CallLike],
    gold: str,
    question_type: str | None,
    recipe: ParavtRecipe,
    *,
    question: str = "",
    judge: Judge | None = None,
) -> RewardBreakdown:
    """``compose`` inside an event loop; past ``recipe.reward.timeout_s`` the sample scores 0."""

    async def run() -> RewardBreakdown:
        body = str(text)
        if extract_answer_text(body) is None:
            acc = AccuracyResult(0.0, "no_answer")
        else:
            acc = await aaccuracy_reward(
                body, gold, question_type, recipe.reward.mode, judge, question=question
            )
        return _assemble(body, calls, acc, recipe, gold=gold, question_type=question_type, question=question)

    try:
        timeout = recipe.reward.timeout_s  # read first: a bad recipe must not leave run() never awaited
        return await asyncio.wait_for(run(), timeout)
    except TimeoutError:
        return failed("reward_timeout")
    except Exception as err:
        return failed(f"reward_error:{type(err).__name__}")
