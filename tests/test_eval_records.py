"""Exactly-once records: append + fsync per sample, torn-tail repair, duplicates refused, stable shards."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from paravt_core.eval.records import RecordError, SampleLog, parse_shard, read_records, shard_of


def test_append_reopen_skips_done(tmp_path):
    path = tmp_path / "s.jsonl"
    with SampleLog(path) as log:
        log.append({"id": "a", "score": 1.0})
        log.append({"id": "b", "score": 0.0})
    with SampleLog(path) as log:
        assert log.done == {"a", "b"}
        with pytest.raises(RecordError, match="already recorded"):
            log.append({"id": "a", "score": 0.5})
    assert [r["id"] for r in read_records(path)] == ["a", "b"]


@pytest.mark.parametrize("tail", [b'{"id": "c", "sco', b'{"id": "c", "score"\n', b"garbage\n"])
def test_torn_last_line_is_cut_on_open(tmp_path, tail):
    path = tmp_path / "s.jsonl"
    good = b'{"id": "a"}\n{"id": "b"}\n'
    path.write_bytes(good + tail)
    with SampleLog(path) as log:
        assert log.done == {"a", "b"}
        assert log.repaired_bytes == len(tail)
        log.append({"id": "c"})
    assert path.read_bytes() == good + b'{"id": "c"}\n'


def test_a_file_with_duplicate_ids_is_refused(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"id": "a"}\n{"id": "a"}\n')
    with pytest.raises(RecordError, match="same sample id twice"):
        SampleLog(path)


def test_shards_are_stable_across_processes_and_cover_every_id():
    ids = [f"q{i}" for i in range(200)]
    here = [shard_of(i, 4) for i in ids]
    code = "import sys, json; from paravt_core.eval.records import shard_of; " + (
        "print(json.dumps([shard_of(f'q{i}', 4) for i in range(200)]))"
    )
    other = json.loads(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    )
    assert here == other
    assert set(here) == {0, 1, 2, 3}  # 200 ids over 4 shards: every shard gets some


def test_parse_shard():
    assert parse_shard("2/4") == (2, 4)
    for bad in ("4/4", "-1/2", "x", "1/0"):
        with pytest.raises(RecordError):
            parse_shard(bad)
