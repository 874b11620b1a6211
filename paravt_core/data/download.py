"""Get the media archives and the parquets: from the Hugging Face hub, an ``s3://`` prefix or a local dir.

A source string is one of
- ``hf://owner/name`` (or a bare ``owner/name`` that is not an existing local path): a dataset repo on the
  hub, fetched with ``huggingface_hub.snapshot_download`` (resumable; only files matching the include
  patterns);
- ``s3://bucket/prefix``: objects under the prefix matching the patterns are downloaded to the work dir
  (every key through the guarded join ``storage.safe_join``: a key that would land outside it is an
  error); a file already there with the object's size is not fetched again;
- a local directory: used in place (nothing is copied).

Include patterns are ``fnmatch`` patterns on the path relative to the source root, as on the hub
(``*`` also matches ``/``): ``museg/charades*`` selects the Charades archives only. Later steps work on
whatever was selected; ``left_out`` names the files of the source the patterns did not select (a row
whose media is in none of the downloaded archives counts as not downloaded only when something was left
out).
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
from dataclasses import dataclass

from paravt_core import storage
from paravt_core.data.validate import DataError

log = logging.getLogger(__name__)
HF_SCHEME = "hf://"
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class Source:
    kind: str  # "hf" | "s3" | "local"
    location: str  # repo id, s3 URI or local directory


@dataclass(frozen=True)
class Fetched:
    """A file of a source: its path relative to the source root (posix) and where it is locally."""

    name: str
    path: str


def parse_source(spec: str) -> Source:
    spec = spec.strip()
    if not spec:
        raise DataError("empty source")
    if spec.startswith(HF_SCHEME):
        repo = spec[len(HF_SCHEME) :].strip("/")
        if not _REPO_ID.match(repo):
            raise DataError(f"source {spec!r}: not a hub repo id of the form owner/name")
        return Source("hf", repo)
    if storage.is_s3(spec):
        return Source("s3", spec.rstrip("/"))
    if os.path.exists(spec) or not _REPO_ID.match(spec):
        return Source("local", spec)
    return Source("hf", spec)


def matches(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def hub_snapshot(
    repo_id: str, patterns: list[str], local_dir: str, revision: str | None, max_workers: int
) -> str:
    """The one call to the hub: download (or resume) the matching files of a dataset repo."""
    from huggingface_hub import snapshot_download

    return snapshot_download(
        repo_id=repo_id,
        repo_type="dataset",
        revision=revision,
        allow_patterns=patterns,
        local_dir=local_dir,
        max_workers=max_workers,
    )


def _walk(root: str) -> list[Fetched]:
    """Files under a local directory (hidden directories such as the hub's ``.cache`` skipped)."""
    out = []
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in files:
            if name.startswith("."):
                continue
            path = os.path.join(dirpath, name)
            out.append(Fetched(os.path.relpath(path, root).replace(os.sep, "/"), path))
    return sorted(out, key=lambda f: f.name)


def hub_files(repo_id: str, revision: str | None) -> list[str]:
    """The one listing call to the hub: every file of a dataset repo."""
    from huggingface_hub import HfApi

    return HfApi().list_repo_files(repo_id, repo_type="dataset", revision=revision)


def _fetch_s3(prefix: str, patterns: list[str], dest: str) -> list[Fetched]:
    client = storage.s3_client()
    selected = []
    for uri in storage.list_uris(prefix):  # every key is checked before anything is fetched
        name = uri[len(prefix) + 1 :]
        if not matches(name, patterns):
            continue
        try:
            selected.append((uri, name, storage.safe_join(dest, name)))
        except storage.UnsafePathError as err:
            raise DataError(f"source {prefix}: object key {err}; refusing the download") from None
    out = []
    for uri, name, local in selected:
        bucket, key = storage.split_s3(uri)
        size = client.head_object(Bucket=bucket, Key=key)["ContentLength"]
        if not (os.path.isfile(local) and os.path.getsize(local) == size):
            storage.download_file(uri, local)  # atomic: the file appears only when complete
        out.append(Fetched(name, local))
    return out


def fetch(
    spec: str, patterns: list[str], dest: str, *, revision: str | None = None, max_workers: int = 4
) -> list[Fetched]:
    """Make the files of ``spec`` that match ``patterns`` available locally; returns them sorted by name.

    Nothing matching is an error (a typo in a pattern must not look like an empty dataset).
    """
    source = parse_source(spec)
    if source.kind == "local":
        if not os.path.exists(source.location):
            raise DataError(f"source {spec}: no such directory")
        if not os.path.isdir(source.location):
            raise DataError(f"source {spec}: not a directory")
        found = [f for f in _walk(source.location) if matches(f.name, patterns)]
    elif source.kind == "s3":
        found = _fetch_s3(source.location, patterns, dest)
    else:
        os.makedirs(dest, exist_ok=True)
        hub_snapshot(source.location, patterns, dest, revision, max_workers)
        found = [f for f in _walk(dest) if matches(f.name, patterns)]
    if not found:
        raise DataError(f"source {spec}: no file matches the include patterns {patterns}")
    return found


def left_out(spec: str, patterns: list[str], revision: str | None = None) -> list[str] | None:
    """Names of the files of ``spec`` that ``patterns`` do not select; None when the hub cannot be listed."""
    source = parse_source(spec)
    if source.kind == "local":
        names = [f.name for f in _walk(source.location)]
    elif source.kind == "s3":
        names = [uri[len(source.location) + 1 :] for uri in storage.list_uris(source.location)]
    else:
        try:
            names = hub_files(source.location, revision)
        except Exception as err:  # offline or no access: presence falls back to "unknown"
            log.warning("source %s: cannot list the hub repo (%s); unselected archives unknown", spec, err)
            return None
    return sorted(n for n in names if not matches(n, patterns))
