"""Shared by several test modules (from tests/unit/test_video_display.py, where it was first written)."""

from __future__ import annotations

import av
import numpy as np

from paravt_core.synth import code_image


def write_with_orientation(path, degrees: int, hflip: bool, frames: int = 20) -> None:
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 128, 96, "yuv420p"
        stream.set_display_rotation(degrees, hflip=hflip)
        for i in range(frames):
            rgb = np.repeat(code_image(i, 128, 96)[:, :, None], 3, axis=2)
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
