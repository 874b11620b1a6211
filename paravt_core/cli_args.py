"""Argument types the CLI's verbs share: the core's (``paravt synth``) and those a plug-in adds (``paravt demo``).

Standard library only: the CLI imports this before its Ctrl-C handling is in place (see ``paravt_core.cli``).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

# Smallest synthetic dataset: one video per sentinel bucket, two events of >= 1 s with gaps per video.
MIN_SYNTH_VIDEOS = 4
MIN_SYNTH_SECONDS = 5.0
VIDEOS_HELP = f"number of videos (>= {MIN_SYNTH_VIDEOS}: one per sentinel bucket; default: %(default)s)"
SECONDS_HELP = f"length of each video in seconds (>= {MIN_SYNTH_SECONDS:g}; default: %(default)s)"


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= ``low``, refused in one line otherwise."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    return parse


def seconds_at_least(low: float) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds >= ``low``, refused in one line otherwise."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
        if not math.isfinite(value) or value < low:
            raise argparse.ArgumentTypeError(f"must be a finite number >= {low:g}, got {text}")
        return value

    return parse
