"""Exactly-once records: append + fsync per sample, torn-tail repair, duplicates refused, stable shards."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import resource
import signal
import stat
import subprocess
import sys
from pathlib import Path

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


@pytest.mark.parametrize(
    "tail",
    [
        b'{"id": "c", "sco',
        b'{"id": "c", "score"\n',
        b"garbage\n",
        b'{"id": "c", "score" \t\n',  # blanks before the newline belong to the torn line too
        b'{"id": "c", "label": "X\n',  # ends in a letter that is not a newline
    ],
)
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
    assert parse_shard("0/4") == (0, 4)  # shards count from 0
    assert parse_shard("0/1") == (0, 1)  # one shard: the whole run
    for bad in ("4/4", "-1/2", "x", "1/0"):
        with pytest.raises(RecordError):
            parse_shard(bad)


def test_parse_shard_errors_say_what_was_given():
    with pytest.raises(RecordError, match=r"^shard 'x' is not of the form i/n \(e\.g\. 0/4\)$"):
        parse_shard("x")
    with pytest.raises(RecordError, match=r"^shard '4/4': need 0 <= i < n$"):
        parse_shard("4/4")


def test_read_records_keeps_lines_after_a_blank_or_unreadable_one(tmp_path, caplog):
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"id": "a"}\n\n{"id": "b"}\nnot json\n{"id": "c"}\n')
    with caplog.at_level(logging.WARNING, logger="paravt_core.eval.records"):
        assert read_records(path) == [{"id": "a"}, {"id": "b"}, {"id": "c"}]
    # the damaged line is named (line 4: the blank line 2 counts), once
    assert [r.getMessage() for r in caplog.records] == [
        f"{path} line 4 is not JSON: skipped, its sample counts as not done"
    ]
    assert read_records(tmp_path / "missing.jsonl") == []


def test_read_records_ignores_a_torn_last_line_without_a_word(tmp_path, caplog):
    # a crash mid-write leaves a last line with no newline; that is expected, not damage
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"id": "a"}\n{"id": "b", "sco')
    with caplog.at_level(logging.WARNING, logger="paravt_core.eval.records"):
        assert read_records(path) == [{"id": "a"}]
    assert caplog.records == []


def test_sample_log_creates_missing_parent_directories(tmp_path):
    path = tmp_path / "protocol" / "bench" / "s.jsonl"
    with SampleLog(path) as log:
        assert log.repaired_bytes == 0  # a new log has nothing to repair
        log.append({"id": "a"})
    assert path.read_bytes() == b'{"id": "a"}\n'


def test_a_new_log_is_rw_r__r__(tmp_path):
    old = os.umask(0o022)  # the usual umask; the mode asked for is 0o644, so the umask removes nothing
    try:
        SampleLog(tmp_path / "s.jsonl").close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "s.jsonl").st_mode) == 0o644


@pytest.mark.parametrize("content", [b"", b'{"id": "a"}\n'])
def test_reopening_an_empty_or_one_line_log(tmp_path, content):
    path = tmp_path / "s.jsonl"
    path.write_bytes(content)  # a crash before the first append / after the first one
    with SampleLog(path) as log:
        assert log.repaired_bytes == 0
        log.append({"id": "b"})
    assert path.read_bytes() == content + b'{"id": "b"}\n'


def test_opening_a_complete_log_leaves_the_file_untouched(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"id": "a"}\n{"id": "b"}\n')
    os.utime(path, ns=(10**18, 10**18))  # 2001-09-09: any write or truncate would move the mtime to now
    with SampleLog(path) as log:
        assert log.repaired_bytes == 0
    assert path.read_bytes() == b'{"id": "a"}\n{"id": "b"}\n'
    assert os.stat(path).st_mtime_ns == 10**18


def test_append_keeps_records_and_refuses_an_id_it_just_wrote(tmp_path):
    with SampleLog(tmp_path / "s.jsonl") as log:
        log.append({"id": "a", "score": 1.0})
        log.append({"id": "b", "score": 0.0})
        assert log.records == [{"id": "a", "score": 1.0}, {"id": "b", "score": 0.0}]
        assert log.done == {"a", "b"}
        with pytest.raises(RecordError, match=r"sample 'a' is already recorded in .*s\.jsonl"):
            log.append({"id": "a", "score": 0.5})


def test_append_writes_utf8_text_and_non_json_values_as_strings(tmp_path):
    path = tmp_path / "s.jsonl"
    with SampleLog(path) as log:
        log.append({"id": "q1", "answer": "café", "video": Path("/data/v 1.mp4")})
    # UTF-8 on disk, not \u00e9 escapes (a person greps the log); a Path is written as its text
    assert path.read_bytes() == b'{"id": "q1", "answer": "caf\xc3\xa9", "video": "/data/v 1.mp4"}\n'


def test_a_short_write_raises_and_the_next_open_cuts_the_torn_piece(tmp_path):
    # A real short write: with the file size limit at 30 bytes, Linux writes the first 30 bytes of the line
    # and returns 30 (write(2), EFBIG only once the file is already at the limit).
    path = tmp_path / "s.jsonl"
    record = {"id": "a", "text": "x" * 50}  # '{"id": "a", "text": "' (21) + 50 + '"}\n' (3) = 74 bytes
    log = SampleLog(path)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (30, hard))
        with pytest.raises(RecordError) as err:
            log.append(record)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
    assert str(err.value) == f"short write to {path} (30 of 74 bytes)"
    assert log.done == set() and log.records == []  # the sample did not finish
    log.close()
    assert path.stat().st_size == 30
    with SampleLog(path) as log:
        assert log.repaired_bytes == 30 and log.done == set()
        log.append(record)
    assert read_records(path) == [record]


def _open_fds() -> dict[int, str]:
    """This process's descriptors and what they point at (Linux /proc)."""
    out = {}
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the descriptor listdir used, closed by now
            out[int(name)] = os.readlink(f"/proc/self/fd/{name}")
    return out


def test_close_twice_is_safe_and_closes_nothing_else(tmp_path):
    path = tmp_path / "s.jsonl"
    saved_stdout = os.dup(1)
    try:
        with SampleLog(path) as log:
            assert list(_open_fds().values()).count(str(path)) == 1
            log.close()
            assert str(path) not in _open_fds().values()
            before = _open_fds()
            log.close()
            assert _open_fds() == before
        assert _open_fds() == before  # __exit__ closed it a third time
    finally:
        os.dup2(saved_stdout, 1)
        os.close(saved_stdout)


def test_a_log_opened_on_descriptor_0_is_closed(tmp_path):
    # A runner started with stdin closed gets descriptor 0 (the lowest free one) for its log.
    path = tmp_path / "s.jsonl"
    try:
        saved_stdin = os.dup(0)
        os.close(0)
    except OSError:  # pytest itself was started with stdin closed
        saved_stdin = None
    try:
        log = SampleLog(path)
        assert os.fstat(0).st_ino == os.stat(path).st_ino  # the log holds descriptor 0
        log.close()
        with pytest.raises(OSError):
            os.fstat(0)
    finally:
        if saved_stdin is not None:
            os.dup2(saved_stdin, 0)
            os.close(saved_stdin)


def test_shards_do_not_depend_on_pythonhashseed() -> None:
    """Two processes with different hash seeds (salted ``hash()`` would differ) give the same shards."""
    code = "import json; from paravt_core.eval.records import shard_of; print(json.dumps([shard_of(f'q{i}', 4) for i in range(64)]))"  # fmt: skip
    runs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
        )
        runs.append(json.loads(out.stdout))
    assert runs[0] == runs[1] == [shard_of(f"q{i}", 4) for i in range(64)]
    # Worked out with coreutils' sha256sum: the first 8 bytes as a big-endian integer, mod 4, is the 16th
    # hex digit mod 4 (16^k is divisible by 4 for k >= 1). q0: 341c0a3e67c31467 -> 7 % 4 = 3;
    # q1: ...ae52 -> 2; q2: ...9063 -> 3; q3: ...d9cf -> 15 % 4 = 3; q4: ...5df3 -> 3; q5: ...e7cd -> 13 % 4 = 1;
    # q6: ...0ac1 -> 1; q7: ...68cf -> 3.
    assert runs[0][:8] == [3, 2, 3, 3, 3, 1, 1, 3]
