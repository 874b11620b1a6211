"""Row checks for the SFT and RL parquets (docs/method.md §2.3-2.4), columnar, with per-row reasons.

SFT ``messages`` must decode, be a list of ``{role, content: [part, ...]}`` objects, have an assistant
turn, and media parts must hold ``{"url": str}``. RL rows need a prompt, at least one video and an
``extra_info`` with an ``answer``; a ``question_type`` that is absent, null or empty means open-ended
(docs/method.md §2.4: anything but ``mcq``/``tvg`` is ``oe``) and is written as ``oe`` (``default_question_type``),
one that is not a string is rejected. Referenced files must exist.

The Python functions ``check_messages_obj`` / ``check_extra_info_obj`` are the definition of valid.
The JSON fast paths only ever *accept* rows that definition accepts and hand everything else to it:
- SFT JSON: one RE2 pass with a regular expression of the canonical shape (the nesting depth of a
  ParaVT conversation is fixed, so the shape is a regular language); rows outside it are decoded in
  Python. Native nested ``messages`` are checked on the Arrow arrays.
- RL ``extra_info`` JSON: Arrow's JSON parser with a strict schema; the rows it refuses are found by
  bisection and decided in Python.
"""

from __future__ import annotations

import functools
import json
import os
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from paravt_core.data.schema import MEDIA_PART_TYPES, RL_EXTRA_INFO_KEYS
from paravt_core.user_errors import ParavtUserError


class DataError(ParavtUserError, RuntimeError):
    """Input data the stage cannot use. The message names the file (and the row or member when known)."""


class Reason(IntEnum):
    """Why a row is rejected. Lower value wins when a row has several problems."""

    OK = 0
    MESSAGES_NULL = 1
    MESSAGES_NOT_JSON = 2
    MESSAGES_NOT_LIST = 3
    CONTENT_NOT_LIST = 4
    MALFORMED_MEDIA_PART = 5
    NO_ASSISTANT_TURN = 6
    PROMPT_MISSING = 7
    VIDEOS_EMPTY = 8
    EXTRA_INFO_INVALID = 9
    EXTRA_INFO_MISSING_ANSWER = 10
    EXTRA_INFO_BAD_QUESTION_TYPE = 11
    PATH_ESCAPES_ROOT = 12
    PATH_NOT_SENTINEL = 13
    PATH_EMPTY = 14
    MISSING_FILE = 15

    @property
    def label(self) -> str:
        return self.name.lower()


REASON_LABELS: list[str] = [r.label for r in Reason]


def merge(reasons: np.ndarray, rows: np.ndarray, reason: int) -> None:
    """Give ``reason`` to ``rows`` that have no reason yet, or a lower-priority one (in place)."""
    if len(rows) == 0:
        return
    current = reasons[rows]
    reasons[rows] = np.where((current == 0) | (current > reason), reason, current)


# ----------------------------------------------------------------------------------- Arrow nesting


def list_parts(arr: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """(offsets starting at 0, the values they index) of a possibly sliced List/LargeList array."""
    offsets = arr.offsets.to_numpy().astype(np.int64)
    start, stop = int(offsets[0]), int(offsets[-1])
    return offsets - start, arr.values.slice(start, stop - start)


def rebuild_list(like: pa.Array, offsets: np.ndarray, values: pa.Array) -> pa.Array:
    """A list array of ``like``'s type and nulls over new ``values`` (``offsets`` as from ``list_parts``)."""
    cls = pa.LargeListArray if pa.types.is_large_list(like.type) else pa.ListArray
    off_type = pa.int64() if cls is pa.LargeListArray else pa.int32()
    mask = like.is_null() if like.null_count else None
    return cls.from_arrays(pa.array(offsets, off_type), values, type=like.type, mask=mask)


def null_mask(arr: pa.Array) -> np.ndarray:
    return arr.is_null().to_numpy(zero_copy_only=False)


def leaf_rows(arr: pa.Array, path: tuple[str, ...]) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Walk ``path`` ("[]" = into a list, a name = into a struct field) from a top-level column.

    Returns (values at the end of the path, top-level row of each value, whether all its ancestors
    are non-null). A value's own nullness is left to the caller (``null_mask``): a null ``url`` is a
    malformed reference, a value under a null ``video_url`` is no reference at all.
    """
    rows = np.arange(len(arr), dtype=np.int64)
    live = ~null_mask(arr)
    ancestors = np.ones(len(arr), dtype=bool)
    for step in path:
        if step == "[]":
            if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
                raise TypeError(f"expected a list, got {arr.type}")
            offsets, values = list_parts(arr)
            counts = np.diff(offsets)
            rows = np.repeat(rows, counts)
            ancestors = np.repeat(live, counts)
            arr = values
        else:
            if not pa.types.is_struct(arr.type) or arr.type.get_field_index(step) < 0:
                raise TypeError(f"expected a struct with field {step!r}, got {arr.type}")
            ancestors = live
            arr = arr.field(step)
        live = ancestors & ~null_mask(arr)
    return arr, rows, ancestors


def map_leaf(arr: pa.Array, path: tuple[str, ...], fn: Callable[[pa.Array], pa.Array]) -> pa.Array:
    """Rebuild ``arr`` with ``fn`` applied to the leaf array at ``path``; everything else is kept as is."""
    if not path:
        return fn(arr)
    step, rest = path[0], path[1:]
    if step == "[]":
        offsets, values = list_parts(arr)
        return rebuild_list(arr, offsets, map_leaf(values, rest, fn))
    children = [
        map_leaf(arr.field(i), rest, fn) if field.name == step else arr.field(i)
        for i, field in enumerate(arr.type)
    ]
    mask = arr.is_null() if arr.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(arr.type), mask=mask)


def has_path(typ: pa.DataType, path: tuple[str, ...]) -> bool:
    """Whether ``path`` exists in the nested type ``typ``."""
    for step in path:
        if step == "[]":
            if not (pa.types.is_list(typ) or pa.types.is_large_list(typ)):
                return False
            typ = typ.value_type
        else:
            if not pa.types.is_struct(typ) or typ.get_field_index(step) < 0:
                return False
            typ = typ.field(step).type
    return True


# ----------------------------------------------------------------------------------- SFT messages


def check_messages_obj(obj: Any) -> int:
    """Reason for one decoded ``messages`` value. The reference definition of a valid SFT row."""
    if not isinstance(obj, list) or not all(isinstance(m, dict) for m in obj):
        return Reason.MESSAGES_NOT_LIST
    worst = Reason.OK
    assistant = False
    for msg in obj:
        content = msg.get("content")
        if not isinstance(content, list) or not all(isinstance(p, dict) for p in content):
            return Reason.CONTENT_NOT_LIST
        assistant = assistant or msg.get("role") == "assistant"
        for part in content:
            for kind in MEDIA_PART_TYPES:
                sub = part.get(kind)
                if sub is None:
                    if part.get("type") == kind:
                        worst = Reason.MALFORMED_MEDIA_PART
                elif not (isinstance(sub, dict) and isinstance(sub.get("url"), str)):
                    worst = Reason.MALFORMED_MEDIA_PART
    if worst:
        return worst
    return Reason.OK if assistant else Reason.NO_ASSISTANT_TURN


def check_messages_text(text: str | None) -> int:
    """``check_messages_obj`` for a JSON string (``None`` is a null row)."""
    if text is None:
        return Reason.MESSAGES_NULL
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return Reason.MESSAGES_NOT_JSON
    return check_messages_obj(obj)


def _check_messages_nested(m: pa.Array) -> np.ndarray:
    """Reason per row of native list<struct<role, content: list<part>>> messages."""
    n = len(m)
    reasons = np.zeros(n, dtype=np.int8)
    merge(reasons, np.flatnonzero(null_mask(m)), Reason.MESSAGES_NULL)
    if not has_path(m.type, ("[]",)) or not pa.types.is_struct(m.type.value_type):
        merge(reasons, np.flatnonzero(~null_mask(m)), Reason.MESSAGES_NOT_LIST)
        return reasons
    msgs, msg_row, msg_anc = leaf_rows(m, ("[]",))
    merge(reasons, msg_row[msg_anc & null_mask(msgs)], Reason.MESSAGES_NOT_LIST)
    msg_live = msg_anc & ~null_mask(msgs)
    role_ok = has_path(m.type, ("[]", "role"))
    has_assistant = np.zeros(n, dtype=bool)
    if role_ok:
        is_asst = pc.fill_null(pc.equal(msgs.field("role"), "assistant"), False).to_numpy(
            zero_copy_only=False
        )
        has_assistant[msg_row[msg_live & is_asst]] = True
    if not has_path(m.type, ("[]", "content", "[]")) or not pa.types.is_struct(
        m.type.value_type.field("content").type.value_type
    ):
        merge(reasons, msg_row[msg_live], Reason.CONTENT_NOT_LIST)
        return reasons
    content, content_row, content_anc = leaf_rows(m, ("[]", "content"))
    merge(reasons, content_row[content_anc & null_mask(content)], Reason.CONTENT_NOT_LIST)
    parts, part_row, part_anc = leaf_rows(m, ("[]", "content", "[]"))
    merge(reasons, part_row[part_anc & null_mask(parts)], Reason.CONTENT_NOT_LIST)
    part_live = part_anc & ~null_mask(parts)
    has_type = has_path(m.type, ("[]", "content", "[]", "type"))
    for kind in MEDIA_PART_TYPES:
        if not has_path(m.type, ("[]", "content", "[]", kind)):
            continue
        sub = parts.field(kind)
        sub_null = null_mask(sub)
        if has_type:
            typed = pc.fill_null(pc.equal(parts.field("type"), kind), False).to_numpy(zero_copy_only=False)
            merge(reasons, part_row[part_live & typed & sub_null], Reason.MALFORMED_MEDIA_PART)
        if not has_path(m.type, ("[]", "content", "[]", kind, "url")):
            merge(reasons, part_row[part_live & ~sub_null], Reason.MALFORMED_MEDIA_PART)
            continue
        url, url_row, url_anc = leaf_rows(m, ("[]", "content", "[]", kind, "url"))
        merge(reasons, url_row[url_anc & null_mask(url)], Reason.MALFORMED_MEDIA_PART)
    merge(reasons, np.flatnonzero(~has_assistant), Reason.NO_ASSISTANT_TURN)
    return reasons


# ----------------------------------------------------------------------------------- strict JSON parse

# Bisection stops here and hands the rows to the Python checks (also after this many failed levels,
# so a file whose every row carries an unlisted field is not parsed log(n) times over).
_LEAF_ROWS = 64
_MAX_DEPTH = 6
_PARSE_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError)


def string_offsets(arr: pa.Array) -> np.ndarray:
    dtype = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    return np.frombuffer(arr.buffers()[1], dtype=dtype)[arr.offset : arr.offset + len(arr) + 1]


def parse_strict(texts: pa.Array, schema: pa.Schema) -> pa.Array | None:
    """Parse every (non-null) string as the value of the single field of ``schema``; None if any fails.

    Each row becomes one line ``{"<field>": <row>}``. Unlisted fields are errors, so a row cannot smuggle
    a second top-level key; raw CR/LF become tabs (equally valid between tokens, equally invalid inside
    strings), so a row cannot span lines; a row that splits into several objects changes the row count.
    """
    key = schema.field(0).name
    safe = pc.replace_substring(pc.replace_substring(pc.fill_null(texts, "null"), "\n", "\t"), "\r", "\t")
    wrapped = pc.binary_join_element_wise(f'{{"{key}":', safe, "}\n", "")
    offs = string_offsets(wrapped)
    start, stop = int(offs[0]), int(offs[-1])
    longest = int(np.diff(offs).max()) if len(offs) > 1 else 0
    data = wrapped.buffers()[2].slice(start, stop - start)
    block = int(min(max(4 << 20, 2 * longest + 64), (1 << 31) - 1))
    try:
        table = pj.read_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(block_size=block),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error"),
        )
    except _PARSE_ERRORS:
        return None
    if table.num_rows != len(texts):
        return None
    return table.column(key).combine_chunks()


def _bisect(
    texts: pa.Array,
    schema: pa.Schema,
    columnar: Callable[[pa.Array], np.ndarray],
    by_row: Callable[[str | None], int],
    reasons: np.ndarray,
    lo: int,
    hi: int,
    depth: int = 0,
) -> None:
    """Fill reasons[lo:hi]: columnar where the strict parse succeeds, Python for refused rows."""
    if hi <= lo:
        return
    parsed = parse_strict(texts.slice(lo, hi - lo), schema)
    if parsed is not None:
        reasons[lo:hi] = columnar(parsed)
        return
    if hi - lo <= _LEAF_ROWS or depth >= _MAX_DEPTH:
        for i, text in enumerate(texts.slice(lo, hi - lo).to_pylist(), start=lo):
            reasons[i] = by_row(text)
        return
    mid = (lo + hi) // 2
    _bisect(texts, schema, columnar, by_row, reasons, lo, mid, depth + 1)
    _bisect(texts, schema, columnar, by_row, reasons, mid, hi, depth + 1)


def _as_string(col: pa.Array, what: str) -> pa.Array:
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        return col
    if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
        return col.cast(pa.large_string() if pa.types.is_large_binary(col.type) else pa.string())
    raise TypeError(f"{what}: unsupported column type {col.type}")


def is_json_column(col: pa.Array) -> bool:
    return any(f(col.type) for f in (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary))


# The canonical shape of a ParaVT ``messages`` string as a regular language (its nesting depth is fixed):
# a list of {role, content} objects whose parts are text, video_url or image_url objects, keys in either
# order, any JSON whitespace. Arrow's RE2 kernel accepts the rows that match in one pass over the batch;
# everything it accepts is valid JSON of the right shape. Rows it does not accept (other keys, other
# layouts, and the bad rows) are decided by ``check_messages_text``.
_WS = r"[ \t\n\r]*"
_STR = r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"'


def _obj(*pairs: tuple[str, str]) -> str:
    body = f"{_WS},{_WS}".join(f'"{key}"{_WS}:{_WS}{value}' for key, value in pairs)
    return rf"\{{{_WS}{body}{_WS}\}}"


def _two_keys(a: tuple[str, str], b: tuple[str, str]) -> str:
    return f"(?:{_obj(a, b)}|{_obj(b, a)})"


def _list(item: str) -> str:
    return rf"\[{_WS}(?:{item}(?:{_WS},{_WS}{item})*)?{_WS}\]"


# the url key only in canonical form (`"url": "`), so a canonical row's paths are all found by a split;
# its value without escapes, so the bytes between the quotes are the path itself
_URL_OBJ = rf'\{{{_WS}"url": "[^"\\\x00-\x1f]*"{_WS}\}}'
_PART = (
    "(?:"
    + "|".join(
        [_two_keys(("type", '"text"'), ("text", _STR))]
        + [_two_keys(("type", f'"{kind}"'), (kind, _URL_OBJ)) for kind in MEDIA_PART_TYPES]
    )
    + ")"
)
_MESSAGE = _two_keys(("role", _STR), ("content", _list(_PART)))
_ASSISTANT_MESSAGE = _two_keys(("role", '"assistant"'), ("content", _list(_PART)))
_SEP = f"{_WS},{_WS}"
# A canonical list holding an assistant message, in one pass (no second search for the role).
CANONICAL_MESSAGES_RE = (
    rf"^{_WS}\[{_WS}(?:{_MESSAGE}{_SEP})*{_ASSISTANT_MESSAGE}(?:{_SEP}{_MESSAGE})*{_WS}\]{_WS}$"
)
# What may follow a canonical first message: more messages (an assistant one among them, or not), the end.
_TAIL_WITH_ASSISTANT_RE = (
    rf"^(?:{_SEP}{_MESSAGE})*{_SEP}{_ASSISTANT_MESSAGE}(?:{_SEP}{_MESSAGE})*{_WS}\]{_WS}$"
)
_TAIL_RE = rf"^(?:{_SEP}{_MESSAGE})*{_WS}\]{_WS}$"
# The same languages restricted to a list whose last message is the assistant's (a ParaVT conversation
# ends with the answer): a subset, and a cheaper DFA than "an assistant message anywhere", so it runs
# first and the general pattern only sees the rows it refused (``_match_canonical``).
CANONICAL_ENDS_WITH_ASSISTANT_RE = rf"^{_WS}\[{_WS}(?:{_MESSAGE}{_SEP})*{_ASSISTANT_MESSAGE}{_WS}\]{_WS}$"
_TAIL_ENDS_WITH_ASSISTANT_RE = rf"^(?:{_SEP}{_MESSAGE})*{_SEP}{_ASSISTANT_MESSAGE}{_WS}\]{_WS}$"
_FIRST_MESSAGE_RE = rf"^{_WS}\[{_WS}{_MESSAGE}$"
_OPENS_WITH_ASSISTANT_RE = rf"^{_WS}\[{_WS}{_ASSISTANT_MESSAGE}$"
_OPEN = re.compile(r"[ \t\n\r]*\[[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def shared_first_message(texts: pa.Array) -> tuple[str, bool] | None:
    """(the first row's text up to the end of its first message, whether that message is the assistant's),
    when that much is in the canonical shape; None otherwise.

    Rows of one file share their first message (the system prompt with the tool block, about half of a
    row's bytes), so ``check_messages`` checks it once and only the rest of each row that starts with it.
    """
    first = next((t for t in texts.slice(0, 64).to_pylist() if t is not None), None)
    opening = _OPEN.match(first) if first is not None else None
    if opening is None:
        return None
    try:
        _, end = _DECODER.raw_decode(first, opening.end())
    except (ValueError, RecursionError):
        return None
    prefix = first[:end]
    shape = _first_message_shape(prefix)
    return None if shape is None else (prefix, shape)


@functools.lru_cache(maxsize=16)
def _first_message_shape(prefix: str) -> bool | None:
    """None when ``prefix`` is not a canonical list opening with one message, else whether that message
    is the assistant's. Cached: every batch of a file carries the same first message, and each call
    compiles a 5 KB pattern."""
    if not pc.match_substring_regex(pa.array([prefix]), _FIRST_MESSAGE_RE)[0].as_py():
        return None
    return bool(pc.match_substring_regex(pa.array([prefix]), _OPENS_WITH_ASSISTANT_RE)[0].as_py())


@dataclass(frozen=True)
class SharedStart:
    """The batch's shared first message (``shared_first_message``) and the rows that begin with it."""

    text: str
    size: int  # its UTF-8 byte length
    assistant: bool  # whether that message is the assistant's
    rows: np.ndarray  # bool per row: the row begins with it


def shared_start(texts: pa.Array) -> SharedStart | None:
    """``shared_first_message`` and the rows that begin with it (one ``starts_with`` pass), or None."""
    shared = shared_first_message(texts)
    if shared is None:
        return None
    rows = pc.fill_null(pc.starts_with(texts, shared[0]), False).to_numpy(zero_copy_only=False)
    return SharedStart(shared[0], len(shared[0].encode()), shared[1], rows)


def _starts_and_tails(texts: pa.Array, split: np.ndarray, cut: int) -> pa.Array:
    """Each row as two strings over the same bytes (no copy): its first ``cut`` bytes where ``split``
    (else the whole row), then the rest. The tail patterns are anchored at the start and cannot begin
    with ``[``, so RE2 gives up on a row's start at its first bytes and scans only the tails."""
    offsets = string_offsets(texts)
    bounds = np.empty(2 * len(texts) + 1, dtype=offsets.dtype)
    bounds[0::2] = offsets
    bounds[1::2] = np.where(split, offsets[:-1] + cut, offsets[1:])
    return pa.Array.from_buffers(texts.type, 2 * len(texts), [None, pa.py_buffer(bounds), texts.buffers()[2]])


def canonical_rows(texts: pa.Array, start: SharedStart | None = None) -> np.ndarray:
    """Rows in the canonical shape with an assistant message (valid without decoding them).

    One RE2 pass (a second only over rows whose last message is not the assistant's, see
    ``_match_canonical``); rows that begin with the batch's shared first message (checked once) are matched
    from the end of it on, over a zero-copy view of their remaining bytes. Exact: a canonical row starting with a
    canonical first message is that message followed by a canonical tail, and the converse. ``start``:
    ``shared_start(texts)`` when the caller has it already (None: worked out here).
    """
    n = len(texts)
    canonical = np.zeros(n, dtype=bool)
    if start is None:
        start = shared_start(texts)
    skip = start.rows if start is not None else np.zeros(n, dtype=bool)
    if skip.any():
        views = _starts_and_tails(texts, skip, start.size)
        if start.assistant:
            tails = pc.match_substring_regex(views, _TAIL_RE).to_numpy(zero_copy_only=False)
        else:
            eligible = np.zeros(len(views), dtype=bool)
            eligible[1::2] = skip  # the tails; the row starts are refused by both patterns at their `[`
            tails = _match_canonical(views, eligible, _TAIL_ENDS_WITH_ASSISTANT_RE, _TAIL_WITH_ASSISTANT_RE)
        canonical[skip] = tails[1::2][skip]
    rest = np.flatnonzero(~skip)
    if len(rest):
        others = texts if len(rest) == n else texts.take(pa.array(rest))
        eligible = ~null_mask(others) if others.null_count else np.ones(len(others), dtype=bool)
        canonical[rest] = _match_canonical(
            others, eligible, CANONICAL_ENDS_WITH_ASSISTANT_RE, CANONICAL_MESSAGES_RE
        )
    return canonical


def _match_canonical(
    texts: pa.Array, eligible: np.ndarray, ends_with_assistant: str, anywhere: str
) -> np.ndarray:
    """Which strings match ``anywhere`` (an assistant message anywhere), by the cheaper ``ends_with_assistant``
    (a subset of it: the last message is the assistant's) first, then ``anywhere`` over only the
    ``eligible`` strings the first refused. Strings not ``eligible`` must be refused by both patterns."""
    matched = pc.fill_null(pc.match_substring_regex(texts, ends_with_assistant), False)
    matched = matched.to_numpy(zero_copy_only=False)
    refused = np.flatnonzero(eligible & ~matched)
    if len(refused):
        again = pc.match_substring_regex(texts.take(pa.array(refused)), anywhere)
        matched[refused] = pc.fill_null(again, False).to_numpy(zero_copy_only=False)
    return matched


def check_messages(col: pa.Array, start: SharedStart | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """(reason per row, rows in the canonical shape or None) of an SFT ``messages`` column.

    JSON rows in the canonical shape are valid without decoding them (``canonical_rows``; ``start`` as
    there); the others are decoded and checked in Python. Native nested columns are checked on the
    Arrow arrays (no canonical mask).
    """
    if not is_json_column(col):
        return _check_messages_nested(col), None
    texts = _as_string(col, "messages")
    n = len(texts)
    reasons = np.zeros(n, dtype=np.int8)
    if n == 0:
        return reasons, np.zeros(0, dtype=bool)
    canonical = canonical_rows(texts, start)
    rest = np.flatnonzero(~canonical)
    if len(rest):
        for i, text in zip(rest, texts.take(pa.array(rest)).to_pylist(), strict=True):
            reasons[i] = check_messages_text(text)
    return reasons, canonical


# ----------------------------------------------------------------------------------- RL rows


def check_extra_info_obj(obj: Any) -> int:
    """Reason for one decoded ``extra_info`` value (the reference definition)."""
    if not isinstance(obj, dict):
        return Reason.EXTRA_INFO_INVALID
    if obj.get(RL_EXTRA_INFO_KEYS[0]) is None:
        return Reason.EXTRA_INFO_MISSING_ANSWER
    qtype = obj.get(RL_EXTRA_INFO_KEYS[1])
    if qtype is not None and not isinstance(qtype, str):
        return Reason.EXTRA_INFO_BAD_QUESTION_TYPE
    return Reason.OK


def question_type_missing_obj(obj: Any) -> bool:
    """Whether a decoded ``extra_info`` has no usable ``question_type`` (absent, null or empty)."""
    return isinstance(obj, dict) and obj.get(RL_EXTRA_INFO_KEYS[1]) in (None, "")


def check_extra_info_text(text: str | None) -> int:
    if text is None:
        return Reason.EXTRA_INFO_INVALID
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return Reason.EXTRA_INFO_INVALID
    return check_extra_info_obj(obj)


EXTRA_INFO_JSON_SCHEMA = pa.schema([("e", pa.struct([(k, pa.string()) for k in RL_EXTRA_INFO_KEYS]))])


def _check_extra_info_struct(col: pa.Array) -> np.ndarray:
    n = len(col)
    reasons = np.zeros(n, dtype=np.int8)
    merge(reasons, np.flatnonzero(null_mask(col)), Reason.EXTRA_INFO_INVALID)
    if not pa.types.is_struct(col.type):
        merge(reasons, np.arange(n), Reason.EXTRA_INFO_INVALID)
        return reasons
    answer_key, qtype_key = RL_EXTRA_INFO_KEYS
    if col.type.get_field_index(answer_key) < 0:
        merge(reasons, np.arange(n), Reason.EXTRA_INFO_MISSING_ANSWER)
    else:
        merge(reasons, np.flatnonzero(null_mask(col.field(answer_key))), Reason.EXTRA_INFO_MISSING_ANSWER)
    index = col.type.get_field_index(qtype_key)
    if (
        index >= 0
        and not _is_text(col.type.field(index).type)
        and not pa.types.is_null(col.type.field(index).type)
    ):
        bad = ~null_mask(col.field(qtype_key))  # a non-string question_type (an all-null field is absent)
        merge(reasons, np.flatnonzero(bad), Reason.EXTRA_INFO_BAD_QUESTION_TYPE)
    return reasons


def _is_text(typ: pa.DataType) -> bool:
    return pa.types.is_string(typ) or pa.types.is_large_string(typ)


def _question_type_missing_struct(col: pa.Array) -> np.ndarray:
    """Rows of a struct ``extra_info`` whose ``question_type`` is absent, null or empty (null rows: no)."""
    live = ~null_mask(col)
    if not pa.types.is_struct(col.type):
        return np.zeros(len(col), dtype=bool)
    index = col.type.get_field_index(RL_EXTRA_INFO_KEYS[1])
    if index < 0 or pa.types.is_null(col.type.field(index).type):
        return live
    qtype = col.field(index)
    if not _is_text(qtype.type):
        return np.zeros(len(col), dtype=bool)
    empty = pc.fill_null(pc.equal(pc.binary_length(qtype), 0), True).to_numpy(zero_copy_only=False)
    return live & empty


def default_question_type(col: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """``extra_info`` with ``question_type`` set to ``oe`` where it is absent, null or empty; and those rows.

    A struct column gets the field filled in (added when the struct has none); JSON rows lacking it are
    decoded, completed and encoded again in Python (rare: released rows carry it).
    """
    n = len(col)
    key = RL_EXTRA_INFO_KEYS[1]
    if not is_json_column(col):
        missing = _question_type_missing_struct(col)
        if not missing.any():
            return col, missing
        fill = pa.array(np.where(missing, "oe", None), pa.string())
        index = col.type.get_field_index(key)
        fields, children = list(col.type), [col.field(i) for i in range(col.type.num_fields)]
        if index < 0 or pa.types.is_null(fields[index].type):
            if index >= 0:
                del fields[index], children[index]
            fields.append(pa.field(key, pa.string()))
            children.append(fill)
        else:
            children[index] = pc.if_else(pa.array(missing), fill.cast(fields[index].type), children[index])
        mask = col.is_null() if col.null_count else None
        return pa.StructArray.from_arrays(children, fields=fields, mask=mask), missing
    texts = _as_string(col, "extra_info")
    flags = np.zeros(n, dtype=np.int8)
    _bisect(
        texts, EXTRA_INFO_JSON_SCHEMA, _question_type_missing_struct, _question_type_missing_text, flags, 0, n
    )
    missing = flags.astype(bool)
    rows = np.flatnonzero(missing)
    if not len(rows):
        return col, missing
    fixed = []
    for text in texts.take(pa.array(rows)).to_pylist():
        obj = json.loads(text)
        obj[key] = "oe"
        fixed.append(json.dumps(obj, ensure_ascii=False))
    out = pc.replace_with_mask(texts, pa.array(missing), pa.array(fixed, texts.type))
    return (out if out.type == col.type else out.cast(col.type)), missing


def _question_type_missing_text(text: str | None) -> int:
    if text is None:
        return 0
    try:
        return int(question_type_missing_obj(json.loads(text)))
    except (ValueError, RecursionError):
        return 0


def check_extra_info(col: pa.Array) -> np.ndarray:
    """Reason per row of an RL ``extra_info`` column (struct or JSON string)."""
    if not is_json_column(col):
        return _check_extra_info_struct(col)
    texts = _as_string(col, "extra_info")
    n = len(texts)
    reasons = np.zeros(n, dtype=np.int8)
    _bisect(texts, EXTRA_INFO_JSON_SCHEMA, _check_extra_info_struct, check_extra_info_text, reasons, 0, n)
    return reasons


def _empty_or_null(col: pa.Array) -> np.ndarray:
    """Rows that are null or hold an empty list/string."""
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        length = pc.list_value_length(col)
    elif is_json_column(col):
        length = pc.binary_length(col)
    else:
        return null_mask(col)
    return pc.fill_null(pc.equal(length, 0), True).to_numpy(zero_copy_only=False)


def check_rl(batch: pa.RecordBatch) -> np.ndarray:
    """Reason per row of an RL batch (prompt, videos, extra_info; paths are checked by materialize)."""
    reasons = np.zeros(batch.num_rows, dtype=np.int8)
    merge(reasons, np.flatnonzero(_empty_or_null(batch.column("prompt"))), Reason.PROMPT_MISSING)
    merge(reasons, np.flatnonzero(_empty_or_null(batch.column("videos"))), Reason.VIDEOS_EMPTY)
    extra = check_extra_info(batch.column("extra_info"))
    bad = np.flatnonzero(extra)
    merge_each(reasons, bad, extra[bad])
    return reasons


def merge_each(reasons: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
    """``merge`` with a reason per row."""
    if len(rows) == 0:
        return
    current = reasons[rows]
    reasons[rows] = np.where((current == 0) | (current > values), values, current)


# ----------------------------------------------------------------------------------- files


class FileChecker:
    """Which materialized files exist under a local media root; each distinct path is checked once.

    Paths are answered from a cache; new ones are grouped by directory. A directory holding at least
    ``list_min`` new paths is listed once (``os.scandir``; far cheaper than a ``stat`` per file when a
    dataset references thousands of files of one directory) and a name found there as a file is present.
    A name the listing lacks, and every path of a smaller group, is decided by ``os.path.isfile`` itself,
    so the answer is always exactly ``os.path.isfile(root/path)``. Safe to share between threads.
    """

    def __init__(self, root: str, list_min: int = 32) -> None:
        self.root = root
        self.list_min = list_min
        self._present: set[str] = set()
        self._absent: set[str] = set()
        self._listings: dict[str, frozenset[str]] = {}
        self._decided: pa.Array | None = None  # every decided path, for columnar lookups
        self._lock = threading.Lock()

    def missing(self, paths: Iterable[str] | pa.Array) -> set[str]:
        """The subset of sentinel paths (relative, ``file://`` already stripped) with no file under root.

        An Arrow string array is looked up columnar (``is_in`` against the paths decided so far), so a
        batch whose paths were all seen before costs no Python work per path.
        """
        if isinstance(paths, pa.Array):
            return self._missing_array(paths)
        wanted = set(paths)
        with self._lock:
            new = wanted - self._present - self._absent
            if new:
                self._decide(new)
            return wanted & self._absent

    def _missing_array(self, paths: pa.Array) -> set[str]:
        unique = pc.unique(paths.cast(pa.string())).drop_null()
        with self._lock:
            decided = self._decided
            new = unique if decided is None else unique.filter(pc.invert(pc.is_in(unique, value_set=decided)))
            if len(new):
                self._decide(set(new.to_pylist()) - self._present - self._absent)
                self._decided = new if decided is None else pa.concat_arrays([decided, new])
            if not self._absent:
                return set()
            hit = pc.is_in(unique, value_set=pa.array(sorted(self._absent), pa.string()))
            return set(unique.filter(hit).to_pylist())

    def _decide(self, paths: set[str]) -> None:
        # (directory, name) by one str.rpartition per path: posixpath.dirname/basename cost several
        # calls each, and root/directory/name is the same file as root/path either way
        by_dir: dict[str, list[tuple[str, str]]] = {}
        for path in paths:
            directory, _, name = path.rpartition("/")
            by_dir.setdefault(directory, []).append((path, name))
        for directory, group in by_dir.items():
            listing = self._listings.get(directory)
            if listing is None and len(group) >= self.list_min:
                listing = self._listings[directory] = self._list(directory)
            for path, name in group:
                found = listing is not None and name in listing
                if found or os.path.isfile(os.path.join(self.root, path)):
                    self._present.add(path)
                else:
                    self._absent.add(path)

    def _list(self, directory: str) -> frozenset[str]:
        """Names of the files (symlinks to files included) in ``root/directory``; empty if unreadable."""
        try:
            with os.scandir(os.path.join(self.root, directory)) as entries:
                return frozenset(e.name for e in entries if e.is_file())
        except OSError:
            return frozenset()
