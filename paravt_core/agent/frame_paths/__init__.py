"""Frame paths: how an episode's frames are made, one module per path, chosen by ``agent.frame_path``.

``FRAME_PATHS`` is the registry: the config accepts exactly its names (``FramePathName``), and the episode, the
eval stage and the report reach a path only through ``get``. Adding a path is one module here (a class with the
``FramePath`` members, ``base.py``) plus one line in ``FRAME_PATHS``.

Kept free of the video stack at import time (each path imports it when it makes frames): the agent config,
which ``paravt``'s argument parser loads, imports this package.
"""

from __future__ import annotations

from typing import Literal

from .base import FramePath, Window
from .decoder import DecoderPath
from .qwen_vl_utils import QwenVlUtilsPath

FRAME_PATHS: dict[str, FramePath] = {
    DecoderPath.name: DecoderPath(),
    QwenVlUtilsPath.name: QwenVlUtilsPath(),
}
DEFAULT_FRAME_PATH = DecoderPath.name  # agent.frame_path's default, and the path of a run that recorded none
RELEASE_FRAME_PATH = QwenVlUtilsPath.name  # the release's frames (preset=release sets it)

FramePathName = Literal[tuple(FRAME_PATHS)]  # the config's choices: exactly the registry's names
HELP = "; ".join(f"{name}: {path.summary}" for name, path in FRAME_PATHS.items())


class UnknownFramePathError(ValueError):
    """A frame path the registry does not hold."""


def get(name: str) -> FramePath:
    """The path registered as ``name``; an unknown name is refused naming the known ones."""
    try:
        return FRAME_PATHS[name]
    except KeyError:
        raise UnknownFramePathError(f"unknown frame path {name!r}; known: {', '.join(FRAME_PATHS)}") from None


def comparability_note(name: str | None) -> str:
    """What the report says of a run's frames beside the published numbers ("" for the release's own): the
    path's note; a run that recorded no frame path ran the default one, and a path this version does not know
    is named as not the release's."""
    name = DEFAULT_FRAME_PATH if name is None else name
    if name not in FRAME_PATHS:
        return f"frames: agent.frame_path={name}, not the release's ({RELEASE_FRAME_PATH})"
    return FRAME_PATHS[name].comparability_note


__all__ = [
    "DEFAULT_FRAME_PATH",
    "FRAME_PATHS",
    "HELP",
    "RELEASE_FRAME_PATH",
    "FramePath",
    "FramePathName",
    "UnknownFramePathError",
    "Window",
    "comparability_note",
    "get",
]
