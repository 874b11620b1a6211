"""Eval protocols: the agent config of one sample under one protocol (SPEC §7).

- ``agentic`` (with the tool): the same episode as RL, sub-agents by default (``agent.tool_mode=crop_frames``
  reproduces the released driver); the general agentic prompt, or the bare tool envelope for Charades; after
  the last tool round the forced answer of the item's type (``mcq`` letter / ``tvg`` interval; none for
  open-ended items, whose free answer must not be forced into a letter).
- ``direct`` and ``reasoning`` (no tool): no tool rounds, no video-path suffix, each with its own format
  instruction in the system prompt (the prompt set's ``system.direct`` / ``system.reasoning``).

Eval defaults (``EvalConfig.agent``) are the headline protocol: 64 overview frames, greedy main agent and
sub-agents, 2048 new tokens, 3 tool rounds x 5 parallel calls.
"""

from __future__ import annotations

from paravt_core.agent.config import AgentConfig

from .benchmarks import Benchmark, Sample

PROTOCOLS: tuple[str, ...] = ("agentic", "direct", "reasoning")
WITH_TOOL = ("agentic",)


def agent_config(protocol: str, bench: Benchmark, sample: Sample, base: AgentConfig) -> AgentConfig:
    if protocol == "agentic":
        forced = {"mcq": "mcq", "tvg": "tvg"}.get(sample.qtype)
        return base.model_copy(update={"prompt_mode": bench.tool_prompt, "forced_answer": forced})
    if protocol in ("direct", "reasoning"):
        return base.model_copy(
            update={"prompt_mode": protocol, "max_turns": 0, "forced_answer": None, "question_suffix": False}
        )
    raise ValueError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
