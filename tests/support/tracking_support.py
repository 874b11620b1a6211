"""Shared by several test modules (from tests/contract/test_tracking.py, where it was first written)."""

from __future__ import annotations

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto.event_pb2 import Event

from paravt_core.tracking.tensorboard import event_files


def scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series as TensorBoard's reader sees it (its restart purges applied)."""
    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def raw_points(logdir: Path) -> list[tuple[str, int]]:
    """Every (tag, step) written in the files, duplicates included (no reader's purge)."""
    out = []
    for path in event_files(logdir):
        for event in map(Event.FromString, RawEventFileLoader(str(path)).Load()):
            if event.HasField("summary"):
                out += [(v.tag, event.step) for v in event.summary.value]
    return out
