"""The reward terms, in order: R = sum of weight x score over ``reward_terms()`` (docs/method.md §5: accuracy, format,
tool). Everything that shows the reward's parts (the breakdown, the step metrics, the TensorBoard tags, the
curves, the trajectory text, the console lines) iterates over this list, so a new term is one call::

    register_term(RewardTerm("brevity", lambda inp: 1.0 if len(inp.text) < 400 else 0.0, weight=0.2))

A term's ``fn`` reads a ``RewardInput`` and returns its score (a float, or a result with a ``score``). R_acc
is computed before the terms (in ``compose`` / ``acompose``: it may await the judge) and handed to them in
the input: the accuracy term reads it, R_tool depends on it. A term that raises zeroes the sample's reward
with ``reward_error:<type>``, like every other failure in ``compose``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .format import format_reward
from .tool import CallLike, tool_reward

if TYPE_CHECKING:
    from paravt_core.config import ParavtRecipe

    from .accuracy import AccuracyResult


class Scored(Protocol):
    """A term's detailed result (``AccuracyResult``, ``FormatResult``, ``ToolResult``)."""

    @property
    def score(self) -> float: ...


@dataclass(frozen=True)
class RewardInput:
    """What a term may read about one episode."""

    text: str  # the main agent's text: forced prefix + every turn
    calls: Sequence[CallLike]
    gold: str
    question_type: str | None
    question: str
    recipe: ParavtRecipe
    accuracy: AccuracyResult  # R_acc, computed first


TermFn = Callable[[RewardInput], "float | Scored"]
Weight = float | Callable[["ParavtRecipe"], float]

# Names a term cannot take: the breakdown's own keys, and the metric / tag names that ``<name>_mean`` and
# ``reward/<name>`` would shadow (reward_mean; reward/mean, reward/std, reward/max).
RESERVED = frozenset(
    {"total", "scores", "format_weight", "format_parts", "tool_level", "compliant", "degenerate", "reason"}
    | {"failure", "parsed", "reward", "mean", "std", "max"}
)


@dataclass(frozen=True)
class RewardTerm:
    """One part of the reward: its ``name`` (the breakdown key; ``<name>_mean`` in the step metrics and the
    curves, ``reward/<name>`` in TensorBoard), how it scores an episode, and its weight in the total (a
    number, or read from the recipe: the built-in weights are ``reward.format_weight`` / ``tool_weight``)."""

    name: str
    fn: TermFn
    weight: Weight = 1.0
    label: str = ""  # in the console lines; the name when empty
    short_line: bool = True  # also in the short pod-log line (``rl_numbers``), not only the console's

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name in RESERVED:
            raise ValueError(
                f"reward term name {self.name!r}: must be an identifier and none of {sorted(RESERVED)}"
            )

    def weight_in(self, recipe: ParavtRecipe) -> float:
        """This term's weight under ``recipe``."""
        return float(self.weight(recipe) if callable(self.weight) else self.weight)

    def score(self, inp: RewardInput) -> tuple[float, Any]:
        """(score, the fn's full result); the score as the fn gave it (a float() would turn a JSON 1 into
        1.0)."""
        result = self.fn(inp)
        return (result if isinstance(result, int | float) else result.score), result

    @property
    def metric(self) -> str:
        """Its key in ``step_metrics`` (the step's mean)."""
        return f"{self.name}_mean"

    @property
    def tag(self) -> str:
        """Its TensorBoard tag."""
        return f"reward/{self.name}"

    @property
    def shown_as(self) -> str:
        return self.label or self.name


def _accuracy(inp: RewardInput) -> AccuracyResult:
    return inp.accuracy


def _format(inp: RewardInput) -> Scored:
    return format_reward(
        inp.text,
        answer_suffix=inp.recipe.constrained.answer_suffix,
        anchor_weight=inp.recipe.anchoring.weight,
        unclosed_penalty=inp.recipe.anchoring.unclosed_penalty,
    )


def _tool(inp: RewardInput) -> Scored:
    return tool_reward(inp.calls, inp.accuracy.score)


def _format_weight(recipe: ParavtRecipe) -> float:
    return recipe.reward.format_weight


def _tool_weight(recipe: ParavtRecipe) -> float:
    return recipe.reward.tool_weight


ACCURACY = RewardTerm("accuracy", _accuracy, 1.0, label="acc")
FORMAT = RewardTerm("format", _format, _format_weight, label="fmt", short_line=False)  # before its weight
TOOL = RewardTerm("tool", _tool, _tool_weight, short_line=False)  # "tool calls" follows in the pod line
BUILT_IN = (ACCURACY, FORMAT, TOOL)

_terms: dict[str, RewardTerm] = {t.name: t for t in BUILT_IN}


def register_term(term: RewardTerm) -> RewardTerm:
    """Add ``term`` after the others (the total sums in order); a name already taken is refused."""
    if term.name in _terms:
        raise ValueError(f"a reward term named {term.name!r} is registered already")
    _terms[term.name] = term
    return term


def unregister_term(name: str) -> None:
    """Remove an added term (the built-in ones are the method and stay)."""
    if name in {t.name for t in BUILT_IN}:
        raise ValueError(f"{name!r} is a built-in reward term (weight it 0 in the recipe instead)")
    del _terms[name]


def reward_terms() -> tuple[RewardTerm, ...]:
    """Every term, built-in first, in the order the total sums them."""
    return tuple(_terms.values())


def term_names() -> tuple[str, ...]:
    return tuple(_terms)


def terms_text(metrics: Mapping[str, Any], *, short: bool = False) -> str:
    """``acc 0.500 fmt 0.250 tool 0.300`` from a step's metrics (``short``: the pod line's terms only)."""
    return " ".join(
        f"{t.shown_as} {float(metrics.get(t.metric, 0.0)):.3f}"
        for t in reward_terms()
        if t.short_line or not short
    )
