"""Parsing of the main agent's text: tool calls (per block), answers, open tags (docs/method.md §4.3). Pure functions.

Every function here accepts arbitrary text and never raises: a block that cannot be understood becomes a
``ParsedCall`` with an ``error`` that is shown to the model, and its sibling blocks are unaffected.

Calls are read outside reasoning only: a call block that starts inside a closed ``<think>...</think>``
is the model thinking about a call, not making one. An unclosed ``<think>`` does not hide what follows
(a turn cut or written without ``</think>`` still calls its tools).

Two call forms are read, in order of appearance:

- ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (the protocol form). The JSON object is
  decoded first, so a ``</tool_call>`` inside a JSON string does not end the block early.
- ``<tool_code>crop_video(start_time=.., end_time=..)</tool_code>`` (legacy form some Qwen-VL checkpoints
  emit). Only literal arguments are accepted; nothing is evaluated.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from paravt_core.video.timeparse import parse_time

CallForm = Literal["tool_call", "tool_code"]

_OPEN = {"tool_call": "<tool_call>", "tool_code": "<tool_code>"}
_CLOSE = {"tool_call": "</tool_call>", "tool_code": "</tool_code>"}
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
# Tags whose opening without a closing means the text stopped in the middle of a structure.
_PAIRED_TAGS = ("think", "tool_call", "tool_code", "answer")
# Longest legacy call body we hand to the Python parser (bounded work on hostile input).
_MAX_CODE_BODY = 4000
# Positional legacy arguments map to these names, by count.
_POSITIONAL = {2: ("start_time", "end_time"), 3: ("video_path", "start_time", "end_time")}


@dataclass(frozen=True)
class ParsedCall:
    """One tool-call block of a turn, parsed or not."""

    index: int  # position among the turn's blocks (both forms), 0-based
    form: CallForm
    raw: str  # the text between the tags (or to the end of the text when unclosed)
    name: str | None = None
    arguments: dict[str, Any] | None = None
    error: str | None = None  # why the block is unusable; None when name and arguments are valid
    span: tuple[int, int] = field(default=(0, 0))  # character span of the whole block in the text
    skipped: bool = False  # not a call at all for the released driver's reader (no response is sent)

    @property
    def ok(self) -> bool:
        return self.error is None


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """The canonical text of one call (as SFT traces write it)."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def has_tool_call(text: str) -> bool:
    """True when the text opens at least one call block (parsable or not) outside closed think blocks."""
    return bool(parse_tool_calls(text))


def think_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the closed ``<think>...</think>`` blocks of ``text`` (tags included)."""
    spans = []
    pos = 0
    while (start := text.find("<think>", pos)) >= 0:
        close = text.find("</think>", start)
        if close < 0:
            break  # unclosed: hides nothing
        end = close + len("</think>")
        spans.append((start, end))
        pos = end
    return spans


def parse_tool_calls(text: str) -> list[ParsedCall]:
    """All call blocks of ``text`` outside closed think blocks, in order of appearance, each parsed alone."""
    calls: list[ParsedCall] = []
    spans = think_spans(text)
    pos = 0
    while True:
        form, start = _next_open(text, pos, spans)
        if form is None:
            return calls
        body_start = start + len(_OPEN[form])
        raw, end, error = _block_body(text, form, body_start, spans)
        if error is None:
            name, arguments, error = _parse_body(form, raw)
        else:
            name, arguments = None, None
        calls.append(ParsedCall(len(calls), form, raw, name, arguments, error, (start, end)))
        pos = end


def _next_open(text: str, pos: int, spans: list[tuple[int, int]]) -> tuple[CallForm | None, int]:
    """The first opening tag at or after ``pos`` that is not inside a think span."""
    while True:
        best: tuple[CallForm | None, int] = (None, -1)
        for form, tag in _OPEN.items():
            i = text.find(tag, pos)
            if i >= 0 and (best[0] is None or i < best[1]):
                best = (form, i)  # type: ignore[assignment]
        inside = next((end for start, end in spans if start <= best[1] < end), None)
        if best[0] is None or inside is None:
            return best
        pos = inside


def _block_body(
    text: str, form: CallForm, body_start: int, spans: list[tuple[int, int]]
) -> tuple[str, int, str | None]:
    """(body, end of block, error). A block ends at its closing tag; the next opening tag or the end of
    the text without a closing tag makes it unterminated."""
    close = _CLOSE[form]
    if form == "tool_call":
        # Prefer the end of a complete JSON object followed by the closing tag: robust to tags in strings.
        json_end = _json_object_end(text, body_start)
        if json_end is not None:
            rest = text[json_end:]
            stripped = rest.lstrip()
            if stripped.startswith(close):
                end = json_end + (len(rest) - len(stripped)) + len(close)
                return text[body_start : end - len(close)], end, None
    close_at = text.find(close, body_start)
    next_open, next_at = _next_open(text, body_start, spans)
    if close_at < 0 or (next_open is not None and next_at < close_at):
        stop = next_at if next_open is not None else len(text)
        return text[body_start:stop], stop, f"the {_OPEN[form]} block is not closed with {close}"
    return text[body_start:close_at], close_at + len(close), None


def _json_object_end(text: str, pos: int) -> int | None:
    i = pos
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    if i >= len(text) or text[i] != "{":
        return None
    try:
        _, end = json.JSONDecoder().raw_decode(text, i)
    except (ValueError, RecursionError):
        return None
    return end


def _parse_body(form: CallForm, raw: str) -> tuple[str | None, dict[str, Any] | None, str | None]:
    if form == "tool_call":
        return _parse_json_call(raw)
    return _parse_code_call(raw)


def _parse_json_call(raw: str) -> tuple[str | None, dict[str, Any] | None, str | None]:
    body = raw.strip()
    if not body:
        return None, None, "the <tool_call> block is empty"
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError) as err:
        return None, None, f"the <tool_call> body is not valid JSON ({_short(str(err))})"
    if not isinstance(obj, dict):
        return None, None, 'the <tool_call> body must be a JSON object {"name": ..., "arguments": {...}}'
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None, None, 'the tool call has no "name" string'
    arguments = obj.get("arguments", obj.get("parameters"))
    if isinstance(arguments, str):  # some models double-encode the arguments
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return name, None, 'the "arguments" string is not a JSON object'
    if not isinstance(arguments, dict):
        return name, None, 'the tool call needs an "arguments" JSON object'
    return name, arguments, None


def _parse_code_call(raw: str) -> tuple[str | None, dict[str, Any] | None, str | None]:
    body = raw.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("python").strip()
    if not body:
        return None, None, "the <tool_code> block is empty"
    if len(body) > _MAX_CODE_BODY:
        return None, None, "the <tool_code> block is too long"
    try:
        node = ast.parse(body, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None, None, "the <tool_code> block is not a call like crop_video(start_time=.., end_time=..)"
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        return None, None, "the <tool_code> block is not a call like crop_video(start_time=.., end_time=..)"
    name = node.func.id
    try:
        positional = [ast.literal_eval(a) for a in node.args]
        keywords = {}
        for kw in node.keywords:
            if kw.arg is None:
                return name, None, "**arguments are not supported in <tool_code>"
            keywords[kw.arg] = ast.literal_eval(kw.value)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return name, None, "<tool_code> arguments must be literal numbers or strings"
    values = [*positional, *keywords.values()]
    if not all(v is None or isinstance(v, str | int | float) for v in values):
        return name, None, "<tool_code> arguments must be literal numbers or strings"
    if positional:
        names = _POSITIONAL.get(len(positional))
        if names is None:
            return name, None, "<tool_code> takes start_time and end_time (and optionally video_path)"
        keywords = {**dict(zip(names, positional, strict=True)), **keywords}
    return name, keywords, None


def _short(message: str, limit: int = 120) -> str:
    return message if len(message) <= limit else message[:limit] + "..."


def call_window(arguments: dict[str, Any]) -> tuple[float, float]:
    """(start, end) seconds from a crop call's arguments; aliases ``start``/``end`` accepted.

    Raises ``InvalidTimeError`` (a ``ValueError``) with a message for the model. Whether the window fits
    the video is checked by the crop tool, which knows the duration."""
    start = arguments.get("start_time", arguments.get("start"))
    end = arguments.get("end_time", arguments.get("end"))
    return parse_time(start, "start_time"), parse_time(end, "end_time")


# The released driver's reading of call blocks (paravt/eval/driver.py parse_tool_calls at cf55249), for the
# release layout. Facts it fixes: every <tool_call> body, think blocks included, that json.loads accepts is a
# call (the name is not checked, missing "arguments" is {}); bodies it cannot decode are silently ignored; the
# <tool_code> bodies follow the <tool_call> ones, and only crop_video(k=v, ...) with at least one k=v is read.
_RELEASED_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_RELEASED_CODE = re.compile(r"<tool_code>\s*(.*?)\s*</tool_code>", re.DOTALL)
_RELEASED_CROP = re.compile(r"crop_video\s*\((.*)\)\s*", re.DOTALL)
_RELEASED_TOOL = "crop_video"  # the only name the driver's <tool_code> reader accepts
_RELEASED_KEY = re.compile(r",\s*(?=[a-zA-Z_]+\s*=)")  # a comma that starts the next name=


def parse_tool_calls_as_released(text: str) -> list[ParsedCall]:
    """The call blocks of ``text`` as the released eval driver reads them, in its order. A block it ignores is
    kept as a ``skipped`` call (its reason in ``error``) so records can count it; it gets no response. A body
    the driver would crash the whole sample on (a JSON value that is not an object, non-object arguments) is
    an unparsed call here: the model gets our error text for it (documented difference)."""
    calls: list[ParsedCall] = []

    def add(form: CallForm, raw: str, name=None, arguments=None, error=None, skipped=False) -> None:
        calls.append(ParsedCall(len(calls), form, raw, name, arguments, error, skipped=skipped))

    for body in _RELEASED_CALL.findall(text):
        try:
            obj = json.loads(body)
        except (ValueError, RecursionError) as err:
            add(
                "tool_call",
                body,
                error=f"the <tool_call> body is not valid JSON ({_short(str(err))})",
                skipped=True,
            )
            continue
        if not isinstance(obj, dict):
            add(
                "tool_call",
                body,
                error='the <tool_call> body must be a JSON object {"name": ..., "arguments": {...}}',
            )
            continue
        name = obj.get("name") if isinstance(obj.get("name"), str) else None
        arguments = obj.get("arguments", {})
        if not isinstance(arguments, dict):
            add("tool_call", body, name, error='the tool call needs an "arguments" JSON object')
            continue
        add("tool_call", body, name, arguments)
    for body in _RELEASED_CODE.findall(text):
        found = _RELEASED_CROP.match(body.strip())
        arguments = _released_code_arguments(found.group(1)) if found else {}
        if not arguments:
            add("tool_code", body, error="not a crop_video(name=value, ...) call", skipped=True)
        else:
            add("tool_code", body, _RELEASED_TOOL, arguments)
    return calls


def _released_code_arguments(text: str) -> dict[str, Any]:
    """``name=value`` pairs of a legacy call: each value unquoted, a float when it reads as one."""
    arguments: dict[str, Any] = {}
    for pair in _RELEASED_KEY.split(text):
        key, sep, value = pair.partition("=")
        if not sep:
            continue
        value = value.strip().strip("\"'")
        try:
            arguments[key.strip()] = float(value)
        except ValueError:
            arguments[key.strip()] = value
    return arguments


# The released driver's default window length when a call gives no end (paravt/eval/driver.py, eval_one).
LENIENT_DEFAULT_SECONDS = 10.0


def lenient_time(value: object) -> float:
    """A time read as the released eval driver reads it (``utils.parse_time_val`` at cf55249): a number as
    it is (negative too), a string Python's ``float`` accepts, ``MM:SS`` or ``HH:MM:SS``; anything else is
    0.0. Never raises (a number too large for a float is 0.0 too, where the driver gave up on the sample)."""
    if isinstance(value, int | float | str):
        try:
            return float(value)
        except (ValueError, OverflowError):
            pass
    if isinstance(value, str) and ":" in value:
        fields = value.split(":")
        if len(fields) in (2, 3):
            try:
                numbers = [float(f) for f in fields]
            except ValueError:
                return 0.0
            seconds = 0.0
            for number in numbers:  # HH:MM:SS or MM:SS, most significant first
                seconds = seconds * 60 + number
            return seconds
    return 0.0


def lenient_window(arguments: dict[str, Any]) -> tuple[float, float]:
    """(start, end) as the released driver reads a call's arguments: ``start_time`` else ``start`` else 0;
    ``end_time`` else ``end`` else start + 10 s; each value through ``lenient_time``."""
    start = lenient_time(arguments.get("start_time", arguments.get("start", 0)))
    for key in ("end_time", "end"):
        if key in arguments:
            return start, lenient_time(arguments[key])
    return start, start + LENIENT_DEFAULT_SECONDS


def extract_answer(text: str) -> str | None:
    """Body of the last complete ``<answer>...</answer>`` (stripped), or None."""
    found = _ANSWER.findall(text)
    return found[-1].strip() if found else None


def open_tag_at_end(text: str) -> str | None:
    """Name of the last paired tag that is opened and not closed at the end of ``text`` (e.g. "answer"
    for a generation cut inside ``<answer>``), or None."""
    latest: tuple[int, str] | None = None
    for tag in _PAIRED_TAGS:
        opened = text.rfind(f"<{tag}>")
        if opened >= 0 and text.find(f"</{tag}>", opened) < 0 and (latest is None or opened > latest[0]):
            latest = (opened, tag)
    return latest[1] if latest else None
