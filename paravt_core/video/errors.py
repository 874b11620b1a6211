"""Error types of the video package.

Every failure caused by a bad file or a bad request is a ``VideoError`` subclass with a message that names
the video and says what is wrong, so callers (the crop tool, the episode loop) can turn it into text instead
of crashing.
"""

from __future__ import annotations

import os
import re

from paravt_core.user_errors import ParavtUserError

# An absolute path (or an s3:// / file:// URI) inside a message: reduced to its last component.
_HOST_PATH = re.compile(r"(?:(?:s3|file)://|(?<![\w.:/])/)(?:[^\s/'\"]+/)+([^\s/'\"]+)")


def for_model(text: str, *locations: str | None) -> str:
    """``text`` with every host path reduced to its file name, for messages the model sees.

    The known ``locations`` (the URI asked for, the local path opened) are replaced first; any other
    absolute path (a library error quoting a cache path) is reduced by pattern."""
    for loc in sorted({x for x in locations if x}, key=len, reverse=True):
        text = text.replace(loc, os.path.basename(loc.rstrip("/")) or loc)
    return _HOST_PATH.sub(r"\1", text)


class VideoError(ParavtUserError):
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
