"""The nightly eval's trend in TensorBoard: one point per night per benchmark and protocol, under
``<results_prefix>/tensorboard/``, beside the nights' summaries (``nights/*.json``).

The report stage rewrites the directory from every night's summary each night (a fresh event file, then
the old ones deleted), so a rerun of a night, or a night that failed and was evaluated again, holds its
point once. The step is the night's day number (days since 1970-01-01, so the nights are evenly spaced)
and the wall time its midnight (UTC): TensorBoard's "wall" axis shows the dates.
"""

from __future__ import annotations

import tempfile
from datetime import UTC, date, datetime

from paravt_core import storage

EPOCH = date(1970, 1, 1)


def day_number(night: str) -> int:
    return (date.fromisoformat(night) - EPOCH).days


def write_nightly(results_prefix: str, points: list[tuple[str, str, float]]) -> str:
    """``points``: (night ``YYYY-MM-DD``, tag, value). Returns the log directory's URI."""
    from torch.utils.tensorboard import SummaryWriter

    remote = storage.join(results_prefix, "tensorboard")
    with tempfile.TemporaryDirectory(prefix="paravt-nightly-tb-") as local:
        writer = SummaryWriter(local)
        for night, tag, value in sorted(points):
            midnight = datetime.fromisoformat(night).replace(tzinfo=UTC).timestamp()
            writer.add_scalar(tag, value, day_number(night), walltime=midnight)
        writer.close()
        written = set(storage.upload_dir(local, remote))
    for uri in storage.list_uris(remote):
        if uri not in written:
            storage.delete(uri)
    return remote
