"""Knobs of one episode (docs/method.md §3, §4.4). Defaults are the published protocol: 64 overview frames at most
224² px, 3 tool rounds x 5 parallel calls, sub-agents on the same engine, 512-token reports.

The RL and eval stage configs embed ``AgentConfig`` (e.g. ``rl.agent.max_turns=2``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from paravt_core.config_base import StrictModel

from . import frame_paths, prompts
from .frame_paths import FramePathName

# docs/method.md §3 pixel budget per frame (the video package's defaults; not imported so that building the CLI
# parser does not import torch).
DEFAULT_MAX_PIXELS = 224 * 224
DEFAULT_MIN_PIXELS = 28 * 28


class SubagentConfig(StrictModel):
    see_question: bool = Field(
        default=False,
        description="pass the main agent's question to the sub-agent (off reproduces the release)",
    )
    train: bool = Field(
        default=False,
        description="train on sub-agent tokens (loss mask 1 on their generations); off as released",
    )
    # docs/method.md §4.4.5: 0.7 in RL, 0 (greedy) in eval. None follows the main agent's temperature, so the eval
    # protocol's temperature 0 (and ``paravt agent run temperature=0``) makes the sub-agents greedy too.
    temperature: float | None = Field(
        default=None, ge=0.0, description="sub-agent sampling temperature; null: the main agent's"
    )
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, description="sub-agent nucleus sampling threshold")
    max_new_tokens: int = Field(default=1024, ge=1, description="tokens per sub-agent generation")
    max_report_tokens: int = Field(
        default=512, ge=1, description="a report longer than this is cut and gets the set's truncation mark"
    )


class CropConfig(StrictModel):
    fps: float = Field(default=1.0, gt=0.0, description="frames per second sampled from a cropped span")
    min_frames: int = Field(default=2, ge=1, description="fewest frames per crop")
    max_frames: int = Field(default=16, ge=1, description="most frames per crop")
    workers: int = Field(default=4, ge=1, description="threads decoding crops")
    rounding: Literal["nearest", "floor"] = Field(
        default="nearest",
        description="frame count to even: nearest (ours) or floor (qwen-vl-utils 0.0.14, the release's crops)",
    )


class AgentConfig(StrictModel):
    prompt_set: str = Field(
        default=prompts.DEFAULT_PROMPT_SET,
        description="the prompt set: a packaged name or a YAML file path / URI",
    )
    # Left empty it is filled in when the set is loaded (so every run's recorded config names the exact texts).
    prompt_set_checksum: str | None = Field(
        default=None,
        description="pin the prompt set's texts: a different checksum is an error; null: record it",
    )
    prompt_mode: prompts.PromptMode = Field(
        default="agentic_general", description="which system prompt of the set"
    )
    question_suffix: bool = Field(
        default=True, description='append " The video path for this video is: <basename>" to the question'
    )
    overview_frames: int = Field(
        default=64,
        ge=1,
        description="K: overview frames of the whole video (nFrames gating overrides it per row)",
    )
    max_pixels: int = Field(default=DEFAULT_MAX_PIXELS, ge=1024, description="pixel budget per frame")
    min_pixels: int = Field(default=DEFAULT_MIN_PIXELS, ge=1, description="smallest frame, in pixels")
    overview_max_pixels: int | None = Field(
        default=None, ge=1024, description="Pixel budget per overview frame (None: max_pixels)."
    )
    overview_min_pixels: int | None = Field(
        default=None, ge=1, description="Smallest overview frame in pixels (None: min_pixels)."
    )
    crop_max_pixels: int | None = Field(
        default=None, ge=1024, description="Pixel budget per crop frame (None: max_pixels)."
    )
    frame_path: FramePathName = Field(default=frame_paths.DEFAULT_FRAME_PATH, description=frame_paths.HELP)
    overview_labels: bool = Field(
        default=True, description="Put a '<t seconds>' label before each overview frame (off: frames only)."
    )
    overview_channel: Literal["frames", "video_url"] = Field(
        default="frames",
        description="frames: decoded frames; video_url: the whole video as a file:// URL the server decodes (vLLM)",
    )
    max_turns: int = Field(
        default=3, ge=0, description="tool rounds; the generation after the last one must answer"
    )
    max_parallel: int = Field(
        default=5,
        ge=1,
        description="tool calls executed per turn; extras get an error response (release-v1 crop_frames: none)",
    )
    max_new_tokens: int = Field(default=2048, ge=1, description="tokens per main-agent generation")
    max_context_tokens: int = Field(
        default=32768, ge=256, description="the episode's context limit (prompt, frames and turns)"
    )
    temperature: float = Field(default=0.7, ge=0.0, description="main-agent sampling temperature (0: greedy)")
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, description="main-agent nucleus sampling threshold")
    seed: int | None = Field(default=None, description="sampling seed; null: unseeded")
    think_prefix: bool = Field(
        default=False,
        description='start every main-agent turn with "<think>\\n" (PARA-GRPO constrained.think_prefix)',
    )
    forced_answer: prompts.ForcedAnswer | None = Field(
        default=None,
        description="eval only: after the last tool round, ask for the answer in this format (and cap its tokens)",
    )
    tool_mode: Literal["subagent", "crop_frames"] = Field(
        default="subagent",
        description="subagent: a sub-agent report answers each call; crop_frames: the crops go to the main model",
    )
    dispatch: Literal["batched", "sequential"] = Field(
        default="batched",
        description="batched: a turn's crops and sub-agents in one engine call; sequential: one call at a time",
    )
    engine_timeout_s: float | None = Field(
        default=None, gt=0.0, description="seconds before a generation call is abandoned (null: wait)"
    )
    subagent: SubagentConfig = Field(
        default_factory=SubagentConfig, description="the sub-agents answering tool calls"
    )
    crop: CropConfig = Field(default_factory=CropConfig, description="frame sampling of crop_video calls")

    @property
    def overview_pixels(self) -> tuple[int, int]:
        """(min, max) pixels of one overview frame."""
        return (self.overview_min_pixels or self.min_pixels, self.overview_max_pixels or self.max_pixels)

    @property
    def crop_pixels(self) -> tuple[int, int]:
        """(min, max) pixels of one crop frame."""
        return (self.min_pixels, self.crop_max_pixels or self.max_pixels)

    @property
    def processor_pixels(self) -> tuple[int, int]:
        """(min, max) the image processor accepts: wide enough for overview and crop frames alike, which the
        decoder has already sized to their own budgets (the processor then keeps them as they are)."""
        (omin, omax), (cmin, cmax) = self.overview_pixels, self.crop_pixels
        return min(omin, cmin), max(omax, cmax)

    @property
    def frames(self) -> frame_paths.FramePath:
        """The frame path that makes this episode's frames (``frame_path``'s strategy)."""
        return frame_paths.get(self.frame_path)

    @property
    def subagent_temperature(self) -> float:
        return self.temperature if self.subagent.temperature is None else self.subagent.temperature

    def bind_prompt_set(self) -> prompts.PromptSet:
        """Load ``prompt_set``, check it against a pinned ``prompt_set_checksum`` or record its checksum."""
        loaded = prompts.load_prompt_set(self.prompt_set)
        if self.prompt_set_checksum is None:
            self.prompt_set_checksum = loaded.checksum
        elif self.prompt_set_checksum != loaded.checksum:
            raise ValueError(
                f"prompt set {self.prompt_set} has checksum {loaded.checksum}, "
                f"but the config pins {self.prompt_set_checksum}"
            )
        return loaded

    @model_validator(mode="after")
    def _check(self) -> AgentConfig:
        if self.min_pixels > self.max_pixels:
            raise ValueError(f"min_pixels ({self.min_pixels}) must not exceed max_pixels ({self.max_pixels})")
        lo, hi = self.overview_pixels
        if lo > hi:
            raise ValueError(f"overview min pixels ({lo}) must not exceed overview max pixels ({hi})")
        lo, hi = self.crop_pixels
        if lo > hi:
            raise ValueError(f"min_pixels ({lo}) must not exceed crop max pixels ({hi})")
        if self.crop.min_frames > self.crop.max_frames:
            raise ValueError("crop.min_frames must not exceed crop.max_frames")
        return self
