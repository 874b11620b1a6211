"""Extract every media archive into one root, in parallel, safely and idempotently.

ParaVT-Source zips carry full sentinel paths, so all of them unpack into the same root.

- Safety: every member of an archive is checked before anything of it is written. Names go through the
  one guarded join of remote names (``storage.safe_join``: no absolute names, no ``..`` as written,
  percent-decoded or with backslashes, nothing through a symlink already under the root); symlinks,
  devices, FIFOs, sockets, empty names and names holding NUL are refused with an error naming the archive
  and the member (zip-slip); a corrupt archive or a member whose CRC does not match is an error naming the
  archive (and the member).
- Zip bombs: the members' declared sizes are bounded per archive, in total (``max_bytes``) and against the
  archive's size on disk (``max_ratio``), before anything is written; ``zipfile`` never yields more than a
  member's declared size (and checks its CRC), so the declared sizes bound what is written.
- Idempotence: a member is written under a short temporary name in its directory (names near the 255-byte
  limit still fit) and renamed when complete; when every member is in place,
  ``<root>/.paravt-extract/<key>.done`` is written, listing the member files (what later steps count as
  downloaded). ``key`` hashes the archive's name and central directory (member names, CRCs, sizes), so it
  is cheap to compute for a 10 GB zip and changes when the archive does. A rerun skips archives with a
  marker and redoes any other one from the start.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
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

from paravt_core import storage
from paravt_core.data.validate import DataError
from paravt_core.stage import console

MARKER_DIR = ".paravt-extract"
_CHUNK = 1 << 20
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


@dataclass(frozen=True)
class Limits:
    """Per-archive bounds against zip bombs (``extract.max_archive_bytes`` / ``max_compression_ratio``)."""

    max_bytes: int = 64 << 30
    max_ratio: float = 100.0


@dataclass
class ExtractResult:
    name: str
    key: str
    members: int
    bytes: int
    skipped: bool  # already extracted by an earlier run
    files: tuple[str, ...] = ()  # the member files (normalized relative paths) now under the root


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
    """Why a member must not be extracted (name or file type), or None for a plain file or directory."""
    # ``filename`` is cut at the first NUL by zipfile; the name as stored is ``orig_filename``
    reason = storage.unsafe_name_reason(info.orig_filename) or storage.unsafe_name_reason(info.filename)
    if reason:
        return reason
    kind = stat.S_IFMT(info.external_attr >> 16)
    if kind in _BAD_TYPES:
        return f"is {_BAD_TYPES[kind]}"
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        return f"has an unsupported file type (mode {oct(info.external_attr >> 16)})"
    if info.filename.split("/", 1)[0] == MARKER_DIR:
        return f"would overwrite the extraction markers ({MARKER_DIR}/)"
    return None


def check_members(archive: Archive, infos: list[zipfile.ZipInfo], root: str) -> list[str]:
    """Local target of every member; refuses the whole archive if any is unsafe (nothing written yet)."""
    targets = []
    for info in infos:
        reason = unsafe_reason(info)
        if reason is None:
            try:
                targets.append(storage.safe_join(root, info.filename))
            except storage.UnsafePathError:
                reason = "resolves outside the extraction root (through an existing symlink)"
        if reason:
            raise DataError(
                f"archive {archive.name}: member {info.filename!r} {reason}; refusing the archive"
            )
    return targets


def check_limits(archive: Archive, infos: list[zipfile.ZipInfo], limits: Limits) -> None:
    """Refuse an archive whose members would expand beyond the configured bounds (a zip bomb)."""
    total = sum(i.file_size for i in infos)
    on_disk = max(os.path.getsize(archive.path), 1)
    if total > limits.max_bytes:
        raise DataError(
            f"archive {archive.name}: members would expand to {total} bytes, above "
            f"extract.max_archive_bytes={limits.max_bytes} (a zip bomb?); refusing the archive"
        )
    if total / on_disk > limits.max_ratio:
        raise DataError(
            f"archive {archive.name}: members would expand to {total} bytes from {on_disk} on disk "
            f"(ratio {total / on_disk:.0f}, above extract.max_compression_ratio={limits.max_ratio:g}; "
            "a zip bomb?); refusing the archive"
        )


def member_files(infos: list[zipfile.ZipInfo]) -> tuple[str, ...]:
    """The file members as normalized relative paths (how sentinel paths are compared with them)."""
    return tuple(sorted({posixpath.normpath(i.filename) for i in infos if not i.is_dir()}))


def part_path(target: str, key: str) -> str:
    """The temporary name a member is written under: short (the member's own name may be near the
    255-byte limit of a path component) and distinct per archive and member (two archives may hold the
    same member)."""
    tag = hashlib.sha256(f"{key}\0{os.path.basename(target)}".encode()).hexdigest()[:16]
    return os.path.join(os.path.dirname(target), f".paravt-{tag}.part")


def marker_path(root: str, key: str) -> str:
    return os.path.join(root, MARKER_DIR, f"{key}.done")


def ensure_root(root: str) -> None:
    """Create the extraction root, or fail clearly when the path exists and is not a usable directory."""
    if os.path.exists(root) and not os.path.isdir(root):
        raise DataError(f"extraction root {root} exists and is not a directory")
    os.makedirs(os.path.join(root, MARKER_DIR), exist_ok=True)


def extract_archive(
    archive: Archive,
    root: str,
    key: str,
    advance: Callable[[int], None] | None = None,
    limits: Limits | None = None,
) -> ExtractResult:
    """Extract one archive (already known not to be done) and write its marker last."""
    infos = _infolist(archive)
    targets = check_members(archive, infos, root)
    check_limits(archive, infos, limits or Limits())
    total = 0
    try:
        zf = zipfile.ZipFile(archive.path)
    except (zipfile.BadZipFile, OSError) as err:
        raise DataError(f"archive {archive.name}: not a readable zip file ({err})") from None
    with zf:
        for info, target in zip(infos, targets, strict=True):
            if info.is_dir():
                os.makedirs(target, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            tmp = part_path(target, key)
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
    files = member_files(infos)
    done = {
        "archive": archive.name,
        "key": key,
        "members": len(infos),
        "bytes": total,
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "files": list(files),
    }
    marker = marker_path(root, key)
    with open(marker + ".tmp", "w") as fh:
        json.dump(done, fh)
    os.replace(marker + ".tmp", marker)
    return ExtractResult(archive.name, key, len(infos), total, skipped=False, files=files)


def _from_marker(done: dict, archive: Archive | None) -> ExtractResult:
    """The result recorded by a finished extraction (member files read from the zip for old markers)."""
    files = done.get("files")
    if files is None and archive is not None:
        files = member_files(_infolist(archive))
    return ExtractResult(
        done["archive"], done["key"], done["members"], done["bytes"], skipped=True, files=tuple(files or ())
    )


def recorded(root: str) -> list[ExtractResult]:
    """Every archive a finished extraction recorded under ``root`` (a root extracted by earlier runs)."""
    directory = os.path.join(root, MARKER_DIR)
    out = []
    if os.path.isdir(directory):
        for name in sorted(os.listdir(directory)):
            if name.endswith(".done"):
                with open(os.path.join(directory, name)) as fh:
                    out.append(_from_marker(json.load(fh), None))
    return sorted(out, key=lambda r: r.name)


def extract_all(
    archives: list[Archive],
    root: str,
    workers: int = 2,
    progress: bool = True,
    limits: Limits | None = None,
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
                results.append(_from_marker(json.load(fh), archive))
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
    # On the stages' stderr console: stdout carries only the stage's JSON result.
    with Progress(*columns, console=console, disable=not progress or not todo, transient=False) as bar:
        task = bar.add_task("extract", total=sum(s for _, _, s in todo), archives=f"0/{len(todo)} archives")
        finished = 0

        def one(item: tuple[Archive, str, int]) -> ExtractResult:
            archive, key, _ = item
            return extract_archive(archive, root, key, lambda n: bar.advance(task, n), limits)

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
