"""The tracked scalars of each stage, named in groups (``train/``, ``reward/``, ...) that TensorBoard shows as
sections, made from the numbers the stage already has on the host (its per-step record): no tensor is read
here."""

from __future__ import annotations

import math
from typing import Any

from paravt_core.rewards.terms import reward_terms
from paravt_core.train.flops import six_n_flops, utilisation

# Dense bf16 peaks per GPU (vendors' data sheets) for the SFT MFU; matched on the device's name. The data
# sheet's 989 TFLOP/s for H100 / H200 is more than a kernel reaches: an 8192³ bf16 matmul on a lent H200
# measured 769-798 TFLOP/s (2026). MFU is quoted against the data sheet (the convention); ``tracking.
# peak_tflops`` sets another peak.
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10G": 125.0, "L4": 121.0}


def peak_tflops(device_name: str, configured: float = 0.0) -> float:
    """``configured`` when set, else the table's entry whose key is in ``device_name``; 0: unknown."""
    if configured:
        return configured
    return next((v for k, v in PEAK_TFLOPS.items() if k in device_name.upper()), 0.0)


def mfu(model_flops: float, seconds: float, world: int, peak: float) -> float | None:
    """Model-FLOPs utilisation: the step's model FLOPs (``paravt_core.train.flops``: counted from the
    batch, recompute excluded) done in ``seconds`` over the peak of ``world`` devices (``peak`` in TFLOP/s);
    None when the peak is unknown (a CPU)."""
    return utilisation(model_flops, seconds, world, peak)


def mfu_6n(tokens_per_s: float, parameters: int, world: int, peak: float) -> float | None:
    """The older estimate, kept only as ``perf/mfu_6n``: 6 x all parameters per token (the frozen vision
    tower and the embeddings counted as trained on every token, attention left out) over the same peak."""
    return utilisation(six_n_flops(parameters, 1) * tokens_per_s, 1.0, world, peak)


def _finite(out: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in out.items() if isinstance(v, int | float) and math.isfinite(v)}


def sft_scalars(
    record: dict[str, Any], mfu_value: float | None = None, mfu_6n_value: float | None = None
) -> dict[str, float]:
    """``perf/mfu`` (model FLOPs of the batch) and ``perf/mfu_6n`` (6 x parameters) when given (a GPU)."""
    out: dict[str, Any] = {
        "train/loss": record["loss"],
        "train/learning_rate": record["lr"],
        "train/grad_norm": record["grad_norm"],
        "perf/tokens_per_s": record["tokens_per_s"],
        "perf/step_time_s": record["step_time_s"],
        "data/padding_share": record["padding_share"],
        "data/rows_dropped": record["rows_dropped"],
    }
    if mfu_value is not None:
        out["perf/mfu"] = mfu_value
    if mfu_6n_value is not None:
        out["perf/mfu_6n"] = mfu_6n_value
    if "peak_mem_gib" in record:
        out["perf/peak_memory_gib"] = record["peak_mem_gib"]
    return _finite(out)


REWARD_TAGS = {"reward/mean": "reward_mean", "reward/std": "reward_std", "reward/max": "reward_max"}
STEP_TAGS = {  # after the reward terms' tags
    "rollout/format_compliance": "format_compliance",
    "rollout/response_tokens": "response_tokens_mean",
    "rollout/frames_requested": "frames_requested_mean",
    "tools/calls_per_turn": "calls_per_turn",
    "tools/calls_per_rollout": "calls_per_rollout",
    "tools/parallel_turn_share": "parallel_turn_share",
    "tools/call_rate": "tool_call_rate",
    "learner/loss": "loss",
    "learner/kl_ref": "kl_ref",
    "learner/approx_kl": "approx_kl",
    "learner/clip_fraction": "clip_fraction",
    "learner/dropped_fraction": "dropped_fraction",
    "learner/grad_norm": "grad_norm",
    "async/staleness_mean": "staleness_mean",
    "async/staleness_max": "staleness_max",
    "time/rollout_s": "rollout_s",
    "time/learn_s": "learner_s",
    "time/push_s": "sync_s",
}


def rl_tags() -> dict[str, str]:
    """TensorBoard tag -> ``step_metrics`` key: the reward, each reward term (``reward/<term>``), the rest."""
    return {**REWARD_TAGS, **{t.tag: t.metric for t in reward_terms()}, **STEP_TAGS}


def rl_scalars(metrics: dict[str, Any]) -> dict[str, float]:
    out: dict[str, Any] = {tag: metrics[key] for tag, key in rl_tags().items() if key in metrics}
    for k, n in (metrics.get("k_histogram") or {}).items():  # nFrames gating: rollouts per K this step
        out[f"gating/rollouts_k{k}"] = n
    for k, r in (metrics.get("reward_by_k") or {}).items():
        out[f"gating/reward_k{k}"] = r
    return _finite(out)


WITH_TOOL = ("agentic",)


def eval_scalars(results: dict[str, Any]) -> dict[str, float]:
    """Per benchmark and protocol (with the tool: agentic; without: direct, reasoning): the headline metric
    and the error count; plus the totals."""
    out: dict[str, Any] = {}
    for protocol, benches in results.get("protocols", {}).items():
        for bench, m in benches.items():
            headline = m.get("headline")
            if headline and isinstance(m.get(headline), int | float):
                out[f"eval/{bench}/{protocol}/{headline}"] = m[headline]
            out[f"eval/{bench}/{protocol}/errors"] = m.get("errors", 0)
            out[f"eval/{bench}/{protocol}/scored"] = m.get("scored", 0)
    totals = results.get("totals", {})
    for key in ("samples", "errors", "error_share"):
        if key in totals:
            out[f"eval/total/{key}"] = totals[key]
    return _finite(out)


def flatten_params(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """The resolved config as ``a.b.c -> text`` (lists as their YAML-ish repr), for MLflow params."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten_params(value, f"{name}."))
        else:
            out[name] = str(value)
    return out


def _indented(text: str) -> str:
    """Markdown code block by indentation (a model's text may hold backticks)."""
    return "\n".join("    " + line for line in (text or "").splitlines()) or "    (empty)"


def trajectory_markdown(line: dict[str, Any]) -> str:
    """One sampled RL episode (a ``trajectories/*.jsonl`` line) as Markdown for TensorBoard's text tab: the
    question and gold answer, the reward and its parts, then each main-agent turn's text and its tool calls."""
    prompt, reward, episode = line.get("prompt", {}), line.get("reward", {}), line.get("episode", {})
    parts = [
        f"**step {line.get('step', 0) + 1}**, group {line.get('group')}, K = {line.get('nframes')} frames, "
        f"policy version {line.get('policy_version')}",
        f"**question** ({prompt.get('row_id', '')}):",
        _indented(str(prompt.get("question", ""))),
        f"**gold**: `{prompt.get('gold', '')}`",
        "**reward** {:.3f} ({}), finish: {}".format(
            float(reward.get("total") or 0.0),
            ", ".join(f"{t.name} {float(reward.get(t.name) or 0.0):.3f}" for t in reward_terms()),
            episode.get("finish_reason", ""),
        ),
    ]
    for turn in episode.get("turns", []):
        calls = ", ".join(f"{c.get('name')}({c.get('arguments')})" for c in turn.get("calls", []))
        parts.append(
            f"**turn {turn.get('turn')}** ({turn.get('tokens')} tokens){': ' + calls if calls else ''}"
        )
        parts.append(_indented(str(turn.get("text", ""))))
    return "\n\n".join(parts)
