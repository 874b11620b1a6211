"""Rollouts of one RL step: for each prompt a group of n episodes through the real episode loop, rewarded.

Per group: K from nFrames gating (shared by the group), the overview decoded once and shared by the n
episodes, ``arun_episode`` (the loop eval uses) for each, then the PARA-GRPO reward of each episode's
main-agent text (forced prefix included) and call records. All episodes of the step run concurrently; on
a ``CoalescingEngine`` their generate calls become batched calls, on an ``IndependentEngine`` each call goes
to the server on its own. An episode or reward failure touches
only its own sample: it keeps reward 0 with the reason recorded, and its group trains on the rest.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from paravt_core.agent.config import AgentConfig
from paravt_core.agent.episode import EpisodeResult, EpisodeRow, arun_episode
from paravt_core.config import ParavtRecipe
from paravt_core.engines.base import Engine
from paravt_core.engines.coalesce import CoalescingEngine
from paravt_core.engines.independent import IndependentEngine
from paravt_core.rewards.compose import RewardBreakdown, acompose, failed

from .data import RlPrompt
from .gating import nframes_for

# Episodes that end this way produced no usable generation: nothing to train on.
NO_SAMPLE_REASONS = ("engine_error", "engine_refused", "engine_timeout", "video_error", "context_overflow")


@dataclass
class Sample:
    """One rollout: the episode, its reward and where it belongs."""

    prompt: RlPrompt
    group: int  # index of the prompt's group within the step
    index: int  # rollout index within the group
    nframes: int
    policy_version: int  # weight version of the engine that sampled it
    episode: EpisodeResult
    reward: RewardBreakdown
    rollout_s: float = 0.0

    @property
    def trainable(self) -> bool:
        main = self.episode.main
        return (
            main is not None
            and sum(main.loss_mask) > 0
            and self.episode.finish_reason not in NO_SAMPLE_REASONS
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt.to_dict(),
            "group": self.group,
            "index": self.index,
            "nframes": self.nframes,
            "policy_version": self.policy_version,
            "reward": self.reward.to_dict(),
            "episode": self.episode.to_dict(),
        }


@dataclass
class StepRollouts:
    samples: list[Sample]
    seconds: float
    counts: Counter = field(default_factory=Counter)  # skipped prompts, failed episodes ...


def agent_config_for(agent: AgentConfig, recipe: ParavtRecipe) -> AgentConfig:
    """The episode config with the recipe's constraint applied (think_prefix)."""
    return agent.model_copy(update={"think_prefix": recipe.constrained.think_prefix})


async def _group(
    prompt: RlPrompt,
    group: int,
    n: int,
    engine: Engine,
    agent: AgentConfig,
    recipe: ParavtRecipe,
    version: int,
    judge: Any,
    counts: Counter,
) -> list[Sample]:
    gating = recipe.gating
    k = nframes_for(
        prompt.row_id,
        enabled=gating.nframes_gating,
        seed=gating.seed,
        choices=gating.choices,
        default=gating.default_frames,
    )
    row = EpisodeRow(prompt.video, prompt.question, prompt.row_id, prompt.question_type, nframes=k)
    try:  # once per group: the n rollouts see the very same frames
        overview = await asyncio.to_thread(agent.frames.overview, prompt.video, k, agent)  # the path's frames
    except Exception as err:
        counts["video_error_groups"] += 1
        counts[f"video_error:{type(err).__name__}"] += 1
        overview = None  # each episode then records its own video_error and is not trained

    async def one(i: int) -> Sample:
        started = time.perf_counter()
        key = group * 10_000 + i
        if isinstance(engine, (CoalescingEngine, IndependentEngine)):
            # the group's routing key: behind a router the group's episodes share one server's prefix cache
            async with engine.track(key, reserved=True, affinity=f"v{version}-g{group}"):
                episode = await arun_episode(row, engine, agent, overview=overview)
        else:
            episode = await arun_episode(row, engine, agent, overview=overview)
        if episode.finish_reason in NO_SAMPLE_REASONS:
            reward = failed(episode.finish_reason)
        else:
            reward = await acompose(
                episode.assistant_text(),
                episode.calls,
                prompt.gold,
                prompt.question_type,
                recipe,
                question=prompt.question,
                judge=judge,
            )
        return Sample(prompt, group, i, k, version, episode, reward, time.perf_counter() - started)

    return list(await asyncio.gather(*(one(i) for i in range(n))))


async def arollout_step(
    prompts: list[RlPrompt],
    engine: Engine,
    agent: AgentConfig,
    recipe: ParavtRecipe,
    *,
    group_size: int,
    version: int,
    judge: Any = None,
) -> StepRollouts:
    """Every group of a step, concurrently; samples in (group, index) order."""
    started = time.perf_counter()
    counts: Counter = Counter()
    agent = agent_config_for(agent, recipe)
    if isinstance(engine, (CoalescingEngine, IndependentEngine)):
        engine.reserve(len(prompts) * group_size)
    groups = await asyncio.gather(
        *(
            _group(p, g, group_size, engine, agent, recipe, version, judge, counts)
            for g, p in enumerate(prompts)
        )
    )
    samples = [s for group in groups for s in group]
    for s in samples:
        if s.reward.failure:
            counts[f"reward_failure:{s.reward.failure}"] += 1
    return StepRollouts(samples, time.perf_counter() - started, counts)
