"""Eval protocols: the agent config of one sample under one protocol (docs/method.md §7).

- ``agentic`` (with the tool): the same episode as RL, sub-agents by default (``agent.tool_mode=crop_frames``
  reproduces the released driver); the general agentic prompt, or the bare tool envelope for Charades; after
  the last tool round the forced answer of the item's type (``mcq`` letter / ``tvg`` interval; none for
  open-ended items, whose free answer must not be forced into a letter).
- ``direct`` and ``reasoning`` (no tool): no tool rounds, no video-path suffix, each with its own format
  instruction in the system prompt (the prompt set's ``system.direct`` / ``system.reasoning``).

Eval defaults (``EvalConfig.agent``) are the headline protocol: 64 overview frames, greedy main agent and
sub-agents, 2048 new tokens, 3 tool rounds x 5 parallel calls.

Presets (``EvalConfig.preset``) set the episode knobs that make a protocol, on top of ``agent``:

- ``paravt`` (default): our protocol - sub-agents, labelled overview frames, the agent's own pixel budgets;
- ``release``: the release's eval driver (docs/method.md §7), which produced the published numbers: its prompt texts and
  layouts (the ``release-v1`` prompt set, unless ``agent.prompt_set`` names another), 64 overview frames
  of 100,352-602,112 px each (qwen-vl-utils 0.0.14 with ``nframes=64``), the crop frames themselves as the tool's
  answer (``crop_frames``: 1 fps, 1-16 frames of at most 50,176 px, the count rounded down to even as
  qwen-vl-utils 0.0.14 does), an unlabelled overview for multiple choice
  (frames only), Charades as the release sends it where the engine's server can decode it (the whole video as
  a ``file://`` ``video_url``, decoded by vLLM with its own sampling and the frames' times; on other engines
  labelled frames stand in: ``overview_channel``), a 65,536-token context (its vLLM ``--max-model-len``) that holds those frames,
  and its frame path (``frame_path=qwen-vl-utils``: the coded picture as stored, crop windows clamped to the
  video, ``round(linspace)`` indices, 28-px sizing, bicubic antialiased resize, JPEG 85, the processor's own
  settings: ``paravt_core.video.release_frames``); a reply cut by ``max_tokens`` still runs its complete calls
  (the release reader, ``agent/episode.py``).
"""

from __future__ import annotations

from typing import Any

from paravt_core.agent.config import AgentConfig
from paravt_core.agent.frame_paths import RELEASE_FRAME_PATH

from .benchmarks import Benchmark, Sample

PROTOCOLS: tuple[str, ...] = ("agentic", "direct", "reasoning")
WITH_TOOL = ("agentic",)
PRESETS: tuple[str, ...] = ("paravt", "release")
# The release's OpenAI client timeout per request (utils.py run_shard, driver.py OPENAI_TIMEOUT_S at cf55249).
RELEASE_CLIENT_TIMEOUT_S = 1800.0
# The release driver's prompt texts and layouts (prompt_sets/release-v1.yaml): preset=release's prompt set
# unless agent.prompt_set names another (the report then says the prompts are not the release's); EvalConfig
# fills it in when the config is validated, so the resolved config names it.
RELEASE_PROMPT_SET = "release-v1"

# The release's vLLM 0.17.1 server (utils.py launch_servers lines 517-524 at cf55249): --max-model-len 65536 and
# --limit-mm-per-prompt '{"video":1,"image":1024}'. The context is applied by the episode as vLLM applies it (see
# server.py); the image limit never binds: an episode sends at most overview_frames + max_turns x max_parallel
# x crop.max_frames images (64 + 3 x 5 x 16 = 304), and vLLM refuses only more than 1024 (its
# multimodal/processing/context.py validate_num_items: "At most 1024 image(s) may be provided in one prompt.").
RELEASE_MAX_MODEL_LEN = 65_536
RELEASE_IMAGE_LIMIT = 1024

# The release's driver (driver.py _completion_with_retry at cf55249) sends temperature=0 and max_tokens only, and
# its vLLM server (no --generation-config: "auto") fills every other sampling field from the checkpoint's
# generation_config.json (vLLM 0.32's ModelConfig.get_diff_sampling_param reads repetition/presence/frequency
# penalties, temperature, top_k, top_p, min_p, max_new_tokens; 0.17.1's is taken to be the same). Under greedy
# decoding top_k / top_p / min_p cannot change the argmax; the penalties can. preset=release sends the
# checkpoint's penalties with every request as that server applied them (``release_penalties``).
NEUTRAL_PENALTIES = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}


def release_penalties(generation_config: dict[str, Any]) -> dict[str, float]:
    """The penalties of a checkpoint's ``generation_config.json`` that are not neutral (pure)."""
    out = {}
    for key, neutral in NEUTRAL_PENALTIES.items():
        value = generation_config.get(key)
        if value is not None and float(value) != neutral:
            out[key] = float(value)
    return out


# qwen-vl-utils 0.0.14: VIDEO_MIN_PIXELS = 128 * 28 * 28, VIDEO_MAX_PIXELS = 768 * 28 * 28 (the per-frame cap
# for 64 frames: its total-pixel budget / 64 is larger); the release's crops pass max_pixels 50,176, min 784.
RELEASE_AGENT: dict[str, Any] = {
    "overview_frames": 64,
    "overview_min_pixels": 128 * 28 * 28,
    "overview_max_pixels": 768 * 28 * 28,
    "crop_max_pixels": 50_176,
    "min_pixels": 784,
    "tool_mode": "crop_frames",
    # utils.py get_frames/crop_frames/pil_to_b64: qwen-vl-utils 0.0.14 frames, JPEG 85, no processor kwargs
    "frame_path": RELEASE_FRAME_PATH,
    # qwen-vl-utils 0.0.14's smart_nframes rounds a crop's frame count DOWN to even (a 7 s window: 6 frames)
    "crop": {"fps": 1.0, "min_frames": 1, "max_frames": 16, "rounding": "floor"},
    "max_context_tokens": RELEASE_MAX_MODEL_LEN,
    "max_new_tokens": 2048,
    "max_turns": 3,
    "max_parallel": 5,
    "temperature": 0.0,
    "think_prefix": False,
}


def preset_agent(preset: str, base: AgentConfig) -> AgentConfig:
    """``base`` with the preset's episode knobs (``paravt``: unchanged)."""
    if preset == "paravt":
        return base
    if preset == "release":
        merged = {**base.model_dump(), **RELEASE_AGENT}
        merged["crop"] = {**base.crop.model_dump(), **RELEASE_AGENT["crop"]}
        merged["max_pixels"] = max(base.max_pixels, merged["min_pixels"])
        agent = AgentConfig.model_validate(merged)
        if max_images(agent) > RELEASE_IMAGE_LIMIT:  # the release's server would refuse such an episode
            raise ValueError(f"preset=release sends up to {max_images(agent)} images, over the release server's "
                             f"--limit-mm-per-prompt of {RELEASE_IMAGE_LIMIT}")  # fmt: skip
        return agent
    raise ValueError(f"unknown eval preset {preset!r}; known: {', '.join(PRESETS)}")


def max_images(agent: AgentConfig) -> int:
    """The most images one episode's last request carries: the overview, then every tool round's calls each
    answered with its most crop frames (``crop_frames``; the sub-agent mode sends the main agent text)."""
    crops = (
        agent.max_turns * agent.max_parallel * agent.crop.max_frames
        if agent.tool_mode == "crop_frames"
        else 0
    )
    return agent.overview_frames + crops


def overview_channel(bench: Benchmark, preset: str, video_urls: bool) -> str:
    """How the overview travels: the release's channel for ``bench`` under ``preset=release`` when the engine's
    server decodes ``video_url`` parts itself (``video_urls``: vLLM), else decoded frames (Charades' stand-in:
    labelled frames, their times in the labels)."""
    return bench.release_channel if preset == "release" and video_urls else "frames"


def agent_config(
    protocol: str, bench: Benchmark, sample: Sample, base: AgentConfig, preset: str = "paravt",
    video_urls: bool = False,
) -> AgentConfig:  # fmt: skip
    """The agent config of ``sample`` under ``protocol``; ``video_urls``: the engine's server decodes a
    ``video_url`` itself (``overview_channel``)."""
    update: dict[str, Any] = {"overview_channel": overview_channel(bench, preset, video_urls)}
    if preset == "release":  # driver.py _video_user_content: frames without timestamps in every mode
        update["overview_labels"] = sample.qtype == "tvg"
    if protocol == "agentic":
        # the sample's own forced answer when its layout sets one (release: MMVU's open-ended items get the letter)
        forced = sample.forced if sample.forced != "" else {"mcq": "mcq", "tvg": "tvg"}.get(sample.qtype)
        return base.model_copy(update={**update, "prompt_mode": bench.tool_prompt, "forced_answer": forced})
    if protocol in ("direct", "reasoning"):
        no_tool = {"prompt_mode": protocol, "max_turns": 0, "forced_answer": None, "question_suffix": False}
        return base.model_copy(update={**update, **no_tool})
    raise ValueError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
