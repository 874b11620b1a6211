"""TensorBoard event files under ``<output>/tensorboard/``, written with torch's ``SummaryWriter``.

A local output is written in place. An ``s3://`` output is written in a local directory and copied to
``<output>/tensorboard/`` at each checkpoint and at the end (``sync``); a resumed run on a fresh pod
starts from that copy. Exactly once per step after a kill and a resume: the events of steps after the
checkpoint the run resumes from are removed from the files (``compact``: they are rewritten into one file
holding the steps up to it), and the new writer starts with TensorBoard's own restart marker
(``purge_step``), so a reader that still sees an older file drops those steps too.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from paravt_core import storage

EVENTS = "events.out.tfevents."


def event_files(local: str | Path) -> list[Path]:
    """The event files of ``local`` in the order TensorBoard reads them (by name: creation time first)."""
    root = Path(local)
    return sorted(p for p in root.iterdir() if p.name.startswith(EVENTS)) if root.is_dir() else []


def _events(path: Path) -> list[Any]:
    """The events of one file as written (the raw loader: ``EventFileLoader`` would migrate the scalars into
    tensor summaries, which the legacy ``EventAccumulator`` does not list as scalars); a record cut short by
    a kill ends the file."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto.event_pb2 import Event

    return [Event.FromString(raw) for raw in RawEventFileLoader(str(path)).Load()]


def compact(local: str | Path, keep_through: int) -> int:
    """Rewrite the event files of ``local`` into one that holds every summary of a step <= ``keep_through``
    once (per tag and step: the first written; restart markers and file headers left out), then delete the
    old files. Returns the number of summary values dropped. The new file is complete before any old one is
    deleted, so a kill in between leaves duplicates that the next compaction removes."""
    from torch.utils.tensorboard.writer import FileWriter

    files = event_files(local)
    if not files:
        return 0
    kept: list[Any] = []
    seen: set[tuple[str, int]] = set()
    dropped = 0
    for path in files:
        for event in _events(path):
            if not event.HasField("summary"):
                continue  # file_version header, SessionLog restart markers: the writer adds its own
            values = [v for v in event.summary.value if (v.tag, event.step) not in seen]
            dropped += len(event.summary.value) - len(values)
            if event.step > keep_through:
                dropped += len(values)
                continue
            seen.update((v.tag, event.step) for v in values)
            del event.summary.value[:]
            event.summary.value.extend(values)
            if values:
                kept.append(event)
    writer = FileWriter(str(local), filename_suffix=".compacted")
    for event in kept:
        writer.add_event(event, walltime=event.wall_time)
    writer.close()
    new = set(event_files(local)) - set(files)
    for path in files:
        if path not in new:
            path.unlink()
    return dropped


class TensorBoardBackend:
    """One run's TensorBoard writer; ``resume_step``: the steps already done (a checkpoint's), 0: a new run."""

    def __init__(self, output: str, work_dir: str, resume_step: int):
        from torch.utils.tensorboard import SummaryWriter

        self.remote = storage.join(output, "tensorboard")
        self.is_remote = storage.is_s3(output)
        self.local = os.path.join(work_dir, "tensorboard") if self.is_remote else self.remote
        if self.is_remote:  # start from what the last checkpoint uploaded, not from a stale local copy
            shutil.rmtree(self.local, ignore_errors=True)
            if storage.list_uris(self.remote):
                storage.download_dir(self.remote, self.local)
        os.makedirs(self.local, exist_ok=True)
        self.dropped = compact(self.local, resume_step)
        self.writer = SummaryWriter(self.local, purge_step=resume_step + 1 if resume_step else None)

    def log(self, step: int, scalars: dict[str, float]) -> None:
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()  # one write per logged step: TensorBoard shows the step now, not in 2 minutes

    def text(self, step: int, tag: str, text: str) -> None:
        self.writer.add_text(tag, text, step)

    def sync(self) -> None:
        """Flush; with an s3:// output, copy the files up and delete the ones compaction replaced."""
        self.writer.flush()
        if not self.is_remote:
            return
        written = set(storage.upload_dir(self.local, self.remote))
        for uri in storage.list_uris(self.remote):
            if uri not in written:
                storage.delete(uri)

    def close(self, final_uri: str = "") -> None:
        self.writer.close()
        self.sync()
