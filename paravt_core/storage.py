"""One URI layer for every stage: local paths and ``s3://bucket/key`` (boto3), behind the same functions.

Conventions
- A URI is either a local path (``/data/x``, ``rel/x``) or ``s3://bucket[/key]``; any other ``scheme://`` is a
  ``ValueError``. A missing object or file is a ``FileNotFoundError`` that names the URI.
- A "directory" URI is a prefix: ``list_uris("s3://b/run")`` lists ``s3://b/run/...`` (never ``s3://b/run2``),
  exactly like a local directory.
- Atomic writes: ``write_bytes`` and downloads go to a temporary file in the target's directory and are renamed
  into place; an S3 object appears only when its single PUT (or multipart completion) succeeds.
- Completion: a stage writes all its outputs, then ``mark_complete(out)`` writes ``out/_COMPLETE`` last; readers
  trust only ``is_complete(out)``. A rerun that rewrites outputs calls ``clear_complete(out)`` first.
- S3 endpoint and credentials come from the standard environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
  ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION`` (default us-east-1), ``AWS_MAX_ATTEMPTS`` (default 8),
  ``AWS_RETRY_MODE`` (default standard)); path-style addressing so any S3-compatible server works.
- Retries: botocore retries throttling (SlowDown, 429), 5xx and connection errors with jittered exponential
  backoff; every failed attempt is logged here (operation, bucket/key, cause; never credentials): a request's
  first failure at WARNING, its later attempts at DEBUG, so the console shows one line per failing request.
  Errors in the middle of a response body, which botocore does not retry, are retried by ``_retry_body``
  (reads) and by s3transfer (file downloads).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import boto3
import botocore.exceptions as bce
from boto3.s3.transfer import TransferConfig, create_transfer_manager
from botocore.config import Config
from s3transfer.subscribers import BaseSubscriber
from tqdm import tqdm
from urllib3.exceptions import ProtocolError

log = logging.getLogger(__name__)

S3_SCHEME = "s3://"
COMPLETE_MARKER = "_COMPLETE"
MB = 1024 * 1024
# Files above the threshold go multipart, in parallel parts; below it, one PUT (atomic by nature).
MULTIPART_THRESHOLD = 64 * MB
MULTIPART_CHUNKSIZE = 16 * MB
TRANSFER_THREADS = 4  # parts of one file in flight; the machine has 2 cores, transfers are I/O bound
DIR_WORKERS = 8  # files of one directory in flight
DEFAULT_MAX_ATTEMPTS = 8
BODY_READ_ATTEMPTS = 5  # for errors in the middle of a response body (not retried by botocore)
PROGRESS_MIN_BYTES = 256 * MB  # show a progress bar only for transfers this large
DEFAULT_CACHE_MAX_BYTES = 20 * 1024 * MB

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
# What a connection dropping in the middle of a response body looks like from botocore/urllib3.
_BODY_ERRORS = (
    bce.ResponseStreamingError,
    bce.IncompleteReadError,
    bce.ReadTimeoutError,
    bce.ConnectionClosedError,
    ProtocolError,
    ConnectionError,
    socket.timeout,
)


# ------------------------------------------------------------------------------------------ URIs


def is_s3(uri: str | os.PathLike[str]) -> bool:
    """True for ``s3://...`` URIs; False for local paths. Other schemes raise ``ValueError``."""
    text = os.fspath(uri)
    if text.startswith(S3_SCHEME):
        return True
    if not text:
        raise ValueError("empty URI")
    if _SCHEME_RE.match(text):
        raise ValueError(f"unsupported URI {text!r}: expected a local path or s3://bucket/key")
    return False


def split_s3(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> ``("bucket", "a/b")``; validates the bucket name."""
    if not uri.startswith(S3_SCHEME):
        raise ValueError(f"not an s3:// URI: {uri!r}")
    bucket, _, key = uri[len(S3_SCHEME) :].partition("/")
    if not _BUCKET_RE.match(bucket) or ".." in bucket:
        raise ValueError(
            f"bad S3 URI {uri!r}: bucket name {bucket!r} must be 3-63 lowercase letters, digits, '.' or '-'"
        )
    return bucket, key


def join(uri: str | os.PathLike[str], *parts: str) -> str:
    """Append path parts to a URI (``/`` for S3, ``os.path.join`` locally); leading slashes in parts are dropped."""
    text = os.fspath(uri)
    clean = [p.strip("/") for p in parts if p and p.strip("/")]
    if is_s3(text):
        split_s3(text)
        return "/".join([text.rstrip("/"), *clean]) if clean else text
    return os.path.join(text, *clean)


# ------------------------------------------------------------------------------------------ remote names


class UnsafePathError(ValueError):
    """A remote name (object key, archive member) that must not become a local path."""


_DRIVE = re.compile(r"^[A-Za-z]:")


def unsafe_name_reason(name: str) -> str | None:
    """Why the remote relative ``name`` must not be joined under a local directory, or None.

    Judged as written and percent-decoded (``%2e%2e/x``, ``%2fetc``), with ``\\`` counted as a separator.
    """
    if not name or "\0" in name:
        return "has an empty name or a NUL byte in its name"
    for form in dict.fromkeys((name, unquote(name))):
        if "\0" in form:
            return "has a NUL byte in its name (percent-encoded)"
        if form.startswith(("/", "\\")) or _DRIVE.match(form):
            return "has an absolute path"
        if ".." in re.split(r"[\\/]", form):
            return "has a '..' component (would escape the target directory)"
    return None


def safe_join(root: str | os.PathLike[str], name: str) -> str:
    """``root/name`` for a remote ``name``, or ``UnsafePathError`` when it would land outside ``root``.

    The one guarded join for every remote name that becomes a local path (downloaded object keys, archive
    members): the name itself must be relative and free of ``..`` (``unsafe_name_reason``), and the result,
    with the symlinks already under ``root`` resolved, must stay below ``root``, so nothing is written
    through a link such as ``root/selfqa -> /elsewhere``.
    """
    reason = unsafe_name_reason(name)
    if reason:
        raise UnsafePathError(f"{name!r} {reason}")
    real_root = os.path.realpath(root)
    target = os.path.join(real_root, *[p for p in name.split("/") if p])
    resolved = os.path.realpath(target)
    if resolved != real_root and not resolved.startswith(real_root.rstrip(os.sep) + os.sep):
        raise UnsafePathError(f"{name!r} resolves outside {os.fspath(root)} (through an existing symlink)")
    return target


def _dir_key(key: str) -> str:
    """An S3 key used as a directory prefix: ``a/b`` -> ``a/b/``; the bucket root stays ``""``."""
    return key.rstrip("/") + "/" if key.strip("/") else ""


# ------------------------------------------------------------------------------------------ client

_client_lock = threading.Lock()
_clients: dict[tuple[Any, ...], Any] = {}


def _client_key() -> tuple[Any, ...]:
    env = os.environ
    secret = env.get("AWS_SECRET_ACCESS_KEY", "")
    # the cache key holds only a hash of the secret, so nothing printable here contains it
    return (
        os.getpid(),  # a forked child must not share the parent's connection pool
        env.get("AWS_ENDPOINT_URL", ""),
        env.get("AWS_ACCESS_KEY_ID", ""),
        hashlib.sha256(secret.encode()).hexdigest(),
        env.get("AWS_DEFAULT_REGION", ""),
        env.get("AWS_MAX_ATTEMPTS", ""),
        env.get("AWS_RETRY_MODE", ""),
    )


def s3_client() -> Any:
    """The process's boto3 S3 client (thread-safe; rebuilt when the AWS_* environment changes or after fork)."""
    key = _client_key()
    client = _clients.get(key)
    if client is not None:
        return client
    with _client_lock:
        client = _clients.get(key)
        if client is None:
            client = _make_client()
            _clients.clear()  # old clients belong to an old environment or a parent process
            _clients[key] = client
    return client


def reset_client() -> None:
    """Forget the cached client (tests that change the AWS_* environment call this)."""
    with _client_lock:
        _clients.clear()


def max_attempts() -> int:
    return int(os.environ.get("AWS_MAX_ATTEMPTS") or DEFAULT_MAX_ATTEMPTS)


def _make_client() -> Any:
    config = Config(
        retries={
            "total_max_attempts": max_attempts(),
            "mode": os.environ.get("AWS_RETRY_MODE") or "standard",
        },
        s3={"addressing_style": "path"},
        signature_version="s3v4",
        connect_timeout=10,
        read_timeout=60,
        max_pool_connections=DIR_WORKERS * TRANSFER_THREADS,
    )
    session = boto3.session.Session()  # sessions are not thread-safe; we hold the lock here
    client = session.client(
        "s3",
        endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None,
        region_name=os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        config=config,
    )
    client.meta.events.register("needs-retry.s3", _log_failed_attempt)
    return client


def _log_failed_attempt(
    response: Any = None,
    operation: Any = None,
    attempts: int = 0,
    caught_exception: BaseException | None = None,
    request_dict: dict[str, Any] | None = None,
    **_: Any,
) -> None:
    """Log every attempt that failed for a retryable reason; botocore's own retry handler decides the delay.

    Only the operation, the URL path (bucket/key) and the cause are logged: never headers or credentials.
    """
    if caught_exception is not None:
        cause = f"{type(caught_exception).__name__}: {caught_exception}"
    elif response is not None:
        status = response[0].status_code
        if status < 500 and status != 429:
            return
        code = response[1].get("Error", {}).get("Code", "") if isinstance(response[1], dict) else ""
        cause = f"HTTP {status} {code}".strip()
    else:
        return
    limit = max_attempts()
    path = urlsplit((request_dict or {}).get("url", "")).path  # /bucket/key (path-style); no query, no host
    name = getattr(operation, "name", "?")
    # One console line per failing request, not one per attempt (an unreachable endpoint would print
    # AWS_MAX_ATTEMPTS of them): the first failure says that retries follow (WARNING), the later ones are
    # DEBUG, and giving up is INFO after that warning (the exception raised next says the rest) or WARNING
    # when there was no retry to announce.
    if attempts >= limit:
        level = logging.INFO if attempts > 1 else logging.WARNING
        log.log(level, "S3 %s %s failed (%s); giving up after %d attempts", name, path, cause, attempts)
    else:
        log.log(
            logging.WARNING if attempts == 1 else logging.DEBUG,
            "S3 %s %s attempt %d/%d failed (%s); retrying with backoff",
            name,
            path,
            attempts,
            limit,
            cause,
        )


def _is_missing(exc: bce.ClientError) -> bool:
    code = str(exc.response.get("Error", {}).get("Code", ""))
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code in ("404", "NoSuchKey", "NoSuchBucket", "NotFound") or status == 404


def _missing(uri: str, exc: bce.ClientError) -> FileNotFoundError:
    code = str(exc.response.get("Error", {}).get("Code", ""))
    what = "no such bucket" if code == "NoSuchBucket" else "no such object"
    return FileNotFoundError(f"{uri}: {what}")


# ------------------------------------------------------------------------------------------ bytes


def read_bytes(uri: str | os.PathLike[str]) -> bytes:
    """The whole content of a file or object."""
    text = os.fspath(uri)
    if not is_s3(text):
        return Path(text).read_bytes()
    bucket, key = split_s3(text)
    if not key or key.endswith("/"):
        raise ValueError(f"{text}: not an object URI (no key)")

    for attempt in range(1, BODY_READ_ATTEMPTS + 1):
        try:  # the request itself is retried by botocore
            resp = s3_client().get_object(Bucket=bucket, Key=key)
        except bce.ClientError as exc:
            if _is_missing(exc):
                raise _missing(text, exc) from None
            raise
        body, expected = resp["Body"], resp["ContentLength"]
        try:  # a connection dropped mid-body is not retried by botocore: new GET, with backoff
            data = body.read()
            if len(data) != expected:  # a short body that closed cleanly
                raise bce.IncompleteReadError(actual_bytes=len(data), expected_bytes=expected)
            return data
        except _BODY_ERRORS as exc:
            if attempt == BODY_READ_ATTEMPTS:  # as _log_failed_attempt: one console line per failing read
                log.log(logging.INFO if attempt > 1 else logging.WARNING,
                        "GET %s: body read failed (%s); giving up after %d attempts", text, exc, attempt)  # fmt: skip
                raise
            delay = min(0.1 * 2 ** (attempt - 1), 5.0)
            log.log(logging.WARNING if attempt == 1 else logging.DEBUG,
                    "GET %s: body read attempt %d/%d failed (%s); retrying in %.1fs", text, attempt,
                    BODY_READ_ATTEMPTS, type(exc).__name__, delay)  # fmt: skip
            time.sleep(delay)
        finally:
            body.close()
    raise AssertionError("unreachable")


def _atomic_local_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` for a temp file beside ``path``, then rename it over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; outputs should read like normal files
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes(uri: str | os.PathLike[str], data: bytes) -> None:
    """Write atomically: readers see the old content or the new one, never a part."""
    text = os.fspath(uri)
    if not is_s3(text):

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())

        _atomic_local_write(Path(text), write)
        return
    bucket, key = split_s3(text)
    if not key or key.endswith("/"):
        raise ValueError(f"{text}: not an object URI (no key)")
    try:
        s3_client().put_object(Bucket=bucket, Key=key, Body=data)
    except bce.ClientError as exc:
        if _is_missing(exc):
            raise _missing(text, exc) from None
        raise


def _object_exists(bucket: str, key: str) -> bool:
    try:
        s3_client().head_object(Bucket=bucket, Key=key)
    except bce.ClientError as exc:
        if _is_missing(exc):
            return False
        raise
    return True


def exists(uri: str | os.PathLike[str]) -> bool:
    """True for an existing file/object, or a directory/prefix holding at least one object."""
    text = os.fspath(uri)
    if not is_s3(text):
        return os.path.exists(text)
    bucket, key = split_s3(text)
    if key and not key.endswith("/") and _object_exists(bucket, key):
        return True
    try:
        resp = s3_client().list_objects_v2(Bucket=bucket, Prefix=_dir_key(key), MaxKeys=1)
    except bce.ClientError as exc:
        if _is_missing(exc):
            return False
        raise
    return resp.get("KeyCount", 0) > 0


def delete(uri: str | os.PathLike[str]) -> None:
    """Remove one file/object (no error when it is already gone)."""
    text = os.fspath(uri)
    if not is_s3(text):
        Path(text).unlink(missing_ok=True)
        return
    bucket, key = split_s3(text)
    if not key:
        raise ValueError(f"{text}: not an object URI (no key)")
    s3_client().delete_object(Bucket=bucket, Key=key)


# ------------------------------------------------------------------------------------------ listing


def _iter_s3(uri: str) -> Iterator[tuple[str, int]]:
    """(key, size) of every object under the directory ``uri``."""
    bucket, key = split_s3(uri)
    paginator = s3_client().get_paginator("list_objects_v2")
    try:
        for page in paginator.paginate(Bucket=bucket, Prefix=_dir_key(key)):
            for obj in page.get("Contents", []):
                yield obj["Key"], obj["Size"]
    except bce.ClientError as exc:
        if _is_missing(exc):  # a missing bucket lists like a missing local directory: nothing
            return
        raise


def list_uris(prefix: str | os.PathLike[str], suffix: str | tuple[str, ...] | None = None) -> list[str]:
    """Every file/object under the directory ``prefix`` (recursive), as full URIs, sorted.

    A missing directory lists as empty. ``suffix`` keeps only names ending with it (a string or tuple).
    """
    text = os.fspath(prefix)
    if is_s3(text):
        bucket, _ = split_s3(text)
        uris = [f"{S3_SCHEME}{bucket}/{key}" for key, _ in _iter_s3(text) if not key.endswith("/")]
    else:
        uris = []
        if os.path.isdir(text):
            for dirpath, _, files in os.walk(text):
                uris.extend(os.path.join(dirpath, name) for name in files)
    if suffix is not None:
        uris = [u for u in uris if u.endswith(suffix)]
    return sorted(uris)


# ------------------------------------------------------------------------------------------ files


def transfer_config(**overrides: Any) -> TransferConfig:
    """Multipart above ``MULTIPART_THRESHOLD`` with ``TRANSFER_THREADS`` parts in flight."""
    args: dict[str, Any] = {
        "multipart_threshold": MULTIPART_THRESHOLD,
        "multipart_chunksize": MULTIPART_CHUNKSIZE,
        "max_concurrency": TRANSFER_THREADS,
        "use_threads": True,
    }
    args.update(overrides)
    return TransferConfig(**args)


class _Progress(BaseSubscriber):
    """Feeds s3transfer byte counts into a (shared, thread-safe) tqdm bar."""

    def __init__(self, bar: tqdm) -> None:
        self._bar = bar

    def on_progress(self, future: Any, bytes_transferred: int, **kwargs: Any) -> None:
        self._bar.update(bytes_transferred)


def _bar(total: int, desc: str) -> tqdm:
    return tqdm(total=total, unit="B", unit_scale=True, desc=desc, mininterval=1.0,
                disable=total < PROGRESS_MIN_BYTES)  # fmt: skip


def _copy_local(src: Path, dst: Path) -> None:
    _atomic_local_write(dst, lambda tmp: shutil.copyfile(src, tmp))


def upload_file(
    local_path: str | os.PathLike[str], uri: str | os.PathLike[str], *, transfer: TransferConfig | None = None
) -> None:
    """Copy a local file to ``uri`` (multipart and parallel when large; atomic either way)."""
    src = Path(local_path)
    if not src.is_file():
        raise FileNotFoundError(f"{src}: no such file to upload")
    text = os.fspath(uri)
    if not is_s3(text):
        _copy_local(src, Path(text))
        return
    bucket, key = split_s3(text)
    if not key or key.endswith("/"):
        raise ValueError(f"{text}: not an object URI (no key)")
    size = src.stat().st_size
    with _bar(size, f"upload {src.name}") as bar:
        _run_transfers(transfer, lambda tm: [tm.upload(str(src), bucket, key, subscribers=[_Progress(bar)])])


def download_file(
    uri: str | os.PathLike[str], local_path: str | os.PathLike[str], *, transfer: TransferConfig | None = None
) -> None:
    """Copy ``uri`` to a local file (parallel ranged GETs when large); the file appears only when complete."""
    text = os.fspath(uri)
    dst = Path(local_path)
    if not is_s3(text):
        src = Path(text)
        if not src.is_file():
            raise FileNotFoundError(f"{text}: no such file")
        _copy_local(src, dst)
        return
    bucket, key = split_s3(text)
    try:
        size = s3_client().head_object(Bucket=bucket, Key=key)["ContentLength"]
    except bce.ClientError as exc:
        if _is_missing(exc):
            raise _missing(text, exc) from None
        raise
    dst.parent.mkdir(parents=True, exist_ok=True)
    # s3transfer writes to a temp name beside dst and renames it when the whole object is in
    with _bar(size, f"download {dst.name}") as bar:
        _run_transfers(
            transfer, lambda tm: [tm.download(bucket, key, str(dst), subscribers=[_Progress(bar)])]
        )


def _run_transfers(transfer: TransferConfig | None, submit: Callable[[Any], list[Any]]) -> None:
    """Submit transfers to one s3transfer manager and wait for all; the first failure cancels the rest."""
    config = transfer or transfer_config()
    manager = create_transfer_manager(s3_client(), config)
    futures: list[Any] = []
    try:
        futures = submit(manager)
        for fut in futures:
            fut.result()
    except BaseException:
        manager.shutdown(cancel=True)
        raise
    manager.shutdown()


def _local_files(local_dir: Path) -> list[tuple[Path, str]]:
    """(path, relative posix name) of every file under ``local_dir``, sorted."""
    out = []
    for dirpath, _, files in os.walk(local_dir):
        for name in files:
            path = Path(dirpath) / name
            out.append((path, path.relative_to(local_dir).as_posix()))
    return sorted(out, key=lambda t: t[1])


def upload_dir(
    local_dir: str | os.PathLike[str], uri: str | os.PathLike[str], *, transfer: TransferConfig | None = None
) -> list[str]:
    """Copy every file under ``local_dir`` to ``uri/<relative path>`` in parallel; returns the written URIs.

    Does not write a completion marker: call ``mark_complete(uri)`` after this returns.
    """
    src = Path(local_dir)
    if not src.is_dir():
        raise FileNotFoundError(f"{src}: no such directory to upload")
    text = os.fspath(uri)
    files = _local_files(src)
    targets = [join(text, rel) for _, rel in files]
    if not is_s3(text):
        with ThreadPoolExecutor(DIR_WORKERS) as pool:
            list(pool.map(_copy_local, [p for p, _ in files], [Path(t) for t in targets]))
        return targets
    total = sum(path.stat().st_size for path, _ in files)
    with _bar(total, f"upload {src.name}/") as bar:

        def submit(tm: Any) -> list[Any]:
            progress = [_Progress(bar)]
            pairs = zip(files, targets, strict=True)
            return [tm.upload(str(p), *split_s3(t), subscribers=progress) for (p, _), t in pairs]

        _run_transfers(transfer, submit)
    return targets


def download_dir(
    uri: str | os.PathLike[str], local_dir: str | os.PathLike[str], *, transfer: TransferConfig | None = None
) -> list[str]:
    """Copy every object under the directory ``uri`` into ``local_dir`` in parallel; returns the local paths.

    Each file appears atomically, but a failure midway leaves the files already fetched: download into a
    temporary directory and rename it when the whole directory must appear at once.
    An empty or missing source is a ``FileNotFoundError`` (silently downloading nothing hides mistakes).
    """
    text = os.fspath(uri)
    dst = Path(local_dir)
    if not is_s3(text):
        src = Path(text)
        if not src.is_dir():
            raise FileNotFoundError(f"{text}: no such directory")
        files = _local_files(src)
        paths = [dst / rel for _, rel in files]
        with ThreadPoolExecutor(DIR_WORKERS) as pool:
            list(pool.map(_copy_local, [p for p, _ in files], paths))
        return [str(p) for p in paths]
    bucket, key = split_s3(text)
    base = _dir_key(key)
    objects = [(k, size) for k, size in _iter_s3(text) if not k.endswith("/")]
    if not objects:
        raise FileNotFoundError(f"{text}: no objects under this prefix")
    pairs = []
    dst.mkdir(parents=True, exist_ok=True)
    for k, _ in objects:
        try:  # a key like "a/../../x" must not write outside local_dir: every key is checked first
            pairs.append((k, Path(safe_join(dst, k[len(base) :]))))
        except UnsafePathError as exc:
            raise UnsafePathError(f"s3://{bucket}/{k}: key not usable under {dst}: {exc}") from None
    for _, path in pairs:
        path.parent.mkdir(parents=True, exist_ok=True)
    total = sum(size for _, size in objects)
    with _bar(total, f"download {text}") as bar:

        def submit(tm: Any) -> list[Any]:
            progress = [_Progress(bar)]
            return [tm.download(bucket, k, str(p), subscribers=progress) for k, p in pairs]

        _run_transfers(transfer, submit)
    return [str(p) for _, p in pairs]


# ------------------------------------------------------------------------------------------ completion


def mark_complete(uri: str | os.PathLike[str], info: dict[str, Any] | None = None) -> None:
    """Write ``<uri>/_COMPLETE`` (JSON: time + ``info``). Call it only after every output is written."""
    payload = {"completed_at": datetime.now(UTC).isoformat(timespec="seconds"), "info": info or {}}
    write_bytes(join(uri, COMPLETE_MARKER), json.dumps(payload, indent=2, sort_keys=True).encode())


def is_complete(uri: str | os.PathLike[str]) -> bool:
    """True when ``<uri>/_COMPLETE`` exists: the outputs under ``uri`` are whole and may be trusted."""
    marker = join(uri, COMPLETE_MARKER)
    if not is_s3(marker):
        return os.path.isfile(marker)
    return _object_exists(*split_s3(marker))


def completion_info(uri: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The JSON written by ``mark_complete`` (``None`` when the outputs are not complete)."""
    try:
        return json.loads(read_bytes(join(uri, COMPLETE_MARKER)))
    except FileNotFoundError:
        return None


def clear_complete(uri: str | os.PathLike[str]) -> None:
    """Remove the marker before rewriting outputs, so a crash midway never leaves them looking complete."""
    delete(join(uri, COMPLETE_MARKER))


# ------------------------------------------------------------------------------------------ local cache


def default_cache_dir() -> str:
    return os.environ.get("PARAVT_CACHE_DIR") or os.path.join(Path.home(), ".cache", "paravt", "s3")


@contextlib.contextmanager
def _flock(path: Path, blocking: bool = True) -> Iterator[bool]:
    """An exclusive lock between threads and processes (flock on a fresh descriptor)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def local_copy(
    uri: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None, max_bytes: int | None = None
) -> str:
    """A local path holding the content of ``uri``.

    Local paths are returned as they are. An S3 object is downloaded once into ``cache_dir`` (default
    ``$PARAVT_CACHE_DIR`` or ``~/.cache/paravt/s3``), keyed by URI + ETag + size so a changed object is fetched
    again (so every call costs one HEAD request); concurrent callers (threads or processes) wait for one
    download. The cache is bounded by ``max_bytes`` (default ``$PARAVT_CACHE_MAX_BYTES`` or 20 GiB), evicting
    the least recently used entries after each download.
    """
    text = os.fspath(uri)
    if not is_s3(text):
        if not os.path.exists(text):
            raise FileNotFoundError(f"{text}: no such file")
        return text
    bucket, key = split_s3(text)
    try:
        head = s3_client().head_object(Bucket=bucket, Key=key)
    except bce.ClientError as exc:
        if _is_missing(exc):
            raise _missing(text, exc) from None
        raise
    size = int(head["ContentLength"])
    digest = hashlib.sha256(f"{text}\0{head.get('ETag', '')}\0{size}".encode()).hexdigest()[:32]
    root = Path(cache_dir or default_cache_dir())
    entry = root / digest
    name = Path(key).name  # the key's last component only: never a directory part, never ".."
    target = entry / (name if name and unsafe_name_reason(name) is None else "object")
    with _flock(root / ".locks" / f"{digest}.lock"):
        if target.is_file() and target.stat().st_size == size:
            os.utime(target)  # recently used: evicted last
            return str(target)
        entry.mkdir(parents=True, exist_ok=True)
        for stale in entry.iterdir():  # leftovers of a download that died
            if stale != target:
                stale.unlink(missing_ok=True)
        download_file(text, target)
        got = target.stat().st_size
        if got != size:
            target.unlink(missing_ok=True)
            raise OSError(f"{text}: downloaded {got} bytes, expected {size}")
    limit = (
        max_bytes
        if max_bytes is not None
        else int(os.environ.get("PARAVT_CACHE_MAX_BYTES") or DEFAULT_CACHE_MAX_BYTES)
    )
    _evict(root, limit, keep=entry)
    return str(target)


def _evict(root: Path, max_bytes: int, keep: Path) -> None:
    """Delete least recently used cache entries until the cache fits ``max_bytes`` (never ``keep``)."""
    with _flock(root / ".locks" / "_evict.lock"):
        entries = []
        for entry in root.iterdir():
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            stats = []
            for f in entry.iterdir():
                with contextlib.suppress(FileNotFoundError):  # a concurrent download renames its temp file
                    stats.append(f.stat())
            size = sum(st.st_size for st in stats)
            used = max((st.st_mtime for st in stats), default=0.0)
            entries.append((used, size, entry))
        total = sum(size for _, size, _ in entries)
        for _, size, entry in sorted(entries, key=lambda e: e[0]):
            if total <= max_bytes:
                break
            if entry == keep:
                continue
            with _flock(root / ".locks" / f"{entry.name}.lock", blocking=False) as got:
                if not got:  # being downloaded right now
                    continue
                shutil.rmtree(entry, ignore_errors=True)
                total -= size
                log.info("cache: evicted %s (%d bytes) to stay under %d bytes", entry.name, size, max_bytes)
