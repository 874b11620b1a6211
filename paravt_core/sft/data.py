"""The SFT input pipeline: rows of the data stage's parquets -> samples, in a deterministic, resumable order.

Order. The rows form an endless stream of *global indices* ``g = epoch * n_rows + k``; position ``k`` of an
epoch is row ``permutation(seed, epoch)[k]``. Rank ``r`` of ``M`` takes the indices with ``g % M == r``, so
the split never depends on timing, and the same seed gives the same order on any machine.

Position. A row is *done* once it was trained in an optimizer step or dropped (bad row, too long).
:class:`StreamPosition` holds the done set compactly (every index below ``next_index`` plus the few done
ones after it). A resumed run skips exactly the done rows: nothing is replayed or skipped, on any number
of ranks. Rows that sat in the packer's open sequences at checkpoint time are saved with it and put back
into the same sequences on resume (same rank count), so a resumed run packs exactly as an uninterrupted
one.

Workers. ``torch.utils.data.DataLoader`` with ``num_workers`` processes and ``prefetch_factor`` turns
indices into samples in parallel and hands them back in order. The parquet columns are read once into
Arrow buffers before the workers fork (shared copy-on-write, nothing per row in Python objects).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from paravt_core import storage
from paravt_core.sft.inputs import BadRow, MediaSpec, encode_row, media_parts, parse_messages
from paravt_core.sft.packing import Sample
from paravt_core.user_errors import ParavtUserError


class SftDataError(ParavtUserError, RuntimeError):
    """The input cannot be used (missing, incomplete, empty); the message is complete for the user."""


# ------------------------------------------------------------------------------------------ files


def sft_files(input_uri: str, include: list[str]) -> list[str]:
    """The SFT parquets of a complete data-stage output, sorted by name (local paths or s3 URIs)."""
    if not storage.is_complete(input_uri):
        raise SftDataError(
            f"{input_uri} is not a complete `paravt data` output (no {storage.COMPLETE_MARKER}); run the data "
            "stage first or point data.input at its output"
        )
    files = [
        u
        for u in storage.list_uris(storage.join(input_uri, "sft"), suffix=".parquet")
        if any(fnmatch.fnmatch(u.rsplit("/", 1)[-1], pat) for pat in include)
    ]
    if not files:
        raise SftDataError(f"no SFT parquet under {storage.join(input_uri, 'sft')} matches {include}")
    return sorted(files)


def read_rows(files: list[str]) -> tuple[pa.ChunkedArray, list[str]]:
    """``messages`` of every row (Arrow, in file order) and a row id per row (``id`` column or file:row)."""
    columns, ids = [], []
    for uri in files:
        path = storage.local_copy(uri) if storage.is_s3(uri) else uri
        try:
            schema = pq.read_schema(path)
        except (pa.ArrowException, OSError) as err:  # truncated, overwritten, not a parquet at all
            raise SftDataError(f"{uri}: not a readable parquet file ({err}); rerun `paravt data`") from err
        if "messages" not in schema.names:
            raise SftDataError(f"{uri} has no 'messages' column (columns: {', '.join(schema.names)})")
        wanted = ["messages"] + (["id"] if "id" in schema.names else [])
        try:
            table = pq.read_table(path, columns=wanted)
        except (pa.ArrowException, OSError) as err:  # a valid footer over damaged pages
            raise SftDataError(f"{uri}: not a readable parquet file ({err}); rerun `paravt data`") from err
        columns.extend(table.column("messages").chunks)
        name = os.path.basename(uri)
        if "id" in wanted:
            ids += [f"{name}:{v}" for v in table.column("id").to_pylist()]
        else:
            ids += [f"{name}:{i}" for i in range(table.num_rows)]
    if not ids:
        raise SftDataError(f"the SFT parquets hold no rows: {files}")
    return pa.chunked_array(columns, type=columns[0].type), ids


def scan_rows(messages: pa.ChunkedArray, row_ids: list[str]) -> list[Dropped]:
    """The rows that can be known bad before a model is loaded: ``messages`` that do not parse (the same
    :func:`parse_messages` the training feed uses) and local media that does not exist. Decoding, token
    lengths and ``s3://`` media are left to the feed (they need the processor, or a request per file)."""
    bad: list[Dropped] = []
    for row, row_id in enumerate(row_ids):
        try:
            parsed = parse_messages(messages[row].as_py())
        except BadRow as err:
            bad.append(Dropped(row, row_id, err.reason, err.detail))
            continue
        for kind, url in media_parts(parsed):
            path = url.removeprefix("file://")
            if "://" not in path and not os.path.isfile(path):
                bad.append(Dropped(row, row_id, "missing_media", f"{kind} {url} does not exist"))
                break
    return bad


# ------------------------------------------------------------------------------------------ order


def epoch_order(seed: int, epoch: int, n_rows: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(n_rows)


@dataclass
class StreamPosition:
    """Done global indices: all below ``next_index``, plus ``done_after`` (sorted, all > next_index)."""

    next_index: int = 0
    done_after: list[int] = field(default_factory=list)

    def mark(self, indices: Iterable[int]) -> None:
        done = set(self.done_after)
        done.update(i for i in indices if i >= self.next_index)
        while self.next_index in done:
            done.remove(self.next_index)
            self.next_index += 1
        self.done_after = sorted(done)

    def is_done(self, index: int) -> bool:
        return index < self.next_index or index in set(self.done_after)

    def to_dict(self) -> dict[str, Any]:
        return {"next_index": self.next_index, "done_after": list(self.done_after)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StreamPosition:
        return cls(int(data["next_index"]), [int(i) for i in data["done_after"]])


class RankIndices(Sampler[int]):
    """Endless global indices of one rank, from a position, skipping done rows and ``exclude``."""

    def __init__(self, position: StreamPosition, rank: int, world: int, exclude: Iterable[int] = ()):
        self.start = position.next_index
        self.skip = set(position.done_after) | set(exclude)
        self.rank = rank
        self.world = world

    def __iter__(self) -> Iterator[int]:
        g = self.start + (self.rank - self.start) % self.world  # first index of this rank at or after start
        while True:
            if g not in self.skip:
                yield g
            g += self.world


# ------------------------------------------------------------------------------------------ dataset


@dataclass
class Dropped:
    """A row that did not become a sample, and why (``BadRow.reason``)."""

    index: int
    row_id: str
    reason: str
    detail: str


class SftRows(Dataset):
    """Global stream index -> ``Sample`` (or ``Dropped``); safe to use from forked worker processes."""

    def __init__(
        self,
        messages: pa.ChunkedArray,
        row_ids: list[str],
        processor: Any,
        model_config: Any,
        spec: MediaSpec,
        seed: int,
    ):
        self.messages = messages
        self.row_ids = row_ids
        self.processor = processor
        self.model_config = model_config
        self.spec = spec
        self.seed = seed
        self._orders: dict[int, np.ndarray] = {}

    @property
    def n_rows(self) -> int:
        return len(self.row_ids)

    def row_of(self, index: int) -> int:
        epoch, k = divmod(index, self.n_rows)
        order = self._orders.get(epoch)
        if order is None:
            order = self._orders[epoch] = epoch_order(self.seed, epoch, self.n_rows)
            for old in [e for e in self._orders if e < epoch - 1]:
                del self._orders[old]
        return int(order[k])

    def __len__(self) -> int:  # one epoch; the sampler decides how far the stream goes
        return self.n_rows

    def __getitem__(self, index: int) -> Sample | Dropped:
        row = self.row_of(index)
        row_id = self.row_ids[row]
        try:
            value = self.messages[row].as_py()
            return encode_row(value, self.processor, self.model_config, self.spec, index=index, row_id=row_id)
        except BadRow as bad:
            return Dropped(index, row_id, bad.reason, bad.detail)


def _identity(item: Any) -> Any:
    return item


def sample_stream(
    dataset: SftRows, sampler: Sampler[int], num_workers: int, prefetch_factor: int
) -> Iterator[Sample | Dropped]:
    """Samples in the sampler's order, made by ``num_workers`` processes (0: in this process)."""
    loader = DataLoader(
        dataset,
        batch_size=None,
        sampler=sampler,
        num_workers=num_workers,
        prefetch_factor=prefetch_factor if num_workers else None,
        collate_fn=_identity,
        worker_init_fn=_worker_init if num_workers else None,
        multiprocessing_context="fork" if num_workers else None,
    )
    return iter(loader)


def _worker_init(_: int) -> None:
    torch.set_num_threads(1)  # decoding + processor per row; parallelism comes from the workers
