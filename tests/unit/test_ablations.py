"""The ablation study's pieces, every expected value worked out by hand: the two recipe switches the paper's
rows need (R_tool weight, the unclosed-think penalty), each shipped row resolving to the knobs it names,
kappa and the final-steps f_tau, and the comparison's ours / paper / difference cells."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from paravt_core import ablation, storage
from paravt_core.config import ConfigError, EvalConfig, load_config
from paravt_core.report.ablation import cell_text, collect, markdown, write_report
from paravt_core.rewards.compose import RewardBreakdown, compose
from paravt_core.rewards.format import format_reward
from paravt_core.rl.config import RlConfig
from paravt_core.rl.metrics import final_summary, step_metrics
from tests.support.paths import ROOT

PAPER = ROOT / "configs" / "ablations" / "paper.yaml"
BASE_RL = ROOT / "configs" / "rl" / "paragrpo_8b.yaml"

THINK = "<think>\nI look at the frames."  # forced prefix + 21 characters (>= 10)
CALL = '<tool_call>\n{"name": "crop_video", "arguments": {"start_time": 2, "end_time": 5}}\n</tool_call>'
FULL = THINK + "</think>\n" + CALL + "\n<think>\nthe report says red</think><answer>A</answer>"


class Call:
    parsed = executed = ok = True
    frames = 2  # frames its crop fetched


# --- the two switches -------------------------------------------------------------------------------------


def test_unclosed_penalty_switch_by_hand():
    text = THINK + "<answer>B</answer>"  # think never closed; its body runs until <answer>
    # PARA: .2 think + .3 answer + .2 closed + lambda .5 x (-.3) unclosed, unbalanced (no +.1) = 0.55
    assert format_reward(text, answer_suffix=True, anchor_weight=0.5).score == pytest.approx(0.55)
    # the penalty off: .2 + .3 + .2 = 0.7
    off = format_reward(text, answer_suffix=True, anchor_weight=0.5, unclosed_penalty=False)
    assert off.score == pytest.approx(0.7) and off.parts["anchor_unclosed"] == 0.0
    # vanilla (lambda 0) has no penalty to remove: .3 + .2 + .1 = 0.6 either way
    for flag in (True, False):
        vanilla = format_reward(text, answer_suffix=False, anchor_weight=0.0, unclosed_penalty=flag)
        assert vanilla.score == pytest.approx(0.6)


def _recipe(*overrides: str):
    return load_config(RlConfig, BASE_RL, list(overrides)).paravt


def test_tool_weight_and_unclosed_penalty_through_the_override_grammar():
    # FULL, gold A: R_acc 1, R_fmt 1.45 clipped to 1.0, R_tool 0.3 (a call ran) + 0.5 (correct) = 0.8
    assert compose(FULL, [Call()], "A", "mcq", _recipe()).total == pytest.approx(2.8)
    no_tool = compose(FULL, [Call()], "A", "mcq", _recipe("paravt.reward.tool_weight=0"))
    assert (no_tool.total, no_tool.tool) == pytest.approx((2.0, 0.8))  # R_tool still reported, weighted 0
    half = compose(FULL, [Call()], "A", "mcq", _recipe("paravt.reward.tool_weight=0.5"))
    assert half.total == pytest.approx(2.4)  # 1 + 1 + 0.5 x 0.8
    # open think + answer, right letter, one call: 1 + 0.55 + 0.8 = 2.35; without the penalty 1 + 0.7 + 0.8
    open_think = THINK + CALL + "<answer>A</answer>"  # body stops at the call: .2, no think-before-tool
    on = compose(open_think, [Call()], "A", "mcq", _recipe())
    off = compose(open_think, [Call()], "A", "mcq", _recipe("paravt.anchoring.unclosed_penalty=false"))
    assert (on.format, on.total) == pytest.approx((0.55, 2.35))
    assert (off.format, off.total) == pytest.approx((0.7, 2.5))


def test_tool_weight_must_not_be_negative():
    with pytest.raises(ConfigError, match="tool_weight: Input should be greater than or equal to 0"):
        _recipe("paravt.reward.tool_weight=-1")


# --- the shipped study ------------------------------------------------------------------------------------

# (think_prefix, answer_suffix, anchoring weight, nframes gating, tool weight, unclosed penalty, max_parallel)
EXPECTED_KNOBS = {
    "vanilla_grpo": (False, False, 0.0, False, 1.0, True, 5),
    "para_grpo": (True, True, 0.5, True, 1.0, True, 5),
    "anchoring_only": (True, True, 0.5, False, 1.0, True, 5),
    "gating_only": (False, False, 0.0, True, 1.0, True, 5),
    "no_tool_reward": (True, True, 0.5, True, 0.0, True, 5),
    "no_unclosed_penalty": (True, True, 0.5, True, 1.0, False, 5),
    "sequential_tools": (True, True, 0.5, True, 1.0, True, 1),
}


def test_every_paper_row_sets_the_knobs_it_names():
    study = ablation.load_study_file(PAPER)
    assert study.names() == ["sft_only", *EXPECTED_KNOBS]
    assert not study.variant("sft_only").rl
    for name, expected in EXPECTED_KNOBS.items():
        cfg = load_config(RlConfig, BASE_RL, ablation.rl_overrides(study, name, []))
        p = cfg.paravt
        got = (
            p.constrained.think_prefix,
            p.constrained.answer_suffix,
            p.anchoring.weight,
            p.gating.nframes_gating,
            p.reward.tool_weight,
            p.anchoring.unclosed_penalty,
            cfg.agent.max_parallel,
        )
        assert got == expected, name
    # the sequential row also evaluates one call per turn; the others keep the shared eval config
    ev = load_config(EvalConfig, None, ablation.eval_overrides(study, "sequential_tools", []))
    assert ev.agent.max_parallel == 1
    assert ablation.eval_overrides(study, "para_grpo", ["x=1"]) == ["x=1"]


def test_paper_numbers_are_the_ones_spec_quotes():
    study = ablation.load_study_file(PAPER)
    assert study.variant("para_grpo").paper == {
        "f_tau": 0.64,
        "videomme": 62.1,
        "videomme_wsub": 69.4,
        "lvbench": 39.8,
        "mlvu": 65.0,
    }
    assert study.variant("sequential_tools").paper == {
        "videomme": 61.4,
        "videomme_wsub": 68.8,
        "lvbench": 37.5,
        "mlvu": 64.1,
    }
    assert study.variant("vanilla_grpo").paper == {"f_tau": 0.13}
    assert "2605.20342" in study.source


def test_study_rejects_repeated_and_unsafe_names():
    with pytest.raises(ValueError, match="repeat"):
        ablation.load_study("variants: [{name: a}, {name: a}]")
    with pytest.raises(ValueError, match="lower-case"):
        ablation.load_study("variants: [{name: ../x}]")
    with pytest.raises(ValueError, match="key=value"):
        ablation.load_study("variants: [{name: a, rl_overrides: [oops]}]")
    assert ablation.split_pair("para_grpo::videomme") == ("para_grpo", "videomme")
    assert ablation.eval_pairs(["a", "b"], ["x"]) == ["a::x", "b::x"]


# --- kappa and f_tau --------------------------------------------------------------------------------------


def _sample(calls: int, compliant: bool, fmt: float):
    first = SimpleNamespace(tokens=10, calls=[Call()] * calls)  # every call in the first of two turns
    episode = SimpleNamespace(turns=[first, SimpleNamespace(tokens=10, calls=[])], calls=first.calls,
                              finish_reason="answer")  # fmt: skip
    reward = RewardBreakdown(total=fmt, accuracy=0.0, format=fmt, tool=0.0, compliant=compliant)
    return SimpleNamespace(reward=reward, episode=episode, nframes=8, policy_version=0)


def test_kappa_is_calls_per_rollout_and_f_tau_the_compliant_share():
    samples = [_sample(3, True, 1.0), _sample(0, False, 0.2), _sample(1, True, 0.9), _sample(0, False, 0.5)]
    m = step_metrics(0, samples, {}, {})
    assert m["calls_per_rollout"] == pytest.approx(1.0)  # (3 + 0 + 1 + 0) / 4 rollouts
    assert m["calls_per_turn"] == pytest.approx(0.5)  # 4 calls / 8 turns
    assert m["format_compliance"] == pytest.approx(0.5)  # 2 of 4
    assert m["format_mean"] == pytest.approx(0.65)  # (1 + .2 + .9 + .5) / 4
    # the rewards' population std: deviations .35, -.45, .25, -.15 -> sqrt((.1225 + .2025 + .0625 + .0225) / 4)
    assert m["reward_std"] == pytest.approx(0.1025**0.5)
    assert m["parallel_turn_share"] == pytest.approx(
        1 / 8
    )  # one turn (the 3-call one) of 8 has parallel calls
    assert m["frames_requested_mean"] == pytest.approx(2.0)  # (3 + 0 + 1 + 0) calls x 2 frames / 4 rollouts


def test_final_summary_averages_the_last_steps_and_keeps_the_curve():
    history = [
        {"step": 0, "format_compliance": 0.0, "calls_per_rollout": 1.0, "format_mean": 0.1},
        {"step": 1, "format_compliance": 0.5, "calls_per_rollout": 2.0, "format_mean": 0.3},
        {"step": 2, "format_compliance": 1.0, "calls_per_rollout": 4.0, "format_mean": 0.5},
    ]
    s = final_summary(history, 2)
    assert (s["final_steps"], s["f_tau_final"], s["kappa_final"]) == pytest.approx((2, 0.75, 3.0))
    assert s["format_reward_final"] == pytest.approx(0.4)
    assert s["f_tau_curve"] == [[1, 0.0], [2, 0.5], [3, 1.0]]
    assert final_summary(history, 10)["f_tau_final"] == pytest.approx(0.5)  # shorter run: every step


# --- the comparison ---------------------------------------------------------------------------------------

STUDY = """
title: t
source: the paper
benchmarks: [videomme, lvbench]
variants:
  - {name: para_grpo, paper: {f_tau: 0.64, videomme: 62.1, lvbench: 39.8}}
  - {name: sft_only, rl: false}
"""


def _write_eval(out: str, bench: str, value: float, preset: str | None) -> None:
    results = {
        "preset": preset,
        "prompt_checksum": "c0ffee",
        "protocols": {"agentic": {bench: {"headline": "accuracy", "accuracy": value}}},
        "config": {"agent": {"overview_frames": 64, "max_turns": 3, "max_parallel": 5}},
    }
    storage.write_bytes(storage.join(out, "results.json"), json.dumps(results).encode())
    storage.mark_complete(out, {"stage": "eval"})


def test_comparison_rows_by_hand(tmp_path):
    study = ablation.load_study(STUDY)
    root = str(tmp_path)
    rl = ablation.rl_output(root, "para_grpo")
    summary = {"f_tau_final": 0.5, "kappa_final": 2.25, "f_tau_curve": [[1, 0.25], [2, 0.5]]}
    storage.write_bytes(storage.join(rl, "metrics.json"), json.dumps(summary).encode())
    storage.mark_complete(rl, {"stage": "rl"})
    _write_eval(
        storage.join(ablation.eval_prefix(root, "para_grpo"), "videomme"), "videomme", 60.0, "release"
    )
    _write_eval(storage.join(ablation.eval_prefix(root, "para_grpo"), "lvbench"), "lvbench", 41.0, "release")
    _write_eval(storage.join(ablation.eval_prefix(root, "sft_only"), "videomme"), "videomme", 55.5, None)

    para, sft = collect(study, root)
    assert para.ours == {"f_tau": 0.5, "kappa": 2.25, "videomme": 60.0, "lvbench": 41.0}
    assert para.diff == pytest.approx({"f_tau": -0.14, "kappa": None, "videomme": -2.1, "lvbench": 1.2})
    assert cell_text(para, "videomme") == "60.0 / 62.1 (-2.1)"
    assert cell_text(para, "f_tau") == "0.500 / 0.640 (-0.140)"
    assert cell_text(para, "kappa") == "2.250 / —"
    assert para.protocol == "agentic, preset release, 64 frames, 3 rounds x 5 calls"
    assert para.checksum == "c0ffee" and para.paper_protocol and para.curve == [[1, 0.25], [2, 0.5]]
    # sft_only: no RL to read, lvbench never ran (missing, not zero), not the paper's preset
    assert sft.ours == {"f_tau": None, "kappa": None, "videomme": 55.5, "lvbench": None}
    assert sft.missing == ["lvbench"] and not sft.paper_protocol
    md = markdown(study, [para, sft])
    assert (
        "| para_grpo | 0.500 / 0.640 (-0.140) | 2.250 / — | 60.0 / 62.1 (-2.1) | 41.0 / 39.8 (+1.2) |" in md
    )
    assert "sft_only: lvbench" in md and "not the paper's protocol" in md

    result = write_report(study, root)
    out = ablation.report_output(root)
    assert storage.is_complete(out)
    assert result["metrics"]["para_grpo.videomme"] == 60.0 and "sft_only.f_tau" not in result["metrics"]
    page = Path(out, "report.html").read_text()
    assert "60.0 / 62.1" in page and "data:image/png;base64," in page
    assert Path(out, "f_tau_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
