"""Materialize: rewrite sentinel media paths in the SFT and RL parquets, columnar, batch by batch.

- SFT ``messages`` as JSON strings: media references are ``"url": "<path>"`` values. Arrow splits every
  row at its ``"url": "`` keys (one search pass); piece k > 0 of a row starts with its k-th path, which
  is cut out with numpy and classified as an Arrow array; joining the pieces back with
  ``"url": "<prefix>/`` is the whole rewrite (one copy). Rows the structural check did not find in the
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
    check_messages,
    check_rl,
    cut_strings,
    default_question_type,
    has_path,
    is_json_column,
    leaf_rows,
    list_parts,
    map_leaf,
    merge,
    merge_each,
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


def split_at_url_keys(texts: pa.Array) -> tuple[pa.Array, np.ndarray, pa.Array, np.ndarray]:
    """Split each row at its canonical ``"url": "`` keys.

    Returns (the split list array, the row of each path, the paths, rows whose paths the fast path
    cannot take as they are: unterminated, or holding a backslash, i.e. a JSON escape). Piece k > 0 of a
    row starts with the row's k-th path, which runs to the next ``"``.
    """
    n = len(texts)
    pieces = pc.split_pattern(texts, CANONICAL_KEY)
    offsets, flat = list_parts(pieces)
    counts = np.diff(offsets)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.maximum(counts - 1, 0))
    later = np.ones(len(flat), dtype=bool)
    later[offsets[:-1][counts > 0]] = False  # the first piece of a row precedes any key
    later_idx = np.flatnonzero(later)
    # path length = position of the first quote in the piece (-1: unterminated, not a JSON string)
    ends = pc.find_substring(flat, '"').to_numpy(zero_copy_only=False)[later_idx].astype(np.int64)
    odd = np.zeros(n, dtype=bool)
    odd[rows[ends < 0]] = True
    lengths = np.maximum(ends, 0)
    piece_starts = string_offsets(flat).astype(np.int64)[later_idx]
    paths = cut_strings(flat.buffers()[2], piece_starts, lengths)
    if len(paths):
        odd[rows[pc.fill_null(pc.match_substring(paths, "\\"), False).to_numpy(zero_copy_only=False)]] = True
    return pieces, rows, paths, odd


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
    texts: pa.Array, prefix: str, canonical: np.ndarray | None = None, skip: np.ndarray | None = None
) -> Rewritten:
    """Rewrite sentinel paths in a JSON ``messages`` column (see the module docstring).

    ``canonical``: rows the structural check found in the canonical shape (their ``"url"`` keys are
    exactly the media urls, all canonical); every other row is rewritten in Python. Without it, rows
    with a non-canonical ``"url"`` key are found by a regex. ``skip``: rows already rejected (left as is).
    """
    n = len(texts)
    esc = f"{_json_text(prefix)}/"
    pieces, rows, paths, python = split_at_url_keys(texts)
    # joining the pieces back with the prefix inserted is the whole rewrite: one copy of the bytes
    column = pc.binary_join(pieces, pa.scalar(CANONICAL_KEY + esc, pieces.type.value_type))
    if canonical is not None:
        python |= ~canonical
    else:
        python |= pc.fill_null(pc.match_substring_regex(texts, NONCANONICAL_KEY_RE), False).to_numpy(
            zero_copy_only=False
        )
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
    col: pa.Array, prefix: str, canonical: np.ndarray | None = None, skip: np.ndarray | None = None
) -> Rewritten:
    """Rewrite an SFT ``messages`` column, JSON string or native nested list."""
    if is_json_column(col):
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            col = col.cast(pa.string())
        return rewrite_messages_json(col, prefix, canonical, skip)
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
    paths = _strip_scheme(refs.paths.filter(pa.array(candidate)))
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
        if target.check_structure:
            reasons, canonical = check_messages(col)
        else:
            reasons, canonical = np.zeros(n, dtype=np.int8), None
        rewritten = rewrite_messages(col, target.prefix, canonical, reasons != 0)
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
