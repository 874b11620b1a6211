"""Sentinel-path rules (docs/method.md §2.2): which media paths are sentinel paths, where they live, where they go.

A sentinel path is a relative path under one of the four buckets (``longvt_source/``, ``museg/charades/``,
``museg/et_instruct_164k/``, ``selfqa/``). Materialization prepends a *prefix* (an absolute local directory
or an ``s3://`` prefix). Each path gets a status code; everything except ``OK`` is reported, never passed
through. The same rules exist twice: per string (``classify``) for the rare rows handled in Python, and per
Arrow array (``classify_array``) for the columnar path. Tests check that the two agree.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from paravt_core import storage
from paravt_core.data.schema import SENTINEL_BUCKETS, SENTINEL_PREFIXES

# Path status codes (int8 in arrays).
OK = 0
EMPTY = 1
NOT_SENTINEL = 2
ESCAPES_ROOT = 3
STATUS_NAMES = {
    OK: "ok",
    EMPTY: "path_empty",
    NOT_SENTINEL: "path_not_sentinel",
    ESCAPES_ROOT: "path_escapes_root",
}

# The release's loader double-prefixed ``file://``; inputs that already carry one are tolerated (stripped),
# outputs never carry one.
FILE_SCHEME = "file://"
_BUCKET_ALT = "|".join(re.escape(b) for b in SENTINEL_BUCKETS)
# A bucket prefix followed by at least one more character: the bucket directory itself is not a media file.
SENTINEL_RE = rf"^(?:file://)?(?:{_BUCKET_ALT})/."
_SENTINEL = re.compile(SENTINEL_RE, re.DOTALL)
# A ``..`` component anywhere (the only way a relative path can leave the root).
DOTDOT_RE = r"(?:^|/)\.\.(?:/|$)"
_DOTDOT = re.compile(DOTDOT_RE)


def strip_scheme(path: str) -> str:
    return path[len(FILE_SCHEME) :] if path.startswith(FILE_SCHEME) else path


def classify(path: str | None) -> int:
    """Status code of one media path (``None`` counts as empty)."""
    if not path:
        return EMPTY
    if not _SENTINEL.match(path):
        return NOT_SENTINEL
    if _DOTDOT.search(strip_scheme(path)):
        return ESCAPES_ROOT
    return OK


def classify_array(paths: pa.Array) -> np.ndarray:
    """Status codes (int8) of an Arrow string array of media paths; nulls count as empty.

    Prefix tests are literal (``starts_with`` + a length check, cheaper than the regex per string) and
    the ``..`` regex runs only when some path holds ``..`` at all; the result equals ``classify``.
    """
    if len(paths) == 0:
        return np.zeros(0, dtype=np.int8)
    if not (pa.types.is_string(paths.type) or pa.types.is_large_string(paths.type)):
        paths = paths.cast(pa.string())
    lengths = pc.fill_null(pc.binary_length(paths), 0).to_numpy(zero_copy_only=False)
    heads = [""]
    if pc.any(pc.starts_with(paths, FILE_SCHEME)).as_py():
        heads.append(FILE_SCHEME)
    sentinel = np.zeros(len(paths), dtype=bool)
    for head in heads:
        for prefix in SENTINEL_PREFIXES:
            full = head + prefix
            starts = pc.fill_null(pc.starts_with(paths, full), False).to_numpy(zero_copy_only=False)
            sentinel |= starts & (lengths > len(full.encode()))  # a bucket then at least one character
    codes = np.full(len(paths), OK, dtype=np.int8)
    if pc.any(pc.match_substring(paths, "..")).as_py():
        dotdot = pc.match_substring_regex(paths, DOTDOT_RE)
        codes[pc.fill_null(dotdot, False).to_numpy(zero_copy_only=False)] = ESCAPES_ROOT
    codes[~sentinel] = NOT_SENTINEL
    codes[lengths == 0] = EMPTY
    return codes


def bucket_of(path: str) -> str | None:
    """``museg/charades`` for ``museg/charades/x.mp4``; None for a non-sentinel path."""
    path = strip_scheme(path)
    for bucket, prefix in zip(SENTINEL_BUCKETS, SENTINEL_PREFIXES, strict=True):
        if path.startswith(prefix):
            return bucket
    return None


def group_of(path: str) -> str | None:
    """The unit of selective download a sentinel path belongs to.

    ``longvt_source/<src>`` for LongVT sources (each source is its own set of archives), else the bucket.
    """
    bucket = bucket_of(path)
    if bucket != "longvt_source":
        return bucket
    rest = strip_scheme(path)[len("longvt_source/") :]
    head, sep, _ = rest.partition("/")
    return f"longvt_source/{head}" if sep else bucket


def present_groups(root: str) -> set[str]:
    """Groups that have a directory under an extracted media root."""
    found: set[str] = set()
    for bucket in SENTINEL_BUCKETS:
        directory = os.path.join(root, bucket)
        if not os.path.isdir(directory):
            continue
        found.add(bucket)
        if bucket == "longvt_source":
            with os.scandir(directory) as entries:
                found.update(f"longvt_source/{e.name}" for e in entries if e.is_dir())
    return found


@dataclass(frozen=True)
class Presence:
    """What was downloaded and extracted: tells a missing file from one whose archive was not selected.

    ``members``: the files the extracted archives hold (their member lists, recorded at extraction);
    None when unknown (a root extracted by other means). ``all_selected``: no archive of the source was
    left out by the include patterns. ``groups``: groups with a directory under the root, the rule
    when the member lists are unknown.

    A file absent from the root is *missing* when a selected archive holds it (it should be there), or
    when nothing was left out (no archive can hold it); otherwise it belongs to an archive that was not
    selected and counts as *not downloaded*: ``charades_1``'s videos when only ``charades_0.zip`` was
    downloaded, although both unpack into ``museg/charades/``.
    """

    members: frozenset[str] | None = None
    all_selected: bool = False
    groups: frozenset[str] = frozenset()

    def not_downloaded(self, path: str) -> bool:
        """Whether an absent sentinel path (``file://`` stripped) belongs to media that was not selected."""
        if self.members is None:
            return group_of(path) not in self.groups
        if self.all_selected:
            return False
        return posixpath.normpath(path) not in self.members

    def digest(self) -> str:
        """A short hash of what decides presence (for the stage's fingerprint)."""
        h = hashlib.sha256(f"{self.all_selected}\0{sorted(self.groups)}\0{self.members is None}\n".encode())
        for name in sorted(self.members or ()):
            h.update(name.encode() + b"\n")
        return h.hexdigest()[:32]


def media_prefix(root: str, prefix: str = "") -> str:
    """What sentinel paths are joined to: ``prefix`` (an ``s3://`` URI or local dir) or the absolute root."""
    target = prefix or root
    if storage.is_s3(target):
        return target.rstrip("/")
    return os.path.abspath(target).rstrip("/") or "/"


def materialize_path(path: str, prefix: str) -> str:
    """Sentinel path -> ``<prefix>/<path>`` (``file://`` on the input is dropped, never added)."""
    return f"{prefix}/{strip_scheme(path)}"


def materialize_array(paths: pa.Array, prefix: str) -> pa.Array:
    """Columnar ``materialize_path`` over an Arrow string array (nulls stay null)."""
    stripped = pc.replace_substring_regex(paths, r"^file://", "", max_replacements=1)
    return pc.binary_join_element_wise(prefix + "/", stripped, "").cast(paths.type)
