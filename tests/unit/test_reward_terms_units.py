"""``paravt_core.rewards.terms``'s console text of a step whose metrics lack a term (an early step, a metrics
file written before a term was added): that term reads 0.000, in the terms' order; and the tool term's score
from the episode's calls and its accuracy, by hand. In-process."""

from __future__ import annotations

from types import SimpleNamespace

from paravt_core.config import ParavtRecipe
from paravt_core.rewards.accuracy import AccuracyResult
from paravt_core.rewards.terms import TOOL, RewardInput, terms_text


def test_a_term_missing_from_the_metrics_reads_zero():
    assert terms_text({}) == "acc 0.000 fmt 0.000 tool 0.000"
    assert terms_text({"format_mean": 0.25}) == "acc 0.000 fmt 0.250 tool 0.000"
    assert terms_text({}, short=True) == "acc 0.000"  # the pod line: only the terms marked for it


def test_the_tool_term_reads_the_episodes_calls_and_its_accuracy():
    """One call that ran and reported, a right answer: level 0.3 + the 0.5 bonus = 0.8 (docs/method.md §5);
    the same call with a wrong answer: 0.3; no call: 0."""
    ran = SimpleNamespace(parsed=True, executed=True, ok=True)

    def score(calls, acc: float) -> float:
        inp = RewardInput("", calls, "A", "mcq", "Q", ParavtRecipe.para_grpo(), AccuracyResult(acc))
        return TOOL.score(inp)[0]

    assert (score([ran], 1.0), score([ran], 0.0), score([], 1.0)) == (0.8, 0.3, 0.0)
