"""Shared pieces of the RL tests: the data stage's output for the synthetic dataset and a tiny RL config."""

from __future__ import annotations

from pathlib import Path

import pytest

from paravt_core.config import DataConfig, load_config
from paravt_core.rl.config import RlConfig

TINY_RL = Path(__file__).resolve().parents[1] / "configs" / "rl" / "tiny.yaml"


@pytest.fixture(scope="module")
def rl_data(synth_dataset, tmp_path_factory: pytest.TempPathFactory) -> str:
    """``paravt data`` run on the session's synthetic dataset: ``<uri>/rl/*.parquet`` with local videos."""
    from paravt_core.data.stage import run

    tmp = tmp_path_factory.mktemp("rl_data")
    cfg = load_config(
        DataConfig,
        None,
        [
            f"download.media_source={synth_dataset.source_dir}",
            f"download.parquet_source={synth_dataset.parquet_dir}",
            f"work_dir={tmp / 'work'}",
            f"output={tmp / 'data'}",
        ],
    )
    run(cfg)
    return str(tmp / "data")


def tiny_rl_config(data: str, model: str, output: str, *overrides: str) -> RlConfig:
    return load_config(RlConfig, TINY_RL, [f"data={data}", f"model={model}", f"output={output}", *overrides])


# Per index within a group: distinct, nonzero advantages inside each group.
HAND_REWARDS = (1.0, 0.0, 0.5, -1.0)


def rollout_samples(
    cfg: RlConfig, model_dir: str, data: str, rewards: tuple[float, ...] = HAND_REWARDS
) -> list:
    """One step of real episodes of the tiny model (2 prompts x 4, with video pixels), rewards set by hand."""
    import asyncio
    import dataclasses

    from paravt_core.engines.coalesce import CoalescingEngine
    from paravt_core.engines.transformers_engine import TransformersEngine
    from paravt_core.models import load
    from paravt_core.rl.data import load_prompts
    from paravt_core.rl.rollout import arollout_step

    rollout = load(model_dir)
    engine = CoalescingEngine(TransformersEngine(rollout.model, rollout.processor), seed=0)
    prompts = load_prompts(data).prompts[:2]
    got = asyncio.run(arollout_step(prompts, engine, cfg.agent, cfg.paravt, group_size=4, version=0)).samples
    return [dataclasses.replace(s, reward=dataclasses.replace(s.reward, total=rewards[s.index])) for s in got]


def tiny_learner(cfg: RlConfig, model_dir: str, pack_tokens: int):
    """A one-process learner (policy and reference both the model at ``model_dir``) with the config's recipe."""
    from paravt_core.models import load
    from paravt_core.rl.learner import Learner
    from paravt_core.train.fsdp import CoreOptions

    return Learner(
        load(model_dir).model,
        load(model_dir).model,
        temperature=cfg.agent.temperature,
        advantage=cfg.advantage,
        loss=cfg.loss,
        optim=cfg.optim,
        opts=CoreOptions(),
        pack_tokens=pack_tokens,
    )
