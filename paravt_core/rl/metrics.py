"""Per-step RL metrics from the step's samples and the learner's statistics, plus curves and trajectories.

``step_metrics`` flattens everything into one JSON-able dict per step (one line of ``metrics.jsonl``):
the reward and each reward term's mean (``<term>_mean``, one per ``reward_terms()``), format compliance,
tool-call rate, calls per turn and per rollout, finish reasons, the K histogram and the mean reward by K,
response length, KL, clip and dropped-token fractions, staleness, timings. ``final_summary`` condenses the
history into what the paper's ablation table reports: f_tau (format compliance, the share of rollouts with
the whole think -> answer flow and balanced tags; the paper's "format compliance 0.13 -> 0.64") and kappa
(tool calls per rollout) averaged over the final steps, plus the per-step f_tau curve (the paper's
vanilla-GRPO format collapse is a curve, not a number).
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from paravt_core.rewards.terms import reward_terms
from paravt_core.run_metrics import figure_png, pyplot

from .rollout import Sample


def curve_keys() -> tuple[str, ...]:
    """The curves' metrics: the reward, each term's mean (``reward_terms()``), format compliance, tool-call
    rate."""
    return ("reward_mean", *(t.metric for t in reward_terms()), "format_compliance", "tool_call_rate")


def __getattr__(name: str) -> Any:
    """``CURVES``: ``curve_keys()`` when read, so a term registered after this import is in it."""
    if name == "CURVES":
        return curve_keys()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def step_metrics(step: int, samples: Sequence[Sample], learner: dict[str, float], extra: dict[str, Any]):
    rewards = [s.reward for s in samples]
    episodes = [s.episode for s in samples]
    turns = sum(len(e.turns) for e in episodes)
    calls = sum(len(e.calls) for e in episodes)
    by_k: dict[int, list[float]] = defaultdict(list)
    for s in samples:
        by_k[s.nframes].append(s.reward.total)
    generated = [sum(t.tokens for t in e.turns) for e in episodes]
    totals = [r.total for r in rewards]
    mean = _mean(totals)
    out: dict[str, Any] = {
        "step": step,
        "samples": len(samples),
        "reward_mean": _mean([r.total for r in rewards]),
        "reward_max": max((r.total for r in rewards), default=0.0),
        "reward_std": _mean([(x - mean) ** 2 for x in totals]) ** 0.5,  # population std of the step's rewards
        **{t.metric: _mean([r.scores.get(t.name, 0.0) for r in rewards]) for t in reward_terms()},
        "format_compliance": _mean([float(r.compliant) for r in rewards]),
        "degenerate": sum(r.degenerate for r in rewards),
        "reward_failures": sum(r.failure is not None for r in rewards),
        "tool_call_rate": _mean([float(bool(e.calls)) for e in episodes]),
        "calls_per_turn": calls / turns if turns else 0.0,
        "calls_per_rollout": calls / len(episodes) if episodes else 0.0,  # kappa
        "parallel_turn_share": _share(sum(len(t.calls) > 1 for e in episodes for t in e.turns), turns),
        "frames_requested_mean": _mean([float(sum(c.frames for c in e.calls)) for e in episodes]),
        "calls_succeeded": sum(c.ok for e in episodes for c in e.calls),
        "finish_reasons": dict(Counter(e.finish_reason for e in episodes)),
        "acc_reasons": dict(Counter(r.reason for r in rewards if r.reason)),
        "k_histogram": {str(k): len(v) for k, v in sorted(by_k.items())},
        "reward_by_k": {str(k): _mean(v) for k, v in sorted(by_k.items())},
        "response_tokens_mean": _mean([float(g) for g in generated]),
        "policy_versions": sorted({s.policy_version for s in samples}),
    }
    out.update(learner)
    out.update(extra)
    return out


def trajectory_lines(step: int, samples: Sequence[Sample], count: int, seed: int) -> list[str]:
    """JSON lines of ``count`` samples drawn reproducibly from the step (for inspection)."""
    if count <= 0 or not samples:
        return []
    chosen = random.Random(f"{seed}/{step}").sample(list(samples), min(count, len(samples)))
    return [json.dumps({"step": step, **s.to_dict()}, default=str) for s in chosen]


def curves_figure(history: Sequence[dict[str, Any]]) -> Any:
    """One panel per curve in ``curve_keys()``, three to a row (x: step, integer ticks); a panel whose values
    never change says "flat at <value>" in its title, so a straight line is not read as a scale artefact."""
    from matplotlib.ticker import MaxNLocator

    keys = curve_keys()
    rows = math.ceil(len(keys) / 3)
    fig, axes = pyplot().subplots(rows, 3, figsize=(12, 3 * rows), squeeze=False, constrained_layout=True)
    panels = list(axes.flat)
    for ax in panels[len(keys) :]:  # the last row's empty places
        ax.set_visible(False)
    steps = [m["step"] + 1 for m in history]  # counted from 1, as the console prints "rl step 1/N"
    for ax, key in zip(panels[: len(keys)], keys, strict=True):
        values = [float(m.get(key, 0.0)) for m in history]
        ax.plot(steps, values, marker="o", markersize=3)
        flat = len(values) > 1 and max(values) == min(values)
        ax.set_title(f"{key} (flat at {values[0]:.3g})" if flat else key)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    return fig


def curves_png(history: Sequence[dict[str, Any]]) -> bytes:
    """``curves_figure`` as PNG."""
    return figure_png(curves_figure(history), dpi=80)


def final_summary(history: Sequence[dict[str, Any]], final_steps: int) -> dict[str, Any]:
    """f_tau and kappa averaged over the last ``final_steps`` steps (fewer when the run is shorter), and the
    per-step f_tau / R_fmt series as ``[step, value]`` pairs (steps counted from 1, as the console does)."""
    tail = list(history)[-final_steps:] if final_steps > 0 else []
    return {
        "final_steps": len(tail),
        "f_tau_final": _mean([float(m.get("format_compliance", 0.0)) for m in tail]),
        "kappa_final": _mean([float(m.get("calls_per_rollout", 0.0)) for m in tail]),
        "format_reward_final": _mean([float(m.get("format_mean", 0.0)) for m in tail]),
        "f_tau_curve": [[m["step"] + 1, float(m.get("format_compliance", 0.0))] for m in history],
        "format_reward_curve": [[m["step"] + 1, float(m.get("format_mean", 0.0))] for m in history],
    }
