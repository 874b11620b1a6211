"""SFT input pipeline: deterministic order, rank split, saved position (no replay, no skip), workers."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from paravt_core import storage
from paravt_core.models import Loaded
from paravt_core.sft.data import (
    Dropped,
    RankIndices,
    SftDataError,
    SftRows,
    StreamPosition,
    epoch_order,
    read_rows,
    sample_stream,
    sft_files,
)
from paravt_core.sft.inputs import MediaSpec
from paravt_core.sft.packing import Sample
from tests.support.sft_support import multi_call_row


def test_position_marks_compactly() -> None:
    pos = StreamPosition()
    pos.mark([0, 1, 3, 5])
    assert pos.to_dict() == {"next_index": 2, "done_after": [3, 5]}
    pos.mark([2, 4])  # 0..5 all done now
    assert pos.to_dict() == {"next_index": 6, "done_after": []}
    assert StreamPosition.from_dict(pos.to_dict()) == pos


def test_rank_split_and_resume_on_another_rank_count() -> None:
    # Two ranks: rank 0 takes even indices, rank 1 odd ones.
    assert list(itertools.islice(RankIndices(StreamPosition(), 0, 2), 4)) == [0, 2, 4, 6]
    assert list(itertools.islice(RankIndices(StreamPosition(), 1, 2), 4)) == [1, 3, 5, 7]
    # Rank 0 trained 0, 2, 4, 8 and 6 waits in its open sequence; rank 1 trained 1, 3, 5 and 7 waits in
    # its open sequence.
    pos = StreamPosition()
    pos.mark([0, 2, 4, 8, 1, 3, 5])
    assert pos.to_dict() == {"next_index": 6, "done_after": [8]}
    # Resumed with another rank count (1): the waiting rows are simply not done, so they come
    # back through the stream; nothing done is replayed and nothing is skipped.
    assert list(itertools.islice(RankIndices(pos, 0, 1), 4)) == [6, 7, 9, 10]
    # Same rank count: the waiting rows go back into their sequences, so the streams skip them.
    assert list(itertools.islice(RankIndices(pos, 1, 2, exclude=[6, 7]), 3)) == [9, 11, 13]
    assert list(itertools.islice(RankIndices(pos, 0, 2, exclude=[6, 7]), 3)) == [10, 12, 14]


def test_epoch_order_is_a_seeded_permutation() -> None:
    a, b = epoch_order(0, 0, 10), epoch_order(0, 1, 10)
    assert sorted(a.tolist()) == list(range(10)) and sorted(b.tolist()) == list(range(10))
    assert a.tolist() != b.tolist()  # a fresh order per epoch
    assert epoch_order(0, 0, 10).tolist() == a.tolist()  # same seed, same order


def _data_output(tmp: Path, messages: list[str]) -> str:
    out = tmp / "data"
    (out / "sft").mkdir(parents=True)
    ids = [f"r{i}" for i in range(len(messages))]
    pq.write_table(pa.table({"id": ids, "messages": messages}), out / "sft" / "paravt_sft_x_1.parquet")
    storage.mark_complete(str(out))
    return str(out)


def test_input_must_be_a_complete_data_output(tmp_path: Path) -> None:
    with pytest.raises(SftDataError, match="not a complete `paravt data` output"):
        sft_files(str(tmp_path), ["*.parquet"])


def test_workers_return_samples_in_stream_order(tiny_model: Loaded, tmp_path: Path) -> None:
    good = json.dumps(multi_call_row())
    out = _data_output(tmp_path, [good, "{broken", good, good])
    messages, ids = read_rows(sft_files(out, ["*.parquet"]))
    assert ids == [f"paravt_sft_x_1.parquet:r{i}" for i in range(4)]
    rows = SftRows(messages, ids, tiny_model.processor, tiny_model.config, MediaSpec(), seed=3)
    stream = sample_stream(rows, RankIndices(StreamPosition(), 0, 1), num_workers=2, prefetch_factor=2)
    got = list(itertools.islice(stream, 8))  # two epochs
    assert [g.index for g in got] == list(range(8))
    for g in got:
        row = rows.row_of(g.index)
        if row == 1:
            assert isinstance(g, Dropped) and g.reason == "messages_not_json"
        else:
            assert isinstance(g, Sample) and g.row_id == ids[row]
    # epoch e visits rows in the seeded order of that epoch
    assert [rows.row_of(i) for i in range(4)] == epoch_order(3, 0, 4).tolist()
    assert [rows.row_of(i) for i in range(4, 8)] == epoch_order(3, 1, 4).tolist()


@pytest.mark.parametrize(
    ("world", "expected"),
    [
        # next_index 7 (odd), 2 ranks: rank r takes g % 2 == r from 7 on -> rank 0: 8, 10, 12; rank 1: 7, 9, 11
        (2, [[8, 10, 12], [7, 9, 11]]),
        # 3 ranks: rank 0: 9, 12, 15; rank 1: 7, 10, 13; rank 2: 8, 11, 14
        (3, [[9, 12, 15], [7, 10, 13], [8, 11, 14]]),
    ],
)
def test_resume_from_an_odd_position_gives_each_rank_its_own_rows(world: int, expected: list) -> None:
    pos = StreamPosition()
    pos.mark(range(7))  # rows 0..6 trained: resume at 7
    assert pos.next_index == 7
    got = [list(itertools.islice(RankIndices(pos, r, world), 3)) for r in range(world)]
    assert got == expected
    assert got[0] != got[1]  # never the same rows on two ranks
