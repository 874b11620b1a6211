"""Error types of the video package.

Every failure caused by a bad file or a bad request is a ``VideoError`` subclass with a message that names
the video and says what is wrong, so callers (the crop tool, the episode loop) can turn it into text instead
of crashing.
"""

from __future__ import annotations


class VideoError(Exception):
    """Base class: the video or the request cannot be served."""


class VideoNotFoundError(VideoError):
    """The path or URI does not exist."""


class VideoDecodeError(VideoError):
    """The file exists but is not a decodable video (empty, not a video, truncated, audio only...)."""


class InvalidTimeError(VideoError, ValueError):
    """A time value is missing, not a number, negative, non-finite or absurdly large."""


class InvalidWindowError(VideoError, ValueError):
    """A [start, end] window is empty or lies outside the video."""


class CropError(VideoError):
    """One crop of a batch failed; returned (not raised) by ``run_crops`` so sibling crops survive."""

    def __init__(
        self, message: str, *, start: object = None, end: object = None, cause: BaseException | None = None
    ):
        super().__init__(message)
        self.start = start
        self.end = end
        self.cause = cause
