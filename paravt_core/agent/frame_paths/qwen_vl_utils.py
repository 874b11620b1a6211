"""``agent.frame_path=qwen-vl-utils``: the release's frames (``paravt_core.video.release_frames``).

What the release's eval (utils.py get_frames/crop_frames/pil_to_b64) sends: qwen-vl-utils 0.0.14 sampling and
sizing (the coded picture as stored, ``round(linspace)`` indices, 28-px grid, bicubic antialiased resize), JPEG
85, and no per-request image settings: the server's processor keeps the checkpoint's own, so ours does too.
preset=release sets this path (``eval.protocols.RELEASE_AGENT``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .base import Window

if TYPE_CHECKING:
    from paravt_core.agent.config import AgentConfig
    from paravt_core.video.api import Frames
    from paravt_core.video.errors import CropError


class QwenVlUtilsPath:
    """The release's frames: its fixed overview budget, crops at 1 fps up to ``agent.crop.max_frames``."""

    name = "qwen-vl-utils"
    summary = "the release's frames (28-px grid, bicubic, JPEG 85)"
    comparability_note = ""  # the published numbers were made on these frames

    def overview(self, video: str, k: int, agent: AgentConfig) -> Frames:
        from paravt_core.video import release_frames  # lazily: the config imports this module

        # no frames where qwen-vl-utils fails (get_frames catches it and asks the question without frames)
        return release_frames.overview_fail_soft(video, k)

    def crops(self, video: str, windows: Sequence[Window], agent: AgentConfig) -> list[Frames | CropError]:
        from paravt_core.video import release_frames

        lo, hi = agent.crop_pixels
        return release_frames.run_crops(video, windows, max_frames=agent.crop.max_frames, min_pixels=lo,
                                        max_pixels=hi)  # fmt: skip

    def processor_pixels(self, agent: AgentConfig) -> tuple[int, int] | None:
        return None  # the release's server: the checkpoint's own processor settings
