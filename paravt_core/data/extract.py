"""Extract every media archive into one root, in parallel, safely and idempotently.

ParaVT-Source zips carry full sentinel paths, so all of them unpack into the same root.

- Safety: every member of an archive is checked before anything of it is written. Absolute names,
  ``..`` components, symlinks, devices, FIFOs and sockets are refused with an error naming the archive
  and the member (zip-slip); a corrupt archive or a member whose CRC does not match is an error naming
  the archive (and the member).
- Idempotence: a member is written under a temporary name and renamed when complete; when every member
  is in place, ``<root>/.paravt-extract/<key>.done`` is written. ``key`` hashes the archive's name and
  central directory (member names, CRCs, sizes), so it is cheap to compute for a 10 GB zip and changes
  when the archive does. A rerun skips archives with a marker and redoes any other one from the start.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from paravt_core.data.validate import DataError

MARKER_DIR = ".paravt-extract"
_CHUNK = 1 << 20
_DRIVE = re.compile(r"^[A-Za-z]:")
_BAD_TYPES = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
}


@dataclass
class Archive:
    """An archive to extract: its name in the source (``museg/charades_0.zip``) and its local path."""

    name: str
    path: str


@dataclass
class ExtractResult:
    name: str
    key: str
    members: int
    bytes: int
    skipped: bool  # already extracted by an earlier run


def archive_key(archive: Archive) -> str:
    """Identity of an archive: hash of its name, size and central directory. Corrupt zip -> DataError."""
    infos = _infolist(archive)
    digest = hashlib.sha256(f"{archive.name}\0{os.path.getsize(archive.path)}\n".encode())
    for info in infos:
        digest.update(f"{info.filename}\0{info.CRC}\0{info.file_size}\0{info.compress_size}\n".encode())
    return digest.hexdigest()[:32]


def _infolist(archive: Archive) -> list[zipfile.ZipInfo]:
    try:
        with zipfile.ZipFile(archive.path) as zf:
            return zf.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as err:
        raise DataError(f"archive {archive.name} ({archive.path}): not a readable zip file ({err})") from None


def unsafe_reason(info: zipfile.ZipInfo) -> str | None:
    """Why a member must not be extracted, or None when it is a plain file or directory below the root."""
    name = info.filename
    if not name or "\0" in name:
        return "has an empty name or a NUL byte in its name"
    if name.startswith(("/", "\\")) or _DRIVE.match(name):
        return "has an absolute path"
    if ".." in re.split(r"[\\/]", name):
        return "has a '..' component (would escape the extraction root)"
    kind = stat.S_IFMT(info.external_attr >> 16)
    if kind in _BAD_TYPES:
        return f"is {_BAD_TYPES[kind]}"
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        return f"has an unsupported file type (mode {oct(info.external_attr >> 16)})"
    if name.split("/", 1)[0] == MARKER_DIR:
        return f"would overwrite the extraction markers ({MARKER_DIR}/)"
    return None


def check_members(archive: Archive, infos: list[zipfile.ZipInfo], root: str) -> None:
    """Refuse the whole archive if any member is unsafe (nothing of it has been written yet)."""
    real_root = os.path.realpath(root)
    for info in infos:
        reason = unsafe_reason(info)
        if reason is None:
            target = os.path.realpath(os.path.join(real_root, info.filename))
            if target != real_root and not target.startswith(real_root + os.sep):
                reason = "resolves outside the extraction root (through an existing symlink)"
        if reason:
            raise DataError(
                f"archive {archive.name}: member {info.filename!r} {reason}; refusing the archive"
            )


def marker_path(root: str, key: str) -> str:
    return os.path.join(root, MARKER_DIR, f"{key}.done")


def ensure_root(root: str) -> None:
    """Create the extraction root, or fail clearly when the path exists and is not a usable directory."""
    if os.path.exists(root) and not os.path.isdir(root):
        raise DataError(f"extraction root {root} exists and is not a directory")
    os.makedirs(os.path.join(root, MARKER_DIR), exist_ok=True)


def extract_archive(
    archive: Archive, root: str, key: str, advance: Callable[[int], None] | None = None
) -> ExtractResult:
    """Extract one archive (already known not to be done) and write its marker last."""
    infos = _infolist(archive)
    check_members(archive, infos, root)
    total = 0
    try:
        zf = zipfile.ZipFile(archive.path)
    except (zipfile.BadZipFile, OSError) as err:
        raise DataError(f"archive {archive.name}: not a readable zip file ({err})") from None
    with zf:
        for info in infos:
            target = os.path.join(root, info.filename)
            if info.is_dir():
                os.makedirs(target, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            tmp = f"{target}.{key[:12]}.part"  # per archive: two archives may hold the same member
            try:
                with zf.open(info) as src, open(tmp, "wb") as dst:
                    while chunk := src.read(_CHUNK):
                        dst.write(chunk)
                        if advance is not None:
                            advance(len(chunk))
                os.replace(tmp, target)
            except (zipfile.BadZipFile, EOFError, OSError, ValueError, RuntimeError) as err:
                if os.path.exists(tmp):
                    os.remove(tmp)
                raise DataError(
                    f"archive {archive.name}: member {info.filename!r} cannot be extracted ({err})"
                ) from None
            total += info.file_size
    done = {
        "archive": archive.name,
        "key": key,
        "members": len(infos),
        "bytes": total,
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    marker = marker_path(root, key)
    with open(marker + ".tmp", "w") as fh:
        json.dump(done, fh)
    os.replace(marker + ".tmp", marker)
    return ExtractResult(archive.name, key, len(infos), total, skipped=False)


def extract_all(
    archives: list[Archive], root: str, workers: int = 2, progress: bool = True
) -> list[ExtractResult]:
    """Extract ``archives`` into ``root`` with ``workers`` threads; skip the ones already done.

    Every archive is attempted; failures are raised together afterwards as one ``DataError``.
    """
    ensure_root(root)
    results: list[ExtractResult] = []
    errors: list[str] = []
    todo: list[tuple[Archive, str, int]] = []
    for archive in archives:
        try:
            key = archive_key(archive)
        except DataError as err:
            errors.append(str(err))
            continue
        if os.path.exists(marker_path(root, key)):
            with open(marker_path(root, key)) as fh:
                done = json.load(fh)
            results.append(ExtractResult(archive.name, key, done["members"], done["bytes"], skipped=True))
        else:
            size = sum(i.file_size for i in _infolist(archive))
            todo.append((archive, key, size))
    columns = (
        TextColumn("extract"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[archives]}"),
    )
    with Progress(*columns, disable=not progress or not todo, transient=False) as bar:
        task = bar.add_task("extract", total=sum(s for _, _, s in todo), archives=f"0/{len(todo)} archives")
        finished = 0

        def one(item: tuple[Archive, str, int]) -> ExtractResult:
            archive, key, _ = item
            return extract_archive(archive, root, key, advance=lambda n: bar.advance(task, n))

        with ThreadPoolExecutor(max(1, workers)) as pool:
            futures = [pool.submit(one, item) for item in todo]
            for future in futures:
                try:
                    results.append(future.result())
                except DataError as err:
                    errors.append(str(err))
                finished += 1
                bar.update(task, archives=f"{finished}/{len(todo)} archives")
    if errors:
        listing = "\n  ".join(errors)
        raise DataError(f"{len(errors)} archive(s) could not be extracted into {root}:\n  {listing}")
    return sorted(results, key=lambda r: r.name)


def media_entries(root: str) -> list[str]:
    """Top-level entries of ``root`` that hold media (everything but the marker directory)."""
    return sorted(e for e in os.listdir(root) if e != MARKER_DIR)
