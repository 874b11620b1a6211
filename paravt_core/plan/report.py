"""``paravt plan``: the capacity plan of the SFT and RL recipes on N GPUs.

Memory is measured (``memory.measure`` runs the trainers' real step on fake tensors); the SGLang side and the
times are arithmetic on the model's shapes with the assumptions printed next to the result. The time model
counts FLOPs with the trainers' own rule (``paravt_core.train.flops``) on the same synthetic pack the memory
is measured on: model FLOPs for MFU, and the recompute on top as hardware FLOPs, which set the time:
``step time = hardware FLOPs / (GPUs x peak x HFU)``, HFU being a recorded GPU run's hardware-FLOPs
utilisation (or the assumed MFU at this plan's own recompute share when none is recorded).
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paravt_core.cli_errors import UsageError
from paravt_core.train.flops import PackFacts, StepFlops, model_shapes, pack_facts, pack_flops, step_flops

GIB = 2**30
SHIPPED_CONFIG = Path(__file__).with_name(
    "qwen3_vl_8b_instruct.json"
)  # Qwen/Qwen3-VL-8B-Instruct's config.json


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_bytes: int
    bf16_flops: float  # dense peak, FLOP/s
    usable_fraction: float  # what the CUDA context, NCCL buffers and allocator fragmentation leave


GPUS = {
    # H100 SXM 80 GB: 989 dense bf16 TFLOP/s (NVIDIA's data sheet, the peak recorded MFUs are quoted against,
    # so it cancels out of the time; an 8192³ bf16 matmul on a lent H200 measured 769-798); nvidia-smi
    # reports 81559 MiB
    "h100-80g": Gpu("h100-80g", 81559 * 2**20, 989e12, 0.95),
}

MFU = 0.40  # assumed model-FLOPs utilisation of the learners (bf16, FSDP2, sdpa) when no GPU run is recorded
GPU_RUNS = Path(__file__).resolve().parents[2] / "docs" / "gpu-runs.md"
_RUN_MARKER = re.compile(r"<!-- gpu-run: (\{.*?\}) -->")
# A marker without "rule" predates the model-FLOPs rule: its "mfu" is 6 x parameters x tokens/s. The only
# such run (2026-11-26, Qwen3-VL-2B shapes, the synthetic set under the SFT recipe) is converted by its own
# packs' ratios, rebuilt on the CPU from the same data (benchmarks/flops_of_run.py; its step 2, the
# recorded median): model FLOPs 0.767 x and hardware FLOPs (recompute counted) 0.955 x the 6N count.
LEGACY_6N_RATIOS = {"mfu": 0.767, "hfu": 0.955}


@dataclass(frozen=True)
class Utilisation:
    mfu: float  # model FLOPs utilisation (paravt_core.train.flops)
    hfu: float | None  # hardware FLOPs (recompute counted) utilisation; None: not known (the assumption)
    source: str


def learner_utilisation(runs: Path | None = None) -> Utilisation:
    """The latest run in ``docs/gpu-runs.md`` that recorded an MFU (its ``<!-- gpu-run: {...} -->`` line,
    written by ``make gpu-profile``), else the assumed :data:`MFU`. Markers with ``"rule": "model"`` are
    taken as they are; one without a rule is the 6N-rule run converted by :data:`LEGACY_6N_RATIOS`;
    markers of any other rule are skipped (no rule is mixed into another)."""
    path = GPU_RUNS if runs is None else runs
    text = path.read_text() if path.is_file() else ""
    for raw in reversed(_RUN_MARKER.findall(text)):
        run = json.loads(raw)
        if not run.get("mfu"):
            continue
        where = f"measured: {path.name}, {run.get('date')} on {run.get('device')}"
        if run.get("rule") == "model":
            hfu = run.get("hfu")
            return Utilisation(float(run["mfu"]), float(hfu) if hfu else None, where)
        if "rule" not in run:
            r = LEGACY_6N_RATIOS
            return Utilisation(
                float(run["mfu"]) * r["mfu"],
                float(run["mfu"]) * r["hfu"],
                f"{where}, 6N-rule MFU {run['mfu']:.1%} x {r['mfu']} to the model rule",
            )
    return Utilisation(MFU, None, "assumed: no GPU run recorded")


def learner_mfu(runs: Path | None = None) -> tuple[float, str]:
    """(model-rule MFU, where it comes from): :func:`learner_utilisation` without the HFU."""
    u = learner_utilisation(runs)
    return u.mfu, u.source


def timed(flops: StepFlops, u: Utilisation) -> tuple[float, float]:
    """(HFU, peak-equivalent FLOPs: over GPUs x peak FLOP/s, the time). The time of ``flops`` is their
    hardware FLOPs (the recompute runs on the GPU too) over HFU x peak. Without a measured HFU the assumed
    MFU is turned into one at these FLOPs' own recompute share (then time = model FLOPs / (MFU x peak))."""
    hfu = u.hfu if u.hfu is not None else u.mfu * flops.hardware / max(flops.model, 1.0)
    return hfu, flops.hardware / hfu


ROLLOUT_TOKENS_PER_S = 2500.0  # assumed decode throughput of one SGLang server (8B, bf16, ~56 sequences)
PUBLISHED_HOURS = {"sft": 36.0, "rl": 50.0}  # docs/method.md §5, on 8 GPUs
PUBLISHED_GPUS = 8  # the recipes' batch sizes are the published ones, chosen for 8 GPUs


def stderr_progress(line: str) -> None:
    """What ``paravt plan`` says while it computes (stderr: stdout stays the plan, for ``| jq`` too)."""
    print(f"paravt plan: {line}", file=sys.stderr, flush=True)


def batch_warning(cfg: Any, gpus: int, length: int) -> str | None:
    """SFT's global batch is GPUs x trainer.grad_accum packs: on another GPU count than the recipe's 8 the
    batch (and with it the optimisation) changes. The warning names both and the grad_accum that comes
    closest to the recipe's batch."""
    if gpus == PUBLISHED_GPUS:
        return None
    accum = cfg.trainer.grad_accum
    target = PUBLISHED_GPUS * accum
    new = gpus * accum
    keep = max(1, round(target / gpus))
    how = "keeps it" if keep * gpus == target else f"comes closest ({keep * gpus} packs)"
    return (
        f"warning: on {gpus} GPUs the global batch is {gpus} x {accum} = {new} packs of "
        f"{length} tokens, not the recipe's {PUBLISHED_GPUS} x {accum} = {target}; "
        f"trainer.grad_accum={keep} {how}"
    )


def published_gap(t: dict[str, Any], stage: str) -> str:
    """One line on why the estimate differs from the published wall time: the MFU the published hours
    would mean at the same FLOPs (the estimate's step time scales as 1/MFU), and what the estimate leaves out."""
    ratio = t["published_h_on_8"] / t["wall_h"] if t["wall_h"] > 0 else float("inf")
    left_out = "video decoding, data loading, partial packs, checkpoint saves"
    if stage == "sft":  # tokens per GPU per step do not depend on the GPU count, nor does the time
        implied = t["mfu"] / ratio
        return (
            f"  vs published ~{t['published_h_on_8']:.0f} h on 8 GPUs ({ratio:.1f}x this estimate): the same "
            f"{t['steps']} steps of {t['tokens_per_step'] // max(t['world'], 1)} tokens per GPU would mean MFU "
            f"{implied:.1%}, not the {t['mfu']:.1%} used above; the estimate counts the model's FLOPs on "
            f"full synthetic packs, not {left_out}"
        )
    return (
        f"  vs published ~{t['published_h_on_8']:.0f} h on 8 GPUs ({ratio:.1f}x this estimate): the estimate "
        f"assumes {t['rollout_tokens_per_s_per_server']:.0f} generated tokens/s per SGLang server and learner "
        f"MFU {t['mfu']:.1%} ({t['mfu_source']}) over {t['steps']} steps; it leaves out tool calls' video "
        f"decoding, reward judging, {left_out}"
    )


def load_model_config(source: str | None = None) -> Any:
    """The Qwen3-VL config: the shipped Qwen3-VL-8B-Instruct values, a local ``config.json`` / model directory,
    or a hub id (when reachable)."""
    from transformers import AutoConfig, Qwen3VLConfig

    if source is None:
        return Qwen3VLConfig(**json.loads(SHIPPED_CONFIG.read_text()))
    path = Path(source)
    if path.is_file():
        return Qwen3VLConfig(**json.loads(path.read_text()))
    return AutoConfig.from_pretrained(source)


def param_parts(config: Any) -> dict[str, int]:
    """Parameters per part of the model built on the meta device (no memory, no weights)."""
    import torch

    from . import steps

    with torch.device("meta"):
        model = steps.build_model(config, torch.bfloat16)
    out = steps.parts(model)
    out["total"] = sum(out.values())
    return out


def flops_per_token(config: Any, seq_len: int) -> float:
    """Forward FLOPs per token (``paravt_core.train.flops``) of one text-only sample of ``seq_len`` tokens,
    every position trained: a rough figure without media (``benchmarks/step_host.py``); the plan itself
    counts its synthetic pack (:func:`sft_flops`, :func:`rl_flops`)."""
    facts = PackFacts(lengths=(seq_len,), loss_tokens=seq_len)
    return pack_flops(model_shapes(config), facts).forward / seq_len


def sft_flops(model_config: Any, cfg: Any, length: int) -> tuple[StepFlops, int]:
    """(FLOPs of one SFT training pass over the plan's pack, its tokens): the pack ``memory.measure`` runs
    (``steps.sft_pack``), with the recipe's frozen tower and checkpointing."""
    from . import steps

    facts = pack_facts(steps.sft_pack(model_config, cfg, length))
    one = step_flops(
        model_shapes(model_config),
        [facts],
        vision_trained=not cfg.train.freeze_vision,
        checkpointing=cfg.model.gradient_checkpointing,
    )
    return one, facts.tokens


def rl_flops(model_config: Any, cfg: Any, length: int) -> tuple[StepFlops, int]:
    """(FLOPs the learner spends on one episode of the plan's pack, its tokens): two no-grad log-prob
    passes (proximal policy, reference: forward only, model FLOPs) and one training pass."""
    from . import steps

    facts = pack_facts(steps.rl_pack(model_config, cfg, length))
    train = pack_flops(
        model_shapes(model_config),
        facts,
        vision_trained=not cfg.train.freeze_vision,
        checkpointing=cfg.train.activation_checkpointing,
    )
    return train + StepFlops(model=2 * train.forward), facts.tokens


def verdict(peak: int, gpu: Gpu) -> dict[str, Any]:
    usable = int(gpu.memory_bytes * gpu.usable_fraction)
    return {"fits": peak <= usable, "usable_gib": usable / GIB, "headroom_gib": (usable - peak) / GIB}


def _stage(mem: Any, gpu: Gpu) -> dict[str, Any]:
    comps = {k: v / GIB for k, v in mem.components.items()}
    return {
        "peak_gib": mem.peak_bytes / GIB,
        "components_gib": comps,
        "largest": mem.largest,
        "tracker_gib": {k: v / GIB for k, v in mem.tracker.items()},
        **verdict(mem.peak_bytes, gpu),
        "tokens": mem.tokens,
        "trained_tokens": mem.trained_tokens,
        "notes": mem.notes,
        "measure_s": mem.seconds,
    }


def plan_sft(
    model_config: Any,
    cfg: Any,
    gpus: int,
    gpu: Gpu,
    pack_length: int | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    from . import steps
    from .memory import measure

    length = pack_length or cfg.packing.length
    progress(
        f"measuring one SFT step on fake tensors (world {gpus}, pack {length} tokens; about a minute on CPU)"
    )
    mem = measure(steps.prepare_sft, gpus, model_config, cfg, length)
    progress(f"measured in {mem.seconds:.0f} s")
    out = _stage(mem, gpu)
    one, pack_tokens = sft_flops(model_config, cfg, length)
    packs = gpus * cfg.trainer.grad_accum  # every micro-batch of every rank the same full pack
    flops = one * packs
    tokens = packs * pack_tokens
    u = learner_utilisation()
    hfu, flop_s = timed(flops, u)
    step_s = flop_s / (gpus * gpu.bf16_flops)
    out.update(
        world=gpus,
        pack_length=length,
        time={
            "tokens_per_step": tokens,
            "flops_per_token": flops.model / tokens,
            "hardware_flops_per_token": flops.hardware / tokens,
            "mfu": u.mfu,
            "hfu": hfu,
            "mfu_source": u.source,
            "step_s": step_s,
            "wall_h": step_s * cfg.trainer.steps / 3600,
            "steps": cfg.trainer.steps,
            "world": gpus,
            "published_h_on_8": PUBLISHED_HOURS["sft"],
            "assumes": "every pack the plan's synthetic pack; model FLOPs of the batch (paravt_core/train/"
            "flops.py), time from hardware FLOPs (+ recompute) at the HFU",
        },
    )
    return out


def rl_topology(gpus: int) -> tuple[int, int]:
    """(SGLang server GPUs, learner GPUs): the published topology, one serving GPU per 8, the rest learn."""
    servers = max(1, gpus // 8)
    if gpus - servers < 1:
        raise UsageError(
            f"--gpus {gpus}: the RL plan needs at least 2 GPUs (the SGLang server has a GPU of its own, "
            "the learners the rest)"
        )
    return servers, gpus - servers


def plan_rl(
    model_config: Any,
    cfg: Any,
    gpus: int,
    gpu: Gpu,
    pack_length: int | None = None,
    mem_fraction_static: float | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    from . import steps
    from .memory import measure

    servers, learners = rl_topology(gpus)
    length = pack_length or cfg.pack_tokens
    progress(
        f"measuring one RL learner step on fake tensors (world {learners}, pack {length} tokens; "
        "about a minute on CPU)"
    )
    mem = measure(steps.prepare_rl, learners, model_config, cfg, length)
    progress(f"measured in {mem.seconds:.0f} s")
    out = _stage(mem, gpu)
    parts = param_parts(model_config)
    weights = parts["total"] * 2  # bf16 on the server
    fraction_source = "--mem-fraction-static" if mem_fraction_static is not None else "the recipe's engine"
    from paravt_core.engines.kinds.sglang import SglangEngineConfig

    # the plan is of the topology rl/launch.py starts: SGLang servers beside the learner
    engine = cfg.engine if cfg.engine.kind == "sglang" else SglangEngineConfig()
    if mem_fraction_static is None:
        mem_fraction_static = engine.mem_fraction_static  # what rl/launch.py starts the server with
    static = mem_fraction_static * gpu.memory_bytes
    t = model_config.text_config
    kv_per_token = 2 * t.num_hidden_layers * t.num_key_value_heads * t.head_dim * 2
    kv_budget = static - weights
    free_beside = gpu.memory_bytes * gpu.usable_fraction - static
    episodes = cfg.prompts_per_step * cfg.group_size
    if engine.weight_sync == "distributed":  # rl/weight_sync.py: one request per bucket of engine.bucket_mb
        bucket = min(engine.bucket_mb * 2**20, weights)
        push_note = f"NCCL push in buckets of engine.bucket_mb={engine.bucket_mb} MiB, one request each"
    else:  # SGLang reads the staged safetensors itself; counted as the whole model, the cautious bound
        bucket = weights
        push_note = "disk push: the whole model counted as received at once (upper bound)"
    out["server"] = {
        "gpus": servers,
        "mem_fraction_static": mem_fraction_static,
        "mem_fraction_static_source": fraction_source,
        "weights_gib": weights / GIB,
        "kv_budget_gib": kv_budget / GIB,
        "kv_bytes_per_token": kv_per_token,
        "kv_tokens": int(max(kv_budget, 0) // kv_per_token),
        "kv_tokens_needed": episodes * cfg.agent.max_context_tokens,
        "weight_push_bucket_gib": bucket / GIB,
        "weight_push_note": push_note,
        "free_beside_static_gib": free_beside / GIB,
        "push_fits": free_beside >= bucket,
    }
    one, episode_tokens = rl_flops(model_config, cfg, length)
    flops = one * episodes
    learner_tokens = episodes * episode_tokens
    u = learner_utilisation()
    hfu, flop_s = timed(flops, u)
    learner_s = flop_s / (learners * gpu.bf16_flops)
    generated = episodes * cfg.agent.max_new_tokens
    rollout_s = generated / (servers * ROLLOUT_TOKENS_PER_S)
    push_s = weights / 25e9  # ~25 GB/s NCCL over NVLink, one sender
    step_s = (max(rollout_s, learner_s) if cfg.max_staleness > 0 else rollout_s + learner_s) + push_s
    out.update(
        world=learners,
        pack_length=length,
        time={
            "episodes_per_step": episodes,
            "learner_tokens_per_step": learner_tokens,
            "flops_per_token": flops.model / learner_tokens,
            "hardware_flops_per_token": flops.hardware / learner_tokens,
            "mfu": u.mfu,
            "hfu": hfu,
            "mfu_source": u.source,
            "learner_s": learner_s,
            "rollout_tokens_per_step": generated,
            "rollout_tokens_per_s_per_server": ROLLOUT_TOKENS_PER_S,
            "rollout_s": rollout_s,
            "push_s": push_s,
            "step_s": step_s,
            "wall_h": step_s * cfg.steps / 3600,
            "steps": cfg.steps,
            "published_h_on_8": PUBLISHED_HOURS["rl"],
            "assumes": "each episode one pack_length pass (two log-prob passes, one training pass); "
            "max_new_tokens generated per episode; rollouts overlap the learner when max_staleness > 0",
        },
    )
    return out


def plan(
    config_path: str,
    gpus: int,
    gpu_name: str = "h100-80g",
    model: str | None = None,
    pack_length: int | None = None,
    group_size: int | None = None,
    mem_fraction_static: float | None = None,
    overrides: list[str] | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """The plan of the recipe at ``config_path`` (an SFT or an RL config) on ``gpus`` GPUs; ``progress``
    hears what it is doing (``paravt plan`` passes :func:`stderr_progress`). ``warnings`` in the result:
    lines for stderr (a changed global batch)."""
    import yaml

    from paravt_core.config import SftConfig, load_config
    from paravt_core.rl.config import RlConfig

    raw = yaml.safe_load(Path(config_path).read_text()) or {}
    gpu = GPUS[gpu_name]
    is_sft = "trainer" in raw or "packing" in raw
    if not is_sft:
        rl_topology(gpus)  # refuse an impossible count before seconds of loading
    start = time.monotonic()
    progress(f"loading the model's shapes ({model or 'the shipped Qwen3-VL-8B config'}) and torch")
    model_config = load_model_config(model)
    result: dict[str, Any] = {
        "config": config_path,
        "gpus": gpus,
        "gpu": gpu_name,
        "gpu_gib": gpu.memory_bytes / GIB,
        "model": model or "Qwen/Qwen3-VL-8B-Instruct (shipped config.json)",
        "params": param_parts(model_config),
        "warnings": [],
    }
    extra = list(overrides or [])
    if is_sft:
        cfg = load_config(SftConfig, config_path, extra)
        result["stage"] = "sft"
        warning = batch_warning(cfg, gpus, pack_length or cfg.packing.length)
        if warning is not None:
            result["warnings"].append(warning)
        result["sft"] = plan_sft(model_config, cfg, gpus, gpu, pack_length, progress)
    else:
        if group_size is not None:
            extra.append(f"group_size={group_size}")
        cfg = load_config(RlConfig, config_path, extra)
        result["stage"] = "rl"
        result["rl"] = plan_rl(model_config, cfg, gpus, gpu, pack_length, mem_fraction_static, progress)
    progress(f"done in {time.monotonic() - start:.0f} s")
    return result


def misfit(result: dict[str, Any]) -> str | None:
    """One line saying what does not fit and what to change, or None when the plan fits (``paravt plan``
    then exits 1: a script can tell a plan that fits from one that does not)."""
    stage = result["stage"]
    s = result[stage]
    problems = []
    if not s["fits"]:
        problems.append(f"the per-rank peak {s['peak_gib']:.1f} GiB exceeds {s['usable_gib']:.1f} GiB usable")
    if "server" in s and not s["server"]["push_fits"]:
        problems.append("the weight-push bucket does not fit beside SGLang's static pool")
    if not problems:
        return None
    fixes = ["more GPUs (--gpus)", "a smaller pack (--pack-length)"]
    if stage == "rl":
        fixes.append("a lower --mem-fraction-static")
    return f"DOES NOT FIT: {'; '.join(problems)}; try {', '.join(fixes)}"


def render(result: dict[str, Any]) -> str:
    """The plan as text (what ``paravt plan`` prints)."""
    p = result["params"]
    lines = [
        f"plan: {result['config']} on {result['gpus']} x {result['gpu']} ({result['gpu_gib']:.1f} GiB)",
        f"model {result['model']}: {p['total'] / 1e9:.3f} B parameters = vision tower "
        f"{p['vision_tower'] / 1e9:.3f} B + language model {p['language_model'] / 1e9:.3f} B + embeddings "
        f"{p['embeddings'] / 1e9:.3f} B"
        + (f" + lm_head {p['lm_head'] / 1e9:.3f} B" if "lm_head" in p else ""),
    ]
    stage = result["stage"]
    s = result[stage]
    who = "rank" if stage == "sft" else "learner rank"
    lines.append(
        f"{stage.upper()}: per-{who} peak of one step (FSDPMemTracker on fake tensors, world {s['world']}, "
        f"pack {s['pack_length']} tokens, {s['trained_tokens']} trained):"
    )
    for name, gib in s["components_gib"].items():
        lines.append(f"  {name:<18} {gib:8.2f} GiB")
    lines.append(f"  {'peak':<18} {s['peak_gib']:8.2f} GiB")
    word = "FITS" if s["fits"] else "DOES NOT FIT"
    lines.append(
        f"  verdict: {word} in {s['usable_gib']:.1f} GiB usable (headroom {s['headroom_gib']:+.2f} GiB); "
        f"largest component: {s['largest']} ({s['components_gib'][s['largest']]:.2f} GiB)"
    )
    for note in s["notes"]:
        lines.append(f"  - {note}")
    if "server" in s:
        v = s["server"]
        lines.append(
            f"SGLang server ({v['gpus']} GPU): weights {v['weights_gib']:.2f} GiB, KV budget "
            f"{v['kv_budget_gib']:.2f} GiB at mem_fraction_static={v['mem_fraction_static']} "
            f"({v['mem_fraction_static_source']}) = {v['kv_tokens']} tokens of {v['kv_bytes_per_token']} B "
            f"(a full step of {v['kv_tokens_needed']} context tokens would need all of them at once)"
        )
        lines.append(
            f"  weight push: bucket {v['weight_push_bucket_gib']:.2f} GiB vs {v['free_beside_static_gib']:.2f} GiB free "
            f"beside the static pool: {'fits' if v['push_fits'] else 'DOES NOT FIT'} ({v['weight_push_note']})"
        )
    t = s["time"]
    if stage == "sft":
        lines.append(
            f"time: {t['tokens_per_step']} tokens/step x {t['flops_per_token'] / 1e9:.1f} GFLOP/token "
            f"(model; {t['hardware_flops_per_token'] / 1e9:.1f} with recompute) at MFU {t['mfu']:.1%} / "
            f"HFU {t['hfu']:.1%} "
            f"({t['mfu_source']}) -> {t['step_s']:.1f} s/step, {t['wall_h']:.1f} h for {t['steps']} steps "
            f"(published: ~{t['published_h_on_8']:.0f} h on 8 GPUs)"
        )
    else:
        lines.append(
            f"time: learner {t['learner_s']:.1f} s (MFU {t['mfu']:.1%} / HFU {t['hfu']:.1%}, "
            f"{t['mfu_source']}), "
            f"rollouts {t['rollout_s']:.1f} s "
            f"({t['rollout_tokens_per_step']} tokens at {t['rollout_tokens_per_s_per_server']:.0f} tokens/s per "
            f"server, assumed), push {t['push_s']:.1f} s -> {t['step_s']:.1f} s/step, {t['wall_h']:.1f} h for "
            f"{t['steps']} steps (published: ~250 s/step, ~{t['published_h_on_8']:.0f} h on 8 GPUs)"
        )
    lines.append(published_gap(t, stage))
    lines.append(f"  ({t['assumes']}; measured in {s['measure_s']:.0f} s)")
    return "\n".join(lines)
