"""What a frame path is: the one object that decides how an episode's frames are made and handed over.

A frame path owns the overview's frames, the crops' frames, the pixel settings the image processor (ours and a
launched server's) is given, and the note the eval report writes when a run on it is set against the published
numbers (which the release made on its own frames). The episode, the eval stage and the report ask the path;
none of them names one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # types only: the config imports this package, and the video stack imports torch
    from paravt_core.agent.config import AgentConfig
    from paravt_core.video.api import Frames
    from paravt_core.video.errors import CropError

Window = tuple[object, object]  # a crop's (start, end) as the call gave them: the path parses the times


class FramePath(Protocol):
    """One way of turning a video into the frames an episode sends (``agent.frame_path`` names it)."""

    name: str  # the config value (``agent.frame_path``)
    summary: str  # a few words for ``--help``: what its frames are
    # What the report says when a run on this path is set against the published numbers: "" when its frames
    # are the release's, else a sentence starting "frames: " that names the difference.
    comparability_note: str

    def overview(self, video: str, k: int, agent: AgentConfig) -> Frames:
        """``k`` frames of the whole video (raises ``VideoError`` where the path cannot make them)."""
        ...

    def crops(self, video: str, windows: Sequence[Window], agent: AgentConfig) -> list[Frames | CropError]:
        """Every window's frames, or the ``CropError`` the model is told about, in the order of ``windows``."""
        ...

    def processor_pixels(self, agent: AgentConfig) -> tuple[int, int] | None:
        """(min, max) pixels the image processor is set to, ours and a launched server's alike (None: the
        checkpoint's own processor settings)."""
        ...
