"""Knobs of one episode (SPEC §3, §4.4). Defaults are the published protocol: 64 overview frames at most
224² px, 3 tool rounds x 5 parallel calls, sub-agents on the same engine, 512-token reports.

The RL and eval stage configs embed ``AgentConfig`` (e.g. ``rl.agent.max_turns=2``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from paravt_core.config_base import StrictModel

from . import prompts

# SPEC §3 pixel budget per frame (the video package's defaults; not imported so that building the CLI
# parser does not import torch).
DEFAULT_MAX_PIXELS = 224 * 224
DEFAULT_MIN_PIXELS = 28 * 28


class SubagentConfig(StrictModel):
    # Pass the main agent's question to the sub-agent (off reproduces the release).
    see_question: bool = False
    # Train on sub-agent tokens (loss mask 1 on their generations); off as released.
    train: bool = False
    # SPEC §4.4.5: 0.7 in RL, 0 (greedy) in eval. None follows the main agent's temperature, so the eval
    # protocol's temperature 0 (and ``paravt agent run --temperature 0``) makes the sub-agents greedy too.
    temperature: float | None = Field(default=None, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(default=1024, ge=1)
    max_report_tokens: int = Field(default=512, ge=1)  # SPEC §4.4.5: then the set's truncation mark


class CropConfig(StrictModel):
    fps: float = Field(default=1.0, gt=0.0)
    min_frames: int = Field(default=2, ge=1)
    max_frames: int = Field(default=16, ge=1)
    workers: int = Field(default=4, ge=1)


class AgentConfig(StrictModel):
    # The prompt set: a packaged name or a YAML file path / URI (see ``prompts.load_prompt_set``).
    prompt_set: str = prompts.DEFAULT_PROMPT_SET
    # Checksum of the set's texts. Left empty it is filled in when the set is loaded (so every run's
    # recorded config names the exact texts); set it to pin a set: a different file is then an error.
    prompt_set_checksum: str | None = None
    prompt_mode: prompts.PromptMode = "agentic_general"
    question_suffix: bool = True  # append " The video path for this video is: <basename>"
    overview_frames: int = Field(default=64, ge=1)  # K (nFrames gating overrides it per row)
    max_pixels: int = Field(default=DEFAULT_MAX_PIXELS, ge=1024)
    min_pixels: int = Field(default=DEFAULT_MIN_PIXELS, ge=1)
    overview_max_pixels: int | None = Field(
        default=None, ge=1024, description="Pixel budget per overview frame (None: max_pixels)."
    )
    overview_min_pixels: int | None = Field(
        default=None, ge=1, description="Smallest overview frame in pixels (None: min_pixels)."
    )
    crop_max_pixels: int | None = Field(
        default=None, ge=1024, description="Pixel budget per crop frame (None: max_pixels)."
    )
    overview_labels: bool = Field(
        default=True, description="Put a '<t seconds>' label before each overview frame (off: frames only)."
    )
    max_turns: int = Field(default=3, ge=0)  # tool rounds; the generation after the last one must answer
    max_parallel: int = Field(default=5, ge=1)  # calls executed per turn; extras get an error response
    max_new_tokens: int = Field(default=2048, ge=1)  # per main-agent generation
    max_context_tokens: int = Field(default=32768, ge=256)
    temperature: float = Field(default=0.7, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = None
    think_prefix: bool = False  # PARA-GRPO constrained.think_prefix
    # Eval only: after the last tool round, ask for the answer in this format (and cap its tokens).
    forced_answer: prompts.ForcedAnswer | None = None
    # "subagent": each call is answered by a sub-agent report; "crop_frames": the crop frames go straight
    # to the main model (eval parity with the released driver).
    tool_mode: Literal["subagent", "crop_frames"] = "subagent"
    # "batched": all crops of a turn decoded together and all its sub-agents in one engine call;
    # "sequential": one call at a time (crop, then its sub-agent) - the reference the benchmark compares to.
    dispatch: Literal["batched", "sequential"] = "batched"
    # Seconds before a generation call is abandoned (None: wait).
    engine_timeout_s: float | None = Field(default=None, gt=0.0)
    subagent: SubagentConfig = Field(default_factory=SubagentConfig)
    crop: CropConfig = Field(default_factory=CropConfig)

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
