"""Parsing of time values written by the model (pure functions).

Accepted: numbers, numeric strings (``"12"``, ``"12.5"``, ``"12.5s"``), ``MM:SS`` and ``HH:MM:SS`` with
optional fractional seconds. Everything else raises ``InvalidTimeError`` with a message meant for the model.
"""

from __future__ import annotations

import math
import re
import reprlib

from .errors import InvalidTimeError

# A week: longer than any video we serve; anything above is a model mistake (or an overflow attempt).
MAX_SECONDS = 7 * 24 * 3600.0
# Longest time string worth reading ("167:59:59.999999" is 16): longer strings are refused before any
# conversion, so huge digit strings never reach int()/float() (int() refuses > 4300 digits with ValueError).
MAX_TEXT = 40

_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_CLOCK = re.compile(r"(?:(\d+):)?(\d+):(\d+(?:\.\d*)?)")


def parse_time(value: object, name: str = "time") -> float:
    """Return ``value`` as seconds (float), or raise ``InvalidTimeError`` naming ``name``."""
    if value is None:
        raise InvalidTimeError(f"{name} is missing")
    if isinstance(value, bool):  # bool is an int subclass; true/false is never a time
        raise InvalidTimeError(f"{name} must be a number of seconds, got {shown(value)}")
    if isinstance(value, int) and not -MAX_SECONDS <= value <= MAX_SECONDS:
        # Checked on the integer itself: float(10**309) raises OverflowError.
        if value < 0:
            raise InvalidTimeError(f"{name} must not be negative, got {shown(value)}")
        raise InvalidTimeError(f"{name} {shown(value)} is too large (at most {MAX_SECONDS:.0f} seconds)")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _parse_string(value, name)
    else:
        raise InvalidTimeError(
            f"{name} must be a number of seconds, got {type(value).__name__} {shown(value)}"
        )
    if not math.isfinite(seconds):
        raise InvalidTimeError(f"{name} must be a finite number, got {shown(value)}")
    if seconds < 0:
        raise InvalidTimeError(f"{name} must not be negative, got {shown(value)}")
    if seconds > MAX_SECONDS:
        raise InvalidTimeError(f"{name} {shown(value)} is too large (at most {MAX_SECONDS:.0f} seconds)")
    return seconds


def shown(value: object) -> str:
    """A bounded repr for messages: a huge or deeply nested argument is not echoed back in full, and never
    makes the message itself fail (repr of an int over 4300 digits raises ValueError, of a deeply nested
    list RecursionError)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"(an integer of about {int(value.bit_length() * 0.30103) + 1} digits)"
    try:
        text = _REPR.repr(value)
    except (ValueError, RecursionError):
        return f"(a {type(value).__name__} too large to show)"
    return text if len(text) <= MAX_TEXT + 2 else text[:MAX_TEXT] + "..."


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, MAX_TEXT, MAX_TEXT, MAX_TEXT


def _parse_string(text: str, name: str) -> float:
    s = text.strip()
    if len(s) > MAX_TEXT:
        raise InvalidTimeError(
            f"{name} {shown(text)} is too long for a time (seconds, e.g. 12.5, or MM:SS or HH:MM:SS)"
        )
    if s.lower().endswith("s") and _NUMBER.fullmatch(s[:-1].strip()):
        s = s[:-1].strip()
    if _NUMBER.fullmatch(s):
        return float(s)
    clock = _CLOCK.fullmatch(s)
    if clock:
        hours, minutes, secs = clock.group(1), int(clock.group(2)), float(clock.group(3))
        if secs >= 60:
            raise InvalidTimeError(f"{name} {text!r}: seconds must be below 60")
        if hours is not None and minutes >= 60:
            raise InvalidTimeError(f"{name} {text!r}: minutes must be below 60")
        return (int(hours or 0) * 60 + minutes) * 60 + secs
    raise InvalidTimeError(f"{name} must be seconds (e.g. 12.5) or MM:SS or HH:MM:SS, got {shown(text)}")
