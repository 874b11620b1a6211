"""Materialize: rewrite sentinel media paths in the SFT and RL parquets, columnar, batch by batch.

- SFT ``messages`` as JSON strings: media references are ``"url": "<path>"`` values. One search finds
  every ``"url": "`` key after the batch's shared first message (the system prompt, searched never);
  the paths are cut out of the bytes as an Arrow array and classified there; each row, cut at its
  paths' starts into zero-copy pieces and joined back with ``<prefix>/``, is the whole rewrite (one
  copy of the bytes). Rows the structural check did not find in the
  canonical shape (other spacing, extra keys, bad rows) and paths holding JSON escapes are rewritten in
  Python with ``json`` instead: exact, and rare in practice (``json.dumps`` output is canonical).
- SFT ``messages`` as native nested lists and RL ``videos`` (list<struct<video>>): the string leaf is
  rewritten and the list/struct arrays are rebuilt around it.

Every other column, the schema and the row order are kept. Rows with a path that is empty, not a sentinel
path or escapes the root (``..``) are rejected with that reason, never passed through.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from paravt_core.data import sentinel
from paravt_core.data.schema import MEDIA_PART_TYPES, RL_REQUIRED_COLUMNS, SFT_REQUIRED_COLUMNS, parquet_kind
from paravt_core.data.validate import (
    REASON_LABELS,
    DataError,
    FileChecker,
    Reason,
    SharedStart,
    check_messages,
    check_rl,
    default_question_type,
    has_path,
    is_json_column,
    leaf_rows,
    list_parts,
    map_leaf,
    merge,
    merge_each,
    null_mask,
    shared_start,
    string_offsets,
)

CANONICAL_KEY = '"url": "'
# A "url" key not followed by `: "` (other spacing, or not a string value).
NONCANONICAL_KEY_RE = r'"url"(?:$|[^:]|:$|:[^ ]|: $|: [^"])'
_STATUS_REASON = {
    sentinel.EMPTY: Reason.PATH_EMPTY,
    sentinel.NOT_SENTINEL: Reason.PATH_NOT_SENTINEL,
    sentinel.ESCAPES_ROOT: Reason.PATH_ESCAPES_ROOT,
}


@dataclass
class MediaRefs:
    """Every media path of a batch: top-level row, the path as written, its sentinel status."""

    rows: np.ndarray
    paths: pa.Array
    status: np.ndarray

    @staticmethod
    def empty() -> MediaRefs:
        return MediaRefs(np.zeros(0, np.int64), pa.array([], pa.string()), np.zeros(0, np.int8))

    @staticmethod
    def concat(parts: list[MediaRefs]) -> MediaRefs:
        parts = [p for p in parts if len(p.rows)]
        if not parts:
            return MediaRefs.empty()
        if len(parts) == 1 and parts[0].paths.type == pa.string():
            return parts[0]
        paths = pa.concat_arrays([p.paths.cast(pa.string()) for p in parts])
        return MediaRefs(
            np.concatenate([p.rows for p in parts]), paths, np.concatenate([p.status for p in parts])
        )

    def path_reasons(self, n: int) -> np.ndarray:
        """Reason per row from its worst path (0 when every path is a good sentinel path)."""
        reasons = np.zeros(n, dtype=np.int8)
        for status, reason in _STATUS_REASON.items():
            rows = self.rows[self.status == status]
            if len(rows):
                current = reasons[rows]
                reasons[rows] = np.where((current == 0) | (current > reason), reason, current)
        return reasons


@dataclass
class Rewritten:
    """A rewritten column plus what was found. ``reasons`` marks rows the rewrite itself could not read."""

    column: pa.Array
    refs: MediaRefs
    reasons: np.ndarray
    python_rows: int = 0


def _json_text(value: str) -> str:
    """``value`` as it must appear between the quotes of a JSON string."""
    return json.dumps(value, ensure_ascii=False)[1:-1]


# ----------------------------------------------------------------------------------- SFT, JSON strings


def _over(texts: pa.Array, bounds: np.ndarray, valid: np.ndarray | None) -> pa.Array:
    """Strings ``data[bounds[i]:bounds[i + 1]]`` over ``texts``' own data buffer (no copy); ``valid``:
    which of them are non-null (Arrow's string kernels skip null slots, so their bytes are never read)."""
    dtype = np.int64 if pa.types.is_large_string(texts.type) else np.int32
    bitmap = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        texts.type, len(bounds) - 1, [bitmap, pa.py_buffer(bounds.astype(dtype)), texts.buffers()[2]]
    )


def find_url_values(
    texts: pa.Array, start: SharedStart | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, start, length) of the value after every canonical ``"url": "`` key of every row.

    ``start`` is a byte offset into ``texts``' data buffer; ``length`` runs to the next ``"`` within the
    row (-1: none, not a JSON string). One search (Arrow's ``split_pattern``, used for its piece offsets
    only) over each row's bytes after the shared first message (``start``, as from ``shared_start``;
    None: worked out here) when that message holds no key; the values' ends are searched in the
    pieces of that search, which are all that is copied.
    """
    n = len(texts)
    offsets = string_offsets(texts).astype(np.int64)
    if start is None:
        start = shared_start(texts)
    skip = offsets[:-1]
    # the shared message is a JSON object (it ends with "}"), so no key straddles its end
    if start is not None and CANONICAL_KEY not in start.text:
        skip = skip + np.where(start.rows, start.size, 0)
    # 2n strings: each row's lead (null: never searched), then the rest of the row
    bounds = np.empty(2 * n + 1, dtype=np.int64)
    bounds[0::2], bounds[1::2] = offsets, skip
    valid = np.zeros(2 * n, dtype=bool)
    valid[1::2] = ~null_mask(texts) if texts.null_count else True
    pieces = pc.split_pattern(_over(texts, bounds, valid), CANONICAL_KEY)
    list_offsets, flat = list_parts(pieces)
    counts = np.diff(list_offsets)
    element = np.repeat(np.arange(2 * n, dtype=np.int64), counts)
    first = list_offsets[:-1][element]
    index = np.arange(len(flat), dtype=np.int64)
    later = index != first  # piece k > 0 of a rest follows the k-th key: its start is a value's start
    flat_offsets = string_offsets(flat).astype(np.int64)
    # piece start in the original bytes: the rest's start + bytes of the earlier pieces + the keys between
    starts = (
        bounds[element] + flat_offsets[:-1] - flat_offsets[first] + (index - first) * len(CANONICAL_KEY)
    )[later]
    rows = element[later] // 2
    if not len(starts):
        return rows, starts, starts.copy()
    # each value's end: the first `"` of its piece (the pieces are already apart: no views to build);
    # a piece with none that another key follows in its row ends where that key's `"` begins
    found = pc.find_substring(_over(flat, flat_offsets, later), '"').to_numpy(zero_copy_only=False)
    found = found[later].astype(np.int64)
    keyed = np.append(element[1:] == element[:-1], False)[later]
    return rows, starts, np.where((found < 0) & keyed, np.diff(flat_offsets)[later], found)


def cut_values(texts: pa.Array, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """The byte ranges ``[start, start + length)`` of ``texts``' data buffer (ascending, disjoint) as a
    string array: zero-copy strings over the buffer, every other one taken (one copy of those bytes)."""
    if not len(starts):
        return pa.array([], pa.string())
    bounds = np.empty(2 * len(starts), dtype=np.int64)
    bounds[0::2], bounds[1::2] = starts, starts + lengths
    cut = _over(texts, bounds, None).take(pa.array(np.arange(0, 2 * len(starts), 2)))
    return cut if cut.type == pa.string() else cut.cast(pa.string())


def insert_at(texts: pa.Array, rows: np.ndarray, starts: np.ndarray, text: str) -> pa.Array:
    """``texts`` with ``text`` inserted at each byte offset ``starts`` (ascending; ``rows``: their rows).

    Each row is cut at its offsets into zero-copy pieces over the data buffer and joined back with
    ``text``: one copy of the bytes."""
    n = len(texts)
    offsets = string_offsets(texts).astype(np.int64)
    bounds = np.insert(offsets, rows + 1, starts)  # each row's offsets before its end
    list_offsets = np.arange(n + 1, dtype=np.int64)
    list_offsets[1:] += np.cumsum(np.bincount(rows, minlength=n))
    pieces = _over(texts, bounds, None)
    mask = texts.is_null() if texts.null_count else None
    if pa.types.is_large_string(texts.type):
        lists = pa.LargeListArray.from_arrays(pa.array(list_offsets, pa.int64()), pieces, mask=mask)
    else:
        lists = pa.ListArray.from_arrays(pa.array(list_offsets, pa.int32()), pieces, mask=mask)
    return pc.binary_join(lists, pa.scalar(text, texts.type))


def rewrite_messages_obj(obj: object, prefix: str) -> list[tuple[str, int]]:
    """Rewrite the media urls of decoded messages in place; returns (original path, status) of each."""
    found: list[tuple[str, int]] = []
    if not isinstance(obj, list):
        return found
    for msg in obj:
        content = msg.get("content") if isinstance(msg, dict) else None
        if not isinstance(content, list):
            continue
        for part in content:
            if not isinstance(part, dict):
                continue
            for kind in MEDIA_PART_TYPES:
                sub = part.get(kind)
                if isinstance(sub, dict) and isinstance(sub.get("url"), str):
                    status = sentinel.classify(sub["url"])
                    found.append((sub["url"], status))
                    if status == sentinel.OK:
                        sub["url"] = sentinel.materialize_path(sub["url"], prefix)
    return found


def rewrite_messages_json(
    texts: pa.Array,
    prefix: str,
    canonical: np.ndarray | None = None,
    skip: np.ndarray | None = None,
    start: SharedStart | None = None,
) -> Rewritten:
    """Rewrite sentinel paths in a JSON ``messages`` column (see the module docstring).

    ``canonical``: rows the structural check found in the canonical shape (their ``"url"`` keys are
    exactly the media urls, all canonical, their values without escapes); every other row is rewritten
    in Python. Without it, rows
    with a non-canonical ``"url"`` key are found by a regex. ``skip``: rows already rejected (left as is).
    ``start``: ``shared_start(texts)`` when the caller has it (see ``find_url_values``).
    """
    n = len(texts)
    esc = f"{_json_text(prefix)}/"
    rows, starts, lengths = find_url_values(texts, start)
    paths = cut_values(texts, starts, np.maximum(lengths, 0))
    # the prefix inserted at each value's start is the whole rewrite: one copy of the bytes
    column = insert_at(texts, rows, starts, esc)
    if canonical is not None:  # their url values are terminated JSON strings without escapes
        python = ~canonical
    else:
        python = pc.fill_null(pc.match_substring_regex(texts, NONCANONICAL_KEY_RE), False).to_numpy(
            zero_copy_only=False
        )
        python[rows[lengths < 0]] = True  # unterminated: not a JSON string
        if len(paths):  # a backslash is a JSON escape: the value is not the path as written
            escaped = pc.fill_null(pc.match_substring(paths, "\\"), False).to_numpy(zero_copy_only=False)
            python[rows[escaped]] = True
    if skip is not None:
        python &= ~skip
    keep = ~python[rows]
    fast_paths = paths if keep.all() else paths.filter(pa.array(keep))
    fast = MediaRefs(rows[keep], fast_paths, sentinel.classify_array(fast_paths))
    if len(fast_paths) and pc.any(pc.starts_with(fast_paths, sentinel.FILE_SCHEME)).as_py():
        column = pc.replace_substring(column, CANONICAL_KEY + esc + sentinel.FILE_SCHEME, CANONICAL_KEY + esc)

    reasons = np.zeros(n, dtype=np.int8)
    slow_rows = np.flatnonzero(python)
    slow_refs: list[tuple[int, str, int]] = []
    replaced: list[str | None] = []
    if len(slow_rows):
        values = texts.take(pa.array(slow_rows)).to_pylist()
        for row, text in zip(slow_rows, values, strict=True):
            try:
                obj = json.loads(text) if text is not None else None
            except (ValueError, RecursionError):
                reasons[row] = Reason.MESSAGES_NOT_JSON
                replaced.append(text)
                continue
            slow_refs.extend((int(row), path, status) for path, status in rewrite_messages_obj(obj, prefix))
            replaced.append(json.dumps(obj, ensure_ascii=False) if text is not None else None)
        column = pc.replace_with_mask(column, pa.array(python), pa.array(replaced, column.type))
    slow = MediaRefs(
        np.array([r for r, _, _ in slow_refs], dtype=np.int64),
        pa.array([p for _, p, _ in slow_refs], pa.string()),
        np.array([s for _, _, s in slow_refs], dtype=np.int8),
    )
    return Rewritten(column, MediaRefs.concat([fast, slow]), reasons, python_rows=len(slow_rows))


# ----------------------------------------------------------------------------------- nested columns


def rewrite_leaves(col: pa.Array, paths: list[tuple[str, ...]], prefix: str) -> Rewritten:
    """Rewrite the string leaves at ``paths`` of a nested column; references under null parents are ignored."""
    refs = []
    for path in paths:
        if not has_path(col.type, path):
            continue
        leaf, rows, ancestors = leaf_rows(col, path)
        take = np.flatnonzero(ancestors)
        values = leaf.take(pa.array(take)) if len(take) < len(leaf) else leaf
        values = values.cast(pa.string())
        refs.append(MediaRefs(rows[take], values, sentinel.classify_array(values)))
        col = map_leaf(col, path, lambda a: sentinel.materialize_array(a, prefix))
    return Rewritten(col, MediaRefs.concat(refs), np.zeros(len(col), dtype=np.int8))


def sft_media_paths() -> list[tuple[str, ...]]:
    return [("[]", "content", "[]", kind, "url") for kind in MEDIA_PART_TYPES]


def rewrite_messages(
    col: pa.Array,
    prefix: str,
    canonical: np.ndarray | None = None,
    skip: np.ndarray | None = None,
    start: SharedStart | None = None,
) -> Rewritten:
    """Rewrite an SFT ``messages`` column, JSON string or native nested list."""
    if is_json_column(col):
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            col = col.cast(pa.string())
        return rewrite_messages_json(col, prefix, canonical, skip, start)
    return rewrite_leaves(col, sft_media_paths(), prefix)


def rewrite_videos(col: pa.Array, prefix: str) -> Rewritten:
    """Rewrite an RL ``videos`` column: list<struct<video: string>> (or list<string>)."""
    if has_path(col.type, ("[]", "video")):
        return rewrite_leaves(col, [("[]", "video")], prefix)
    if has_path(col.type, ("[]",)) and is_json_column(pa.array([], col.type.value_type)):
        return rewrite_leaves(col, [("[]",)], prefix)
    raise TypeError(f"videos: expected list<struct<video: string>>, got {col.type}")


# ----------------------------------------------------------------------------------- batches and files


@dataclass
class Target:
    """Where paths go and what is checked.

    ``prefix``: what sentinel paths are joined to (absolute local root or ``s3://`` prefix).
    ``checker``: existence checks against the local extracted root (None: no file checks).
    ``presence``: what was downloaded; an absent file it calls "not downloaded" skips the row (not bad).
    None: every absent file counts as missing.
    """

    prefix: str
    checker: FileChecker | None = None
    presence: sentinel.Presence | None = None
    check_structure: bool = True


@dataclass
class BatchOutcome:
    good: pa.RecordBatch
    rejected: pa.RecordBatch | None
    reasons: np.ndarray
    skipped: np.ndarray
    missing: set[str]
    not_downloaded: set[str]
    examples: list[dict]
    python_rows: int
    question_type_defaulted: int = 0  # kept RL rows whose question_type was written as "oe"


MAX_EXAMPLES = 20
REJECT_REASON_COLUMN = "reason"
REJECT_ROW_COLUMN = "source_row"


def _strip_scheme(paths: pa.Array) -> pa.Array:
    if len(paths) and pc.any(pc.starts_with(paths, sentinel.FILE_SCHEME)).as_py():
        return pc.replace_substring_regex(paths, r"^file://", "", max_replacements=1)
    return paths


def _file_checks(
    refs: MediaRefs, reasons: np.ndarray, target: Target
) -> tuple[np.ndarray, set[str], set[str]]:
    """Mark rows with missing files (in place) and return (skipped rows, missing, not-downloaded paths)."""
    skipped = np.zeros(len(reasons), dtype=bool)
    if target.checker is None or not len(refs.rows):
        return skipped, set(), set()
    candidate = (refs.status == sentinel.OK) & (reasons[refs.rows] == 0)
    rows = refs.rows[candidate]
    paths = _strip_scheme(refs.paths if candidate.all() else refs.paths.filter(pa.array(candidate)))
    absent = target.checker.missing(paths)
    if not absent:
        return skipped, set(), set()
    presence = target.presence
    not_downloaded = {p for p in absent if presence is not None and presence.not_downloaded(p)}
    missing = absent - not_downloaded
    if missing:
        hit = pc.is_in(paths, value_set=pa.array(sorted(missing), paths.type)).to_numpy(zero_copy_only=False)
        merge(reasons, rows[hit], Reason.MISSING_FILE)
    if not_downloaded:
        hit = pc.is_in(paths, value_set=pa.array(sorted(not_downloaded), paths.type))
        skipped[rows[hit.to_numpy(zero_copy_only=False)]] = True
    return skipped & (reasons == 0), missing, not_downloaded


def _examples(refs: MediaRefs, first_row: int, missing: set[str]) -> list[dict]:
    """A few bad references, for the audit (which paths were not sentinel, escaped, or missing)."""
    out = []
    bad = np.flatnonzero(refs.status != sentinel.OK)[:MAX_EXAMPLES]
    if len(bad):
        paths = refs.paths.take(pa.array(bad)).to_pylist()
        for i, path in zip(bad, paths, strict=True):
            label = sentinel.STATUS_NAMES[int(refs.status[i])]
            out.append({"row": first_row + int(refs.rows[i]), "path": path, "reason": label})
    for path in sorted(missing)[: MAX_EXAMPLES - len(out)]:
        out.append({"row": None, "path": path, "reason": Reason.MISSING_FILE.label})
    return out


def process_batch(batch: pa.RecordBatch, kind: str, target: Target, first_row: int = 0) -> BatchOutcome:
    """Validate and materialize one batch: good rows rewritten, bad rows kept aside with a reason."""
    n = batch.num_rows
    replaced: dict[str, pa.Array] = {}
    defaulted = np.zeros(n, dtype=bool)
    if kind == "sft":
        name = "messages"
        col = batch.column(name)
        # the shared first message, found once for the check and the rewrite (both skip its bytes)
        start = (
            shared_start(col) if pa.types.is_string(col.type) or pa.types.is_large_string(col.type) else None
        )
        if target.check_structure:
            reasons, canonical = check_messages(col, start)
        else:
            reasons, canonical = np.zeros(n, dtype=np.int8), None
        rewritten = rewrite_messages(col, target.prefix, canonical, reasons != 0, start)
    else:
        name = "videos"
        reasons = check_rl(batch) if target.check_structure else np.zeros(n, dtype=np.int8)
        rewritten = rewrite_videos(batch.column(name), target.prefix)
        replaced["extra_info"], defaulted = default_question_type(batch.column("extra_info"))
    for extra in (rewritten.reasons, rewritten.refs.path_reasons(n)):
        rows = np.flatnonzero(extra)
        merge_each(reasons, rows, extra[rows])
    skipped, missing, not_downloaded = _file_checks(rewritten.refs, reasons, target)
    good = (reasons == 0) & ~skipped
    bad = reasons != 0
    column = rewritten.column
    if column.type != batch.schema.field(name).type:  # e.g. a binary column rewritten as text
        column = column.cast(batch.schema.field(name).type)
    replaced[name] = column
    schema = batch.schema
    for i, f in enumerate(schema):  # a struct that gained its question_type field changes type
        if f.name in replaced and replaced[f.name].type != f.type:
            schema = schema.set(i, f.with_type(replaced[f.name].type))
    arrays = [replaced.get(f.name, batch.column(i)) for i, f in enumerate(batch.schema)]
    out = pa.RecordBatch.from_arrays(arrays, schema=schema)
    out = out if good.all() else out.filter(pa.array(good))
    rejected = None
    if bad.any():
        rows = np.flatnonzero(bad)
        rejected = batch.filter(pa.array(bad))
        labels = pa.array(np.asarray(REASON_LABELS, dtype=object)[reasons[rows]], pa.string())
        rejected = rejected.append_column(REJECT_REASON_COLUMN, labels)
        rejected = rejected.append_column(REJECT_ROW_COLUMN, pa.array(rows + first_row, pa.int64()))
    return BatchOutcome(
        good=out,
        rejected=rejected,
        reasons=reasons,
        skipped=skipped,
        missing=missing,
        not_downloaded=not_downloaded,
        examples=_examples(rewritten.refs, first_row, missing),
        python_rows=rewritten.python_rows,
        question_type_defaulted=int((defaulted & good).sum()),
    )


@dataclass
class FileReport:
    """What happened to one parquet file."""

    name: str
    kind: str
    rows: int = 0
    kept: int = 0
    rejected: int = 0
    skipped_not_downloaded: int = 0
    reasons: Counter = field(default_factory=Counter)
    missing_files: set[str] = field(default_factory=set)
    missing_rows: int = 0
    not_downloaded_files: set[str] = field(default_factory=set)
    examples: list[dict] = field(default_factory=list)
    rejected_rows: list[dict] = field(default_factory=list)  # the first few: source row + reason
    python_rows: int = 0
    question_type_defaulted: int = 0
    output: str | None = None
    rejected_output: str | None = None
    seconds: float = 0.0

    @property
    def split(self) -> str:
        return self.name.removesuffix(".parquet")

    @property
    def bad(self) -> int:
        return self.rejected


def detect_kind(path: str, schema: pa.Schema) -> str:
    """'sft' or 'rl', from the release's file name or else from the columns."""
    kind = parquet_kind(os.path.basename(path))
    if kind:
        return kind
    if "messages" in schema.names:
        return "sft"
    if {"videos", "extra_info"} <= set(schema.names):
        return "rl"
    raise DataError(
        f"{path}: cannot tell whether this is an SFT or an RL parquet (no `messages`, no `videos` + "
        f"`extra_info`; columns: {', '.join(schema.names)})"
    )


def open_parquet(path: str) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as err:
        raise DataError(f"{path}: not a readable parquet file ({err})") from None


def required_columns(kind: str) -> tuple[str, ...]:
    return SFT_REQUIRED_COLUMNS if kind == "sft" else RL_REQUIRED_COLUMNS


def _writer(path: str, schema: pa.Schema, big: str | None) -> pq.ParquetWriter:
    # Dictionary encoding never pays off on the unique per-row JSON strings; trying it costs a pass,
    # and min/max statistics of JSON blobs help no reader.
    names = [f.name for f in schema if f.name != big and not pa.types.is_nested(f.type)]
    return pq.ParquetWriter(
        path, schema, compression="snappy", use_dictionary=names or False, write_statistics=names or False
    )


class _Sink:
    """A parquet output written under a temporary name and renamed into place only by ``commit``."""

    def __init__(self, path: str, big: str | None) -> None:
        self.path = path
        self.tmp = f"{path}.tmp-{os.getpid()}"
        self.big = big
        self.writer: pq.ParquetWriter | None = None

    def write(self, batch: pa.RecordBatch) -> None:
        if self.writer is None:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            self.writer = _writer(self.tmp, batch.schema, self.big)
        self.writer.write_batch(batch)

    def commit(self) -> str | None:
        """Publish the file; with nothing written, remove a stale output of an earlier run instead."""
        if self.writer is None:
            if os.path.exists(self.path):
                os.remove(self.path)
            return None
        self.writer.close()
        os.replace(self.tmp, self.path)
        return self.path

    def discard(self) -> None:
        if self.writer is not None and self.writer.is_open:
            self.writer.close()
        if os.path.exists(self.tmp):
            os.remove(self.tmp)


def materialize_file(
    src: str,
    target: Target,
    out_path: str,
    rejected_path: str,
    *,
    batch_rows: int = 16384,
    threads: int = 2,
    progress: Callable[[int], None] | None = None,
) -> FileReport:
    """Validate + materialize one parquet file into ``out_path`` (and bad rows into ``rejected_path``).

    Batches are processed by ``threads`` workers (the Arrow kernels release the GIL) while this thread
    reads the next batches and writes finished ones in order. Both outputs appear only when the whole
    input was read (temporary name, then rename); an output with no rows is not written. Raises
    ``DataError`` naming the file (and the rows) when it cannot be read.
    """
    started = time.perf_counter()
    pf = open_parquet(src)
    schema = pf.schema_arrow
    kind = detect_kind(src, schema)
    absent = [c for c in required_columns(kind) if c not in schema.names]
    if absent:
        raise DataError(
            f"{src}: {kind.upper()} parquet is missing required column(s) {', '.join(absent)} "
            f"(columns: {', '.join(schema.names)})"
        )
    report = FileReport(name=os.path.basename(src), kind=kind)
    big = "messages" if kind == "sft" else None
    good, bad = _Sink(out_path, big), _Sink(rejected_path, big)
    inflight: deque[tuple[int, int, Future[BatchOutcome]]] = deque()

    def finish_one() -> None:
        first, n, future = inflight.popleft()
        try:
            outcome = future.result()
        except TypeError as err:  # a column whose type is not what the schema promises
            raise DataError(f"{src}: rows {first}..{first + n - 1}: {err}") from None
        _account(report, outcome, n)
        if outcome.good.num_rows:
            good.write(outcome.good)
        if outcome.rejected is not None:
            bad.write(outcome.rejected)
        if progress is not None:
            progress(n)

    try:
        with ThreadPoolExecutor(max(1, threads)) as pool:
            try:
                batches = pf.iter_batches(batch_size=batch_rows)
                first = 0
                while True:
                    try:
                        batch = next(batches)
                    except StopIteration:
                        break
                    except (pa.ArrowException, OSError) as err:
                        raise DataError(f"{src}: cannot read rows from {first} on ({err})") from None
                    inflight.append(
                        (first, batch.num_rows, pool.submit(process_batch, batch, kind, target, first))
                    )
                    first += batch.num_rows
                    while len(inflight) > max(1, threads):
                        finish_one()
                while inflight:
                    finish_one()
            finally:
                for _, _, future in inflight:
                    future.cancel()
        report.output = good.commit()
        report.rejected_output = bad.commit()
    finally:
        good.discard()
        bad.discard()
    report.seconds = time.perf_counter() - started
    return report


def _account(report: FileReport, outcome: BatchOutcome, n: int) -> None:
    report.rows += n
    report.kept += outcome.good.num_rows
    report.rejected += int((outcome.reasons != 0).sum())
    report.skipped_not_downloaded += int(outcome.skipped.sum())
    codes, counts = np.unique(outcome.reasons[outcome.reasons != 0], return_counts=True)
    for code, count in zip(codes, counts, strict=True):
        report.reasons[REASON_LABELS[int(code)]] += int(count)
    report.missing_rows += int((outcome.reasons == Reason.MISSING_FILE).sum())
    report.missing_files |= outcome.missing
    report.not_downloaded_files |= outcome.not_downloaded
    report.python_rows += outcome.python_rows
    report.question_type_defaulted += outcome.question_type_defaulted
    room = MAX_EXAMPLES - len(report.examples)
    report.examples.extend(outcome.examples[:room])
    room = MAX_EXAMPLES - len(report.rejected_rows)
    if room > 0 and outcome.rejected is not None:
        first = outcome.rejected.slice(0, room)
        rows = first.column(REJECT_ROW_COLUMN).to_pylist()
        reasons = first.column(REJECT_REASON_COLUMN).to_pylist()
        report.rejected_rows.extend({"row": r, "reason": why} for r, why in zip(rows, reasons, strict=True))
