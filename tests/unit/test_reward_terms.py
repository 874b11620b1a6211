"""A reward term added through ``register_term`` and nothing else shows in every output: the breakdown and its
dict, the total, the step metrics, the TensorBoard tags, the curves, the trajectory text, the console and
pod-log lines, and an RL stage run end to end. Every expected value is worked out by hand."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console
from rich.text import Text

from paravt_core.config import ParavtRecipe
from paravt_core.rewards.compose import RewardBreakdown, acompose, compose, failed
from paravt_core.rewards.terms import (
    BUILT_IN,
    FORMAT,
    RESERVED,
    TOOL,
    RewardInput,
    RewardTerm,
    register_term,
    reward_terms,
    term_names,
    terms_text,
    unregister_term,
)
from paravt_core.rl.metrics import curve_keys, curves_figure, step_metrics
from paravt_core.tracking.progress import rl_numbers
from paravt_core.tracking.scalars import rl_scalars, rl_tags, trajectory_markdown
from tests.support.rl_support import tiny_rl_config
from tests.support.tracking_support import scalars

# The trace of tests/unit/test_rewards_format.py without an <answer>: R_acc 0 (no_answer), R_fmt .2 (think) + .2
# (anchor close) + .1 (balanced) = 0.5 under PARA-GRPO, no call -> R_tool 0; 39 characters.
SHORT = "<think>\nI look at the frames.</think> A"


def _brevity(inp: RewardInput) -> float:
    """The toy term: 1 for a text of at most 100 characters, else 0."""
    return 1.0 if len(inp.text) <= 100 else 0.0


@pytest.fixture
def brevity() -> Iterator[RewardTerm]:
    term = register_term(RewardTerm("brevity", _brevity, weight=0.5))
    yield term
    unregister_term("brevity")


@dataclass(frozen=True)
class _Call:
    parsed: bool = True
    executed: bool = True
    ok: bool = True


def _sample(reward: RewardBreakdown, calls: int = 0) -> SimpleNamespace:
    turn = SimpleNamespace(tokens=10, calls=[SimpleNamespace(ok=True, frames=2)] * calls)
    episode = SimpleNamespace(turns=[turn], calls=turn.calls, finish_reason="answer")
    return SimpleNamespace(reward=reward, episode=episode, nframes=8, policy_version=0)


def test_the_built_in_terms_and_their_weights_from_the_recipe() -> None:
    assert term_names() == ("accuracy", "format", "tool")
    recipe = ParavtRecipe.para_grpo(reward={"format_weight": 0.5, "tool_weight": 0.25})
    assert [t.weight_in(recipe) for t in BUILT_IN] == [1.0, 0.5, 0.25]
    assert (FORMAT.metric, FORMAT.tag, FORMAT.shown_as, TOOL.shown_as) == (
        "format_mean",
        "reward/format",
        "fmt",
        "tool",
    )


def test_an_added_term_is_in_the_breakdown_and_the_total(brevity: RewardTerm) -> None:
    """SHORT: 0 + 1 x 0.5 + 1 x 0 + 0.5 x 1 (39 characters) = 1.0; the same text padded past 100
    characters (spaces after the answer text: R_fmt unchanged, 0.5) scores brevity 0: total 0.5."""
    assert reward_terms()[-1] is brevity
    recipe = ParavtRecipe.para_grpo()
    out = compose(SHORT, [], "A", "mcq", recipe)
    assert out.scores == {"accuracy": 0.0, "format": pytest.approx(0.5), "tool": 0.0, "brevity": 1.0}
    assert (out.brevity, out.total) == (1.0, pytest.approx(1.0))
    assert out.to_dict()["brevity"] == 1.0
    assert asyncio.run(acompose(SHORT, [], "A", "mcq", recipe)) == out
    long = compose(SHORT + " " * 70, [], "A", "mcq", recipe)
    assert (long.format, long.brevity, long.total) == (pytest.approx(0.5), 0.0, pytest.approx(0.5))
    assert failed("reward_timeout").scores == dict.fromkeys(("accuracy", "format", "tool", "brevity"), 0.0)


def test_a_term_that_raises_zeroes_the_reward_with_its_reason() -> None:
    register_term(RewardTerm("broken", lambda inp: 1 / 0))
    try:
        out = compose(SHORT, [], "A", "mcq", ParavtRecipe.para_grpo())
        aout = asyncio.run(acompose(SHORT, [], "A", "mcq", ParavtRecipe.para_grpo()))
    finally:
        unregister_term("broken")
    assert (out.total, out.failure, out.broken) == (0.0, "reward_error:ZeroDivisionError", 0.0)
    assert aout == out


def test_names_are_checked_and_built_in_terms_stay(brevity: RewardTerm) -> None:
    """A term cannot shadow a field of the breakdown (nor reward_mean, reward/mean, ...)."""
    assert {f.name for f in dataclasses.fields(RewardBreakdown)} <= RESERVED
    for name in ("total", "reason", "reward", "mean", "not a name"):
        with pytest.raises(ValueError, match="must be an identifier"):
            RewardTerm(name, _brevity)
    with pytest.raises(ValueError, match="registered already"):
        register_term(RewardTerm("brevity", _brevity))
    with pytest.raises(ValueError, match="built-in"):
        unregister_term("format")
    with pytest.raises(AttributeError, match="no field or reward term 'length'"):
        _ = compose(SHORT, [], "A", "mcq", ParavtRecipe.para_grpo()).length


def test_an_added_term_is_in_the_step_metrics_tags_and_lines(brevity: RewardTerm) -> None:
    """Two samples, brevity 1 and 0: brevity_mean 0.5; reward/brevity carries it; the console line shows
    every term, the pod line acc and the added term (fmt and tool only in the console's)."""
    samples = [
        _sample(RewardBreakdown(1.5, accuracy=1.0, format=0.0, tool=0.0, brevity=1.0)),
        _sample(RewardBreakdown(0.5, accuracy=0.0, format=0.5, tool=0.0, brevity=0.0), calls=1),
    ]
    m = step_metrics(0, samples, {}, {})
    assert (m["accuracy_mean"], m["format_mean"], m["tool_mean"], m["brevity_mean"]) == (0.5, 0.25, 0.0, 0.5)
    keys = list(m)
    assert keys[keys.index("reward_std") + 1 : keys.index("format_compliance")] == [
        "accuracy_mean",
        "format_mean",
        "tool_mean",
        "brevity_mean",
    ]
    assert rl_tags()["reward/brevity"] == "brevity_mean"
    assert rl_scalars(m)["reward/brevity"] == 0.5
    assert terms_text(m) == "acc 0.500 fmt 0.250 tool 0.000 brevity 0.500"
    assert rl_numbers(m) == "reward 1.000 acc 0.500 brevity 0.500 tool calls 0.50/rollout staleness 0.0"


def test_an_added_term_has_its_curve_and_the_grid_grows_a_row(brevity: RewardTerm) -> None:
    """Seven curves: three rows of three, two places left empty; brevity at 1 every step is flat."""
    keys = curve_keys()
    assert keys == (
        "reward_mean",
        "accuracy_mean",
        "format_mean",
        "tool_mean",
        "brevity_mean",
        "format_compliance",
        "tool_call_rate",
    )
    fig = curves_figure([{"step": s, "reward_mean": s / 10, "brevity_mean": 1.0} for s in range(3)])
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert (len(fig.axes), len(shown)) == (9, 7)
    assert [ax.get_title() for ax in shown][4] == "brevity_mean (flat at 1)"
    assert tuple(fig.get_size_inches()) == (12.0, 9.0)


def test_the_six_built_in_curves_keep_their_two_by_three_grid() -> None:
    fig = curves_figure([{"step": 0}])
    assert (len(fig.axes), tuple(fig.get_size_inches())) == (6, (12.0, 6.0))


def test_an_added_term_is_in_the_trajectory_text(brevity: RewardTerm) -> None:
    reward = RewardBreakdown(1.0, accuracy=0.0, format=0.5, tool=0.0, brevity=1.0).to_dict()
    text = trajectory_markdown({"step": 0, "reward": reward, "episode": {"finish_reason": "answer"}})
    assert (
        "**reward** 1.000 (accuracy 0.000, format 0.500, tool 0.000, brevity 1.000), finish: answer" in text
    )


def _bonus(inp: RewardInput) -> float:
    return 0.25


def test_an_rl_run_shows_an_added_term_everywhere(
    rl_data: str,
    tiny_model_dir: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A constant term, 0.25 at weight 2: its mean is 0.25 every step (metrics, TensorBoard, the console),
    each sampled trajectory's total is the built-in sum + 0.5 (0 when the degenerate guard trips)."""
    from paravt_core.rl import stage

    printed = io.StringIO()
    monkeypatch.setattr(stage, "console", Console(file=printed, width=400, force_terminal=True))
    monkeypatch.setattr(stage, "is_terminal", lambda: True)  # the console line, not the pod-log progress
    out = tmp_path / "rl"
    cfg = tiny_rl_config(rl_data, tiny_model_dir, str(out), "steps=1", "tracking.backends=[tensorboard]")
    register_term(RewardTerm("bonus", _bonus, weight=2.0))
    try:
        stage.run(cfg)
    finally:
        unregister_term("bonus")
    (m,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert m["bonus_mean"] == 0.25
    assert scalars(out / "tensorboard")["reward/bonus"] == [(1, 0.25)]
    (line,) = [x for x in Text.from_ansi(printed.getvalue()).plain.splitlines() if x.startswith("rl step ")]
    assert f"tool {m['tool_mean']:.3f} bonus 0.250) loss" in line
    rows = [json.loads(x) for x in (out / "trajectories" / "step_00000000.jsonl").read_text().splitlines()]
    assert rows
    for r in (row["reward"] for row in rows):
        built_in = r["accuracy"] + r["format"] + r["tool"]  # para_grpo: both weights 1
        assert r["bonus"] == 0.25
        assert r["total"] == (0.0 if r["degenerate"] else pytest.approx(built_in + 0.5))
