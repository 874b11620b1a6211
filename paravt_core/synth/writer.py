"""The one video writer of the synthetic data: raw frames piped into ffmpeg, the command built with
``ffmpeg-python``.

Everything synthetic goes through ``encode_frames``: the event videos of the dataset (``scenes.py``), the
index-coded videos of the decoder tests (``codes.py``) and the encodes of the property tests (H.264, HEVC,
VP9, MPEG-4 in MP4, MKV, MPEG-TS, WebM, AVI; constant or variable frame rate).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

import ffmpeg
import numpy as np

# Containers that store a per-track timescale (``-video_track_timescale``).
_MOV_SUFFIXES = (".mp4", ".mov", ".m4v")


def encode_frames(
    path: str | Path,
    frames: np.ndarray,
    *,
    fps: float,
    codec: str = "libx264",
    pix_fmt: str = "yuv420p",
    gop: int | None = None,
    setpts: str | None = None,
    timescale: int | None = None,
    options: Mapping[str, object] | None = None,
) -> None:
    """Encode ``frames`` (N x H x W grey or N x H x W x 3 RGB, uint8) to ``path``; the container follows
    the file name.

    Frames are played at ``fps`` unless ``setpts`` gives an ffmpeg ``setpts`` expression of the frame
    number ``N`` in ticks of 1/``timescale`` s (variable frame rate); the encoder and MP4 track then use
    that fine time base, so timestamps are kept exactly. ``options`` are further output options, e.g.
    ``{"x264-params": "bframes=0", "crf": 16}``.
    """
    if shutil.which("ffmpeg") is None:
        raise RuntimeError("ffmpeg not found on PATH; install it (apt-get install ffmpeg) to write videos")
    frames = np.ascontiguousarray(frames, dtype=np.uint8)
    if frames.ndim == 3:
        in_fmt = "gray"
    elif frames.ndim == 4 and frames.shape[-1] == 3:
        in_fmt = "rgb24"
    else:
        raise ValueError(f"frames must be N x H x W or N x H x W x 3, got shape {frames.shape}")
    n, height, width = frames.shape[:3]
    if pix_fmt.endswith("420p") and (width % 2 or height % 2):
        raise ValueError(f"{pix_fmt} needs even frame sizes, got {width}x{height}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)

    stream = ffmpeg.input("pipe:", format="rawvideo", pix_fmt=in_fmt, s=f"{width}x{height}", r=f"{fps:g}")
    out: dict[str, object] = {"vcodec": codec, "pix_fmt": pix_fmt, "an": None}
    if gop is not None:
        out["g"] = gop
    if setpts is not None:
        if timescale is None:
            raise ValueError("setpts needs the timescale its ticks are counted in")
        stream = stream.filter("settb", f"1/{timescale}").filter("setpts", setpts)
        # Keep every frame with its own timestamp; the encoder time base must be the fine one too, else
        # timestamps are rounded to the input frame rate.
        out.update({"fps_mode": "passthrough", "enc_time_base": f"1/{timescale}"})
    if timescale is not None and path.suffix.lower() in _MOV_SUFFIXES:
        out["video_track_timescale"] = timescale
    out.update(options or {})
    command = (
        ffmpeg.output(stream, str(path), **out)
        .global_args("-hide_banner", "-loglevel", "error")
        .overwrite_output()
    )
    try:
        command.run(input=frames.tobytes(), capture_stdout=True, capture_stderr=True)
    except ffmpeg.Error as exc:
        detail = (exc.stderr or b"").decode(errors="replace")[-2000:]
        raise RuntimeError(f"ffmpeg failed writing {path} ({n} frames): {detail}") from exc
