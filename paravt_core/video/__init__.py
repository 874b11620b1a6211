"""Video: exact seek-based frame sampling, overview and crops on the Qwen3-VL grid, the crop_video tool.

Public API::

    probe(uri) -> VideoInfo
    overview(uri, k, *, max_pixels=50176, min_pixels=784, snap_to_keyframes=False) -> Frames
    crop(uri, start, end, *, min_frames=2, max_frames=16, fps=1.0, max_pixels=..., min_pixels=...) -> Frames
    run_crops(uri, windows, max_workers=None, **crop_options) -> list[Frames | CropError]
    crop_video_tool(video_uri, arguments) -> ToolResult(ok, frames, text)
    parse_time(value) -> seconds; fit_to_grid(height, width, ...) -> (height, width)

``Frames.frames`` is a uint8 tensor T x C x H x W (RGB); ``timestamps`` are true presentation times in seconds.
Frames are what a player shows: the container's timeline (edit lists applied), the display matrix's rotation
and the sample aspect ratio (applied before the pixel budget). Error texts meant for the model name the video
by its file name only.
"""

from .api import (
    DEFAULT_CACHE,
    OVERVIEW_CACHE,
    Frames,
    VideoInfo,
    crop,
    overview,
    probe,
    resolve,
    run_crops,
    time_label,
)
from .decoder import DecoderCache, FrameTable
from .errors import (
    CropError,
    InvalidTimeError,
    InvalidWindowError,
    VideoDecodeError,
    VideoError,
    VideoNotFoundError,
)
from .sizing import DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS, GRID, fit_to_grid
from .timeparse import parse_time
from .tool import ToolResult, crop_video_tool, parse_crop_arguments

__all__ = [
    "DEFAULT_CACHE",
    "DEFAULT_MAX_PIXELS",
    "DEFAULT_MIN_PIXELS",
    "GRID",
    "OVERVIEW_CACHE",
    "CropError",
    "DecoderCache",
    "FrameTable",
    "Frames",
    "InvalidTimeError",
    "InvalidWindowError",
    "ToolResult",
    "VideoDecodeError",
    "VideoError",
    "VideoInfo",
    "VideoNotFoundError",
    "crop",
    "crop_video_tool",
    "fit_to_grid",
    "overview",
    "parse_crop_arguments",
    "parse_time",
    "probe",
    "resolve",
    "run_crops",
    "time_label",
]
