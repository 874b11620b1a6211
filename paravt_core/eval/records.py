"""Exactly-once per-sample records: an append-only JSON Lines file per (protocol, benchmark).

Each finished sample is one line, written with a single ``os.write`` on an ``O_APPEND`` descriptor and
``fsync``-ed before the sample counts as done, so a crash (SIGKILL, node loss) leaves every finished sample on
disk and at most one torn line at the end. Opening a log repairs that: the torn tail is cut off (its sample
was not finished and runs again) and the ids already present are skipped by the runner. A sample is never
written twice: the writer refuses an id it already holds.

Shards: ``shard_of(id, n)`` assigns a sample to one of ``n`` shards by a stable hash of its id (the same in
every process and Python version). ``merge_shards`` refuses to merge unless every shard ``i/n`` is complete.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from paravt_core.user_errors import ParavtUserError

log = logging.getLogger(__name__)


class RecordError(ParavtUserError, RuntimeError):
    """A records file or shard set that cannot be used."""


def shard_of(sample_id: str, count: int) -> int:
    digest = hashlib.sha256(sample_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/4"`` -> (2, 4) (shards are numbered from 0)."""
    try:
        i, n = (int(p) for p in str(text).split("/"))
    except ValueError:
        raise RecordError(f"shard {text!r} is not of the form i/n (e.g. 0/4)") from None
    if n < 1 or not 0 <= i < n:
        raise RecordError(f"shard {text!r}: need 0 <= i < n")
    return i, n


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every complete line of a records file. A torn last line (no newline: a crash mid-write) is ignored;
    any other line that is not JSON was damaged after it was written: it is skipped with a warning naming
    it, and its sample counts as not done (run again on resume, "missing" at a shard merge)."""
    p = Path(path)
    if not p.exists():
        return []
    lines = p.read_bytes().split(b"\n")
    out = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            if number < len(lines):  # ended by a newline, so written whole
                log.warning("%s line %d is not JSON: skipped, its sample counts as not done", p, number)
    return out


class SampleLog:
    """Append-only records of one (protocol, benchmark); see the module docstring."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.repaired_bytes = self._repair()
        self.records = read_records(self.path)
        self.done = {r["id"] for r in self.records}
        if len(self.done) != len(self.records):
            raise RecordError(
                f"{self.path} holds the same sample id twice; it was not written by this runner"
            )
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _repair(self) -> int:
        """Cut a torn last line (no newline, or not JSON). Returns the number of bytes removed."""
        if not self.path.exists():
            return 0
        data = self.path.read_bytes()
        keep = len(data)
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
        else:
            last = data.rstrip(b"\n").rsplit(b"\n", 1)[-1]
            if last.strip():
                try:
                    json.loads(last)
                except ValueError:
                    keep = len(data.rstrip(b"\n")) - len(last)
        if keep < len(data):
            with open(self.path, "r+b") as fh:
                fh.truncate(keep)
                fh.flush()
                os.fsync(fh.fileno())
        return len(data) - keep

    def append(self, record: dict[str, Any]) -> None:
        sample_id = record["id"]
        if sample_id in self.done:
            raise RecordError(f"sample {sample_id!r} is already recorded in {self.path}")
        line = (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8")
        written = os.write(self._fd, line)
        if written != len(line):  # a short write leaves a torn line; the next open repairs it
            raise RecordError(f"short write to {self.path} ({written} of {len(line)} bytes)")
        os.fsync(self._fd)
        self.done.add(sample_id)
        self.records.append(record)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> SampleLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
