"""``agent.frame_path=decoder``: our own frames (``paravt_core.video.api``).

The picture as a player shows it (sample aspect ratio and rotation applied), frames at exact presentation
times, one swscale resize to the 32-px grid, each frame to its own pixel budget (overview and crops apart), sent
as PNG with our ``mm_processor_kwargs``: the processor is set wide enough to keep every frame as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .base import Window

if TYPE_CHECKING:
    from paravt_core.agent.config import AgentConfig
    from paravt_core.video.api import Frames
    from paravt_core.video.errors import CropError


class DecoderPath:
    """Our frames: the agent's pixel budgets, crops at ``agent.crop``'s rate and frame counts."""

    name = "decoder"
    summary = "ours (32-px grid)"
    # The release's frames (utils.py get_frames/crop_frames/pil_to_b64, lines 44-86): qwen-vl-utils 0.0.14
    # sizing on the 28-px grid, torchvision bicubic with antialias, JPEG quality 85, no per-request image
    # settings; ours differ in each.
    comparability_note = ("frames: ours (swscale to the 32-px grid, PNG, mm_processor_kwargs), not the release's "
                          "(qwen-vl-utils 0.0.14 28-px grid, bicubic antialias, JPEG 85, server defaults)")  # fmt: skip

    def overview(self, video: str, k: int, agent: AgentConfig) -> Frames:
        from paravt_core.video import api  # lazily: the config imports this module, the video stack is torch

        lo, hi = agent.overview_pixels
        return api.overview(video, k, max_pixels=hi, min_pixels=lo)

    def crops(self, video: str, windows: Sequence[Window], agent: AgentConfig) -> list[Frames | CropError]:
        from paravt_core.video import api

        lo, hi = agent.crop_pixels
        crop = agent.crop
        return api.run_crops(video, windows, crop.workers, min_frames=crop.min_frames, max_frames=crop.max_frames,
                             fps=crop.fps, rounding=crop.rounding, max_pixels=hi, min_pixels=lo)  # fmt: skip

    def processor_pixels(self, agent: AgentConfig) -> tuple[int, int] | None:
        return agent.processor_pixels
