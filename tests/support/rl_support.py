"""Shared pieces of the RL tests: the data stage's output for the synthetic dataset and a tiny RL config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from paravt_core.config import DataConfig, load_config
from paravt_core.rl.config import RlConfig
from tests.support.paths import ROOT

TINY_RL = ROOT / "configs" / "rl" / "tiny.yaml"


def run_data_stage(synth, work: Path) -> str:
    """``paravt data`` on a ``synthesize`` result (its archives and parquets as the sources): the output URI,
    ``<work>/data`` (``<uri>/rl/*.parquet`` with local videos)."""
    from paravt_core.data.stage import run

    cfg = load_config(
        DataConfig,
        None,
        [
            f"download.media_source={synth.source_dir}",
            f"download.parquet_source={synth.parquet_dir}",
            f"work_dir={work / 'work'}",
            f"output={work / 'data'}",
        ],
    )
    run(cfg)
    return str(work / "data")


def tiny_rl_config(data: str, model: str, output: str, *overrides: str) -> RlConfig:
    return load_config(RlConfig, TINY_RL, [f"data={data}", f"model={model}", f"output={output}", *overrides])


# Per index within a group: distinct, nonzero advantages inside each group.
HAND_REWARDS = (1.0, 0.0, 0.5, -1.0)


def rollout_samples(
    cfg: RlConfig, model_dir: str, data: str, rewards: tuple[float, ...] = HAND_REWARDS, seed: int = 0
) -> list:
    """One step of real episodes of the tiny model (2 prompts x 4, with video pixels, sampled with ``seed``),
    rewards set by hand."""
    import asyncio
    import dataclasses

    from paravt_core.engines.coalesce import CoalescingEngine
    from paravt_core.engines.transformers_engine import TransformersEngine
    from paravt_core.models import load
    from paravt_core.rl.data import load_prompts
    from paravt_core.rl.rollout import arollout_step

    rollout = load(model_dir)
    engine = CoalescingEngine(TransformersEngine(rollout.model, rollout.processor), seed=seed)
    prompts = load_prompts(data).prompts[:2]
    got = asyncio.run(arollout_step(prompts, engine, cfg.agent, cfg.paravt, group_size=4, version=0)).samples
    return [dataclasses.replace(s, reward=dataclasses.replace(s.reward, total=rewards[s.index])) for s in got]


def tiny_learner(cfg: RlConfig, model_dir: str, pack_tokens: int = 8192, **kw):
    """A learner whose policy and reference are both the model at ``model_dir``, with the config's recipe;
    ``kw``: the learner's other options (``opts``, ``dist``)."""
    from paravt_core.models import load
    from paravt_core.rl.learner import Learner

    return Learner(
        load(model_dir).model,
        load(model_dir).model,
        temperature=cfg.agent.temperature,
        advantage=cfg.advantage,
        loss=cfg.loss,
        optim=cfg.optim,
        pack_tokens=pack_tokens,
        **kw,
    )


class HostCopies(TorchFunctionMode):
    """Counts copies of floating tensors with more than one element to the host (what a D2H copy is spelled
    as)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        to_host = name in ("cpu", "numpy") or (
            name == "to" and any(_is_cpu(a) for a in (*args[1:], kwargs.get("device")))
        )
        tensor = args[0] if args else None  # weights are floating (a collective's pickled bytes are not)
        if to_host and isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and tensor.numel() > 1:
            self.count += 1
        return func(*args, **kwargs)


def _is_cpu(arg: Any) -> bool:
    return (isinstance(arg, str) and arg.startswith("cpu")) or (
        isinstance(arg, torch.device) and arg.type == "cpu"
    )


def sigkill_after_checkpoint(command: list[str], output: Path, step: int, env: dict[str, str]) -> None:
    """Start ``paravt rl`` (``command``, writing ``output``) and SIGKILL it as soon as its checkpoint of
    ``step`` is complete (it is then in the next step); the run must not have completed."""
    import signal
    import subprocess
    import time

    root = ROOT
    proc = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    marker = output / "checkpoints" / f"step_{step:08d}" / "_COMPLETE"
    deadline = time.monotonic() + 300
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert marker.exists(), (
        proc.stderr.read().decode()[-2000:] if proc.poll() is not None else "no checkpoint"
    )
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL and not (output / "_COMPLETE").exists()


def straight_then_resumed(
    base: list[str], tmp: Path, env: dict[str, str], after_step: int
) -> tuple[Path, Path]:
    """``paravt rl`` (``base``, without ``output=``) run through once into ``tmp/straight``, and once into
    ``tmp/killed`` killed with SIGKILL as soon as its checkpoint of ``after_step`` is complete, then rerun with the
    same command, which must say it resumed from that step. Returns (straight, killed) for the caller to compare."""
    import subprocess

    root = ROOT
    straight, killed = tmp / "straight", tmp / "killed"
    done = subprocess.run([*base, f"output={straight}"], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    cmd = [*base, f"output={killed}"]
    sigkill_after_checkpoint(cmd, killed, after_step, env)  # in the next step, one complete checkpoint behind
    rerun = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "resumed from" in rerun.stderr and f"step {after_step}" in rerun.stderr, rerun.stderr[-2000:]
    return straight, killed
