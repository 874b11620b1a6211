"""A frame path from outside the library (one class; its registration is one line), for the tests of the path
registry and of the stages that ask the path."""

from __future__ import annotations

import torch

from paravt_core.agent.config import AgentConfig
from paravt_core.video.api import Frames
from paravt_core.video.errors import CropError


class StillPath:
    """Grey stills at whole seconds, no video read: frames no library path makes."""

    name = "stills"
    summary = "grey stills"
    comparability_note = "frames: grey stills, not the release's"

    def overview(self, clip: str, k: int, agent: AgentConfig) -> Frames:
        return Frames(
            torch.full((k, 3, 32, 64), 128, dtype=torch.uint8), [float(i) for i in range(k)], list(range(k))
        )

    def crops(self, clip: str, windows, agent: AgentConfig) -> list[Frames | CropError]:
        out: list[Frames | CropError] = []
        for start, end in windows:
            if float(start) >= float(end):
                out.append(CropError(f"no stills in {start}-{end}", start=start, end=end))
            else:
                frames = torch.full((2, 3, 32, 32), 64, dtype=torch.uint8)
                out.append(
                    Frames(frames, [float(start), float(end)], [0, 1], window=(float(start), float(end)))
                )
        return out

    def processor_pixels(self, agent: AgentConfig) -> tuple[int, int] | None:
        return (32 * 32, 64 * 64)
