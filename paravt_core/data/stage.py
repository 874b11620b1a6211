"""``paravt data``: download -> extract -> validate + materialize -> audit, as one stage function.

Outputs under ``cfg.output`` (a local directory or an ``s3://`` prefix):

    sft/<file>.parquet        good SFT rows, sentinel paths materialized, schema and other columns kept
    rl/<file>.parquet         good RL rows, likewise
    rejected/<file>.parquet   bad rows as they were, plus ``reason`` and ``source_row`` columns
    audit.json  metrics.json  config.yaml
    _COMPLETE                 written last; readers trust the outputs only when it is there

Every parquet is written under a temporary name and renamed (or uploaded after it is whole), so a crash
never leaves a truncated file; a failing run (bad input, too many bad rows) never writes ``_COMPLETE``.

Reruns: downloads resume and extraction skips finished archives. When the output is complete and its
fingerprint (parquet contents, archive identities, what counts as downloaded, output-relevant config) is
unchanged, the stage returns the earlier result without rewriting anything; otherwise it clears
``_COMPLETE`` and redoes validation + materialization of every file (cheap next to download/extract).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from collections import Counter
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from paravt_core import storage
from paravt_core.config import DataConfig
from paravt_core.data import download, extract, sentinel
from paravt_core.data.audit import build_audit, check_gate, print_audit
from paravt_core.data.materialize import (
    MAX_EXAMPLES,
    FileReport,
    Target,
    detect_kind,
    materialize_file,
    open_parquet,
)
from paravt_core.data.validate import DataError, FileChecker
from paravt_core.stage import StageResult, StageRun, console

STAGE = "data"
# Bump when the meaning of the outputs changes, so complete outputs of older code are redone.
FINGERPRINT_VERSION = 2
_OUTPUT_DIRS = ("sft", "rl", "rejected")


def check_root(root: str) -> None:
    """The media root must be an existing, listable directory."""
    if not os.path.exists(root):
        raise DataError(
            f"media root {root} does not exist (with an empty download.media_source, extract.root must "
            "already hold the extracted media)"
        )
    if not os.path.isdir(root):
        raise DataError(f"media root {root} is not a directory")
    try:
        with os.scandir(root) as entries:
            next(entries, None)
    except OSError as err:
        raise DataError(f"media root {root} cannot be read ({err})") from None


def _sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def fingerprint(
    cfg: DataConfig,
    parquets: list[download.Fetched],
    archives: list[extract.ExtractResult],
    root: str,
    prefix: str,
    presence: sentinel.Presence | None,
) -> str:
    """Hash of everything the outputs depend on (not of knobs like worker counts)."""
    relevant = {
        "version": FINGERPRINT_VERSION,
        "root": root,
        "prefix": prefix,
        "validate": cfg.validate_.model_dump(mode="json"),
        "parquets": [(f.name, _sha256_file(f.path)) for f in parquets],
        "archives": sorted((a.name, a.key) for a in archives),
        "presence": presence.digest() if presence else None,
    }
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()


def media_presence(
    root: str, extracted: list[extract.ExtractResult] | None, left_out: list[str] | None
) -> sentinel.Presence:
    """What counts as downloaded (see ``sentinel.Presence``).

    ``extracted``: the archives of this run's media source (None: no source, the root was extracted
    earlier; its markers then say which archives it holds, and whether the source had more is unknown).
    ``left_out``: the source's archives the include patterns did not select (None: unknown).
    """
    groups = frozenset(sentinel.present_groups(root))
    if extracted is None:
        extracted = extract.recorded(root)
        if not extracted:  # extracted by other means: a group with a directory counts as downloaded
            return sentinel.Presence(None, False, groups)
    members = frozenset(f for a in extracted for f in a.files)
    return sentinel.Presence(members, left_out == [], groups)


def _presence_info(presence: sentinel.Presence | None, left_out: list[str] | None) -> dict[str, Any]:
    if presence is None:
        return {"checked": False}
    return {
        "checked": True,
        "rule": "archive members" if presence.members is not None else "group directories",
        "member_files": len(presence.members or ()),
        "all_archives_selected": presence.all_selected,
        "archives_left_out": None if left_out is None else len(left_out),
        "archives_left_out_examples": (left_out or [])[:MAX_EXAMPLES],
        "groups_present": sorted(presence.groups),
    }


def upload_media(root: str, prefix: str, archives: list[extract.ExtractResult]) -> bool:
    """Upload the extracted tree to ``prefix`` unless this set of archives was uploaded there already."""
    stamp = os.path.join(
        root, extract.MARKER_DIR, f"uploaded-{hashlib.sha256(prefix.encode()).hexdigest()[:16]}"
    )
    keys = sorted(a.key for a in archives)
    if os.path.exists(stamp):
        with open(stamp) as fh:
            if json.load(fh).get("keys") == keys:
                return False
    for entry in extract.media_entries(root):
        path = os.path.join(root, entry)
        if os.path.isdir(path):
            storage.upload_dir(path, storage.join(prefix, entry))
        else:
            storage.upload_file(path, storage.join(prefix, entry))
    with open(stamp + ".tmp", "w") as fh:
        json.dump({"prefix": prefix, "keys": keys}, fh)
    os.replace(stamp + ".tmp", stamp)
    return True


def _kind_of(path: str) -> str:
    return detect_kind(path, open_parquet(path).schema_arrow)


def _materialize_all(
    parquets: list[download.Fetched], staging: str, target: Target, cfg: DataConfig
) -> list[FileReport]:
    """Validate + materialize every parquet into ``staging``; file-level errors are raised together."""
    reports: list[FileReport] = []
    errors: list[str] = []
    names = Counter(os.path.basename(f.name) for f in parquets)
    clashes = sorted(f.name for f in parquets if names[os.path.basename(f.name)] > 1)
    if clashes:  # outputs are named by file name: two inputs must not write the same output
        raise DataError(f"parquet files with the same name in different directories: {', '.join(clashes)}")
    total = 0
    for f in parquets:
        with contextlib.suppress(DataError):  # reported below, with the file's name
            total += open_parquet(f.path).metadata.num_rows
    columns = (
        TextColumn("materialize"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("rows"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("materialize", total=total)
        for f in parquets:
            try:
                kind = _kind_of(f.path)
                base = os.path.basename(f.name)
                reports.append(
                    materialize_file(
                        f.path,
                        target,
                        os.path.join(staging, kind, base),
                        os.path.join(staging, "rejected", base),
                        batch_rows=cfg.materialize.batch_rows,
                        threads=cfg.materialize.threads,
                        progress=lambda n: bar.advance(task, n),
                    )
                )
            except DataError as err:
                errors.append(str(err))
    if errors:
        listing = "\n  ".join(errors)
        raise DataError(f"{len(errors)} parquet file(s) cannot be used:\n  {listing}")
    return reports


def _publish(reports: list[FileReport], staging: str, output: str) -> None:
    """Put the produced parquets under ``output`` and delete outputs of earlier runs that were not redone."""
    produced = set()
    for report in reports:
        for local in (report.output, report.rejected_output):
            if local is None:
                continue
            rel = os.path.relpath(local, staging).replace(os.sep, "/")
            produced.add(rel)
            if storage.is_s3(output):
                storage.upload_file(local, storage.join(output, rel))
    for sub in _OUTPUT_DIRS:
        prefix = storage.join(output, sub)
        for uri in storage.list_uris(prefix):
            rel = f"{sub}/{uri[len(prefix) + 1 :]}"
            if rel not in produced:
                storage.delete(uri)


def _outputs(output: str, root: str, prefix: str) -> dict[str, str]:
    return {
        "data": output,
        "sft": storage.join(output, "sft"),
        "rl": storage.join(output, "rl"),
        "rejected": storage.join(output, "rejected"),
        "audit": storage.join(output, "audit.json"),
        "media_root": root,
        "media_prefix": prefix,
    }


def run(cfg: DataConfig) -> StageResult:
    """Run the data stage (see the module docstring). Raises ``DataError`` with a clear message on bad input."""
    life = StageRun.open(STAGE, cfg.output, absolute=True)
    started = time.perf_counter()
    seconds: dict[str, float] = {}
    output = life.output
    work = os.path.abspath(cfg.work_dir)
    root = os.path.abspath(cfg.extract.root or os.path.join(work, "media"))
    if not life.complete:  # a complete output is reused or redone once its fingerprint is known (below)
        life.begin(cfg)

    t = time.perf_counter()
    dl = cfg.download
    parquets = download.fetch(
        dl.parquet_source,
        dl.parquet_include,
        os.path.join(work, "download", "parquet"),
        revision=dl.revision,
        max_workers=dl.max_workers,
    )
    parquets = [f for f in parquets if f.name.endswith(".parquet")]
    archives: list[extract.Archive] = []
    left_out: list[str] | None = None
    if dl.media_source:
        media = download.fetch(
            dl.media_source,
            dl.media_include,
            os.path.join(work, "download", "media"),
            revision=dl.revision,
            max_workers=dl.max_workers,
        )
        archives = [extract.Archive(f.name, f.path) for f in media if f.name.endswith(".zip")]
        others = download.left_out(dl.media_source, dl.media_include, dl.revision)
        left_out = None if others is None else [n for n in others if n.endswith(".zip")]
    seconds["download"] = time.perf_counter() - t

    t = time.perf_counter()
    if dl.media_source:
        extract.ensure_root(root)
    check_root(root)
    limits = extract.Limits(cfg.extract.max_archive_bytes, cfg.extract.max_compression_ratio)
    extracted = extract.extract_all(archives, root, cfg.extract.workers, limits=limits) if archives else []
    seconds["extract"] = time.perf_counter() - t

    prefix = sentinel.media_prefix(root, cfg.materialize.media_prefix)
    checks = cfg.validate_.check_files_exist
    presence = media_presence(root, extracted if dl.media_source else None, left_out) if checks else None
    fp = fingerprint(cfg, parquets, extracted, root, prefix, presence)
    if life.complete:  # the rule of a rerun here is the fingerprint: inputs and config, not config alone
        info = (storage.completion_info(output) or {}).get("info", {})
        if info.get("fingerprint") == fp:
            metrics = json.loads(storage.read_bytes(storage.join(output, "metrics.json")))
            reuse = f"[bold]paravt data[/]: inputs and config unchanged; reusing the complete output {output}"
            return life.reused(_outputs(output, root, prefix), metrics, message=reuse)
        life.begin(cfg)

    t = time.perf_counter()
    uploaded = False
    if storage.is_s3(prefix) and cfg.materialize.upload_media:
        uploaded = upload_media(root, prefix, extracted)
    seconds["upload_media"] = time.perf_counter() - t

    t = time.perf_counter()
    staging = os.path.join(work, "staging") if storage.is_s3(output) else output
    if storage.is_s3(output):
        shutil.rmtree(staging, ignore_errors=True)
    target = Target(
        prefix=prefix,
        checker=FileChecker(root) if checks else None,
        presence=presence,
        check_structure=cfg.validate_.check_structure,
    )
    reports = _materialize_all(parquets, staging, target, cfg)
    _publish(reports, staging, output)
    seconds["materialize"] = time.perf_counter() - t

    media_info: dict[str, Any] = {
        "root": root,
        "prefix": prefix,
        "presence": _presence_info(presence, left_out),
        "archives": [
            {"name": a.name, "members": a.members, "bytes": a.bytes, "reused": a.skipped} for a in extracted
        ],
        "uploaded": uploaded,
    }
    audit = build_audit(reports, cfg.validate_.max_bad_fraction, extra={"media": media_info})
    print_audit(audit, console)
    totals = audit["totals"]
    seconds["total"] = time.perf_counter() - started
    metrics = {
        "rows": totals["rows"],
        "kept": totals["kept"],
        "rejected": totals["rejected"],
        "invalid_rows": totals["invalid_rows"],
        "missing_file_rows": totals["missing_file_rows"],
        "skipped_not_downloaded": totals["skipped_not_downloaded"],
        "question_type_defaulted": totals["question_type_defaulted"],
        "bad_fraction": totals["bad_fraction"],
        "sft_rows": sum(r.kept for r in reports if r.kind == "sft"),
        "rl_rows": sum(r.kept for r in reports if r.kind == "rl"),
        "files": len(reports),
        "archives": len(extracted),
        "archives_extracted": sum(not a.skipped for a in extracted),
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
    }
    audit_uri = storage.join(output, "audit.json")
    storage.write_bytes(audit_uri, json.dumps(audit, indent=2).encode())
    storage.write_bytes(storage.join(output, "metrics.json"), json.dumps(metrics, indent=2).encode())
    check_gate(audit, output)
    result = life.done(_outputs(output, root, prefix), metrics, fingerprint=fp)
    console.print(f"[bold]paravt data[/]: {totals['kept']} rows materialized into {output}")
    return result
