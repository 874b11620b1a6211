"""Materialize: sentinel paths rewritten columnar, other columns and schema kept, bad rows set aside."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from paravt_core.data import sentinel, validate
from paravt_core.data.materialize import (
    Target,
    materialize_file,
    process_batch,
    rewrite_messages_json,
    rewrite_messages_obj,
    rewrite_videos,
)
from paravt_core.data.validate import DataError, FileChecker, cut_strings
from tests.data_support import RL_SCHEMA, media_urls, messages, rl_table, sft_table
from tests.test_data_validate import MESSAGE_TYPE


def test_json_rewrite_exact_output() -> None:
    row = '[{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "selfqa/a.mp4"}}]}]'
    out = rewrite_messages_json(pa.array([row]), "/m")
    assert out.column.to_pylist() == [row.replace('"selfqa/a.mp4"', '"/m/selfqa/a.mp4"')]
    assert out.refs.paths.to_pylist() == ["selfqa/a.mp4"] and out.refs.rows.tolist() == [0]
    assert out.python_rows == 0


def test_json_rewrite_every_form_decodes_to_the_same_paths() -> None:
    base = messages("longvt_source/videor1_0/v.mp4", "museg/charades/f.jpg")
    rows = [
        json.dumps(base),  # canonical: columnar
        json.dumps(base, separators=(",", ":")),  # compact: Python path
        json.dumps(base).replace("charades/f.jpg", "charades\\/f.jpg"),  # escaped slash: Python path
        json.dumps(base).replace('"longvt_source/', '"file://longvt_source/'),  # release-style prefix
        None,
        json.dumps(messages(None)),  # no media at all
    ]
    prefix = '/data/my "media"'  # a quote in the prefix must come out JSON-escaped
    out = rewrite_messages_json(pa.array(rows, pa.string()), prefix)
    expected = [f"{prefix}/longvt_source/videor1_0/v.mp4", f"{prefix}/museg/charades/f.jpg"]
    decoded = [json.loads(v) if v is not None else None for v in out.column.to_pylist()]
    for i in range(4):
        assert media_urls(decoded[i]) == expected, i
    assert decoded[4] is None
    assert decoded[5] == messages(None)
    assert out.python_rows == 2  # compact and escaped rows only
    assert sorted(set(out.refs.rows.tolist())) == [0, 1, 2, 3]


def test_json_rewrite_reports_bad_paths_and_keeps_text() -> None:
    rows = [
        json.dumps(messages("selfqa/../../etc/passwd")),
        json.dumps(messages("/abs/video.mp4")),
        json.dumps(messages("")),
        json.dumps(messages("selfqa/ok.mp4")),
    ]
    out = rewrite_messages_json(pa.array(rows), "/m")
    assert out.refs.path_reasons(4).tolist() == [12, 13, 14, 0]  # escapes, not sentinel, empty, ok


def test_text_that_mentions_url_is_not_touched() -> None:
    msgs = messages("selfqa/a.mp4")
    msgs[1]["content"].append({"type": "text", "text": 'he typed "url": "selfqa/x.mp4" here'})
    out = rewrite_messages_json(pa.array([json.dumps(msgs)]), "/m")
    decoded = json.loads(out.column[0].as_py())
    assert decoded[1]["content"][-1]["text"] == 'he typed "url": "selfqa/x.mp4" here'
    assert media_urls(decoded) == ["/m/selfqa/a.mp4"]


def test_rl_videos_rewrite_keeps_type_and_nulls() -> None:
    table = rl_table([["selfqa/a.mp4", "file://museg/charades/b.mp4"], None, []])
    col = table.column("videos").combine_chunks()
    out = rewrite_videos(col, "s3://bucket/media")
    assert out.column.type == RL_SCHEMA.field("videos").type
    assert out.column.to_pylist() == [
        [{"video": "s3://bucket/media/selfqa/a.mp4"}, {"video": "s3://bucket/media/museg/charades/b.mp4"}],
        None,
        [],
    ]
    assert out.refs.rows.tolist() == [0, 0]


def _batch(table: pa.Table) -> pa.RecordBatch:
    return table.combine_chunks().to_batches()[0]


def test_process_batch_splits_good_and_rejected(tmp_path: Path) -> None:
    (tmp_path / "selfqa").mkdir()
    (tmp_path / "selfqa" / "a.mp4").write_bytes(b"x")
    rows = [
        json.dumps(messages("selfqa/a.mp4")),
        "this is not json",
        json.dumps(messages("selfqa/missing.mp4")),
        json.dumps(messages("selfqa/../x.mp4")),
        json.dumps(messages("museg/charades/not_downloaded.mp4")),
        json.dumps(messages("selfqa/a.mp4", assistant=False)),
    ]
    # the selected archives held a.mp4 and missing.mp4; something else was left out of the download
    held = frozenset({"selfqa/a.mp4", "selfqa/missing.mp4"})
    target = Target("/m", FileChecker(str(tmp_path)), presence=sentinel.Presence(held, all_selected=False))
    out = process_batch(_batch(sft_table(rows)), "sft", target, first_row=100)
    assert out.good.column("id").to_pylist() == ["r0"]
    assert media_urls(json.loads(out.good.column("messages")[0].as_py())) == ["/m/selfqa/a.mp4"]
    rejected = out.rejected.to_pydict()
    assert rejected["id"] == ["r1", "r2", "r3", "r5"]
    assert rejected["reason"] == [
        "messages_not_json",
        "missing_file",
        "path_escapes_root",
        "no_assistant_turn",
    ]
    assert rejected["source_row"] == [101, 102, 103, 105]
    assert rejected["messages"][0] == "this is not json"  # rejected rows are kept as they were
    assert out.skipped.tolist() == [False, False, False, False, True, False]
    assert out.missing == {"selfqa/missing.mp4"}
    assert out.not_downloaded == {"museg/charades/not_downloaded.mp4"}


def test_nested_messages_rewrite(tmp_path: Path) -> None:
    arr = pa.array([messages("selfqa/a.mp4", "selfqa/f.jpg"), messages("x/y.mp4")], MESSAGE_TYPE)
    table = pa.table({"messages": arr, "n": [1, 2]})
    out = process_batch(_batch(table), "sft", Target("/m"))
    assert out.good.schema == table.schema
    good = out.good.column("messages").to_pylist()[0]
    assert [p["video_url"]["url"] for m in good for p in m["content"] if p["video_url"]] == [
        "/m/selfqa/a.mp4"
    ]
    assert [p["image_url"]["url"] for m in good for p in m["content"] if p["image_url"]] == [
        "/m/selfqa/f.jpg"
    ]
    assert out.rejected.column("reason").to_pylist() == ["path_not_sentinel"]


def _write(table: pa.Table, path: Path, row_group_size: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def test_materialize_file_small_batches_keep_order_schema_and_rows(tmp_path: Path) -> None:
    n = 57
    rows = [json.dumps(messages(f"selfqa/v{i}.mp4")) if i % 10 else "{broken" for i in range(n)]
    table = sft_table(rows, ids=[f"id{i}" for i in range(n)]).append_column(
        "extra", pa.array(range(n), pa.int16())
    )
    table = table.replace_schema_metadata({b"origin": b"test"})
    src = _write(table, tmp_path / "in" / "paravt_sft_x_57.parquet", row_group_size=20)
    report = materialize_file(
        str(src), Target("/m"), str(tmp_path / "out/sft/x.parquet"), str(tmp_path / "out/rejected/x.parquet"),
        batch_rows=7, threads=2,
    )  # fmt: skip
    good = pq.read_table(tmp_path / "out/sft/x.parquet")
    bad = pq.read_table(tmp_path / "out/rejected/x.parquet")
    assert good.schema == table.schema  # metadata included
    keep = [i for i in range(n) if i % 10]
    assert good.column("id").to_pylist() == [f"id{i}" for i in keep]
    assert good.column("extra").to_pylist() == keep
    assert [media_urls(json.loads(m)) for m in good.column("messages").to_pylist()] == [
        [f"/m/selfqa/v{i}.mp4"] for i in keep
    ]
    assert bad.column("source_row").to_pylist() == [0, 10, 20, 30, 40, 50]
    assert set(bad.column("reason").to_pylist()) == {"messages_not_json"}
    assert (report.rows, report.kept, report.rejected) == (n, n - 6, 6)
    assert report.reasons == {"messages_not_json": 6}


def test_truncated_parquet_is_named_and_nothing_written(tmp_path: Path) -> None:
    src = _write(sft_table([json.dumps(messages("selfqa/a.mp4"))] * 50), tmp_path / "paravt_sft_a_50.parquet")
    data = src.read_bytes()
    src.write_bytes(data[: len(data) // 2])
    out = tmp_path / "out"
    with pytest.raises(DataError) as err:
        materialize_file(str(src), Target("/m"), str(out / "sft/a.parquet"), str(out / "rejected/a.parquet"))
    assert str(src) in str(err.value) and "not a readable parquet" in str(err.value)
    assert not out.exists() or not any(out.rglob("*"))


def test_corrupt_data_page_names_the_rows_and_leaves_no_file(tmp_path: Path) -> None:
    rows = [json.dumps(messages(f"selfqa/v{i}.mp4")) for i in range(300)]
    src = _write(sft_table(rows), tmp_path / "paravt_sft_b_300.parquet", row_group_size=100)
    meta = pq.ParquetFile(src).metadata
    col = meta.row_group(2).column(1)  # messages of the third row group
    data = bytearray(src.read_bytes())
    start = col.dictionary_page_offset  # the strings of these rows live in the dictionary page
    data[start + 40 : start + 400] = b"\xff" * 360  # garbage inside the page: footer intact, rows unreadable
    src.write_bytes(bytes(data))
    out = tmp_path / "out"
    with pytest.raises(DataError) as err:
        materialize_file(str(src), Target("/m"), str(out / "sft/b.parquet"), str(out / "rejected/b.parquet"),
                         batch_rows=100)  # fmt: skip
    assert str(src) in str(err.value) and "rows from 200" in str(err.value)
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == []


def test_missing_required_column_is_named(tmp_path: Path) -> None:
    table = rl_table([["selfqa/a.mp4"]]).drop_columns(["extra_info"])
    src = _write(table, tmp_path / "paravt_rl_diverse_1.parquet")
    with pytest.raises(DataError) as err:
        materialize_file(str(src), Target("/m"), str(tmp_path / "o.parquet"), str(tmp_path / "r.parquet"))
    assert str(src) in str(err.value) and "extra_info" in str(err.value) and "RL" in str(err.value)


def test_wrong_column_type_is_named_with_rows(tmp_path: Path) -> None:
    table = pa.table(
        {"id": ["a"], "prompt": ["hi"], "videos": ["selfqa/a.mp4"], "extra_info": ['{"answer": "A"}']}
    )
    src = _write(table, tmp_path / "paravt_rl_diverse_1.parquet")
    with pytest.raises(DataError) as err:
        materialize_file(str(src), Target("/m"), str(tmp_path / "o.parquet"), str(tmp_path / "r.parquet"))
    assert str(src) in str(err.value) and "rows 0..0" in str(err.value) and "videos" in str(err.value)


def test_stale_output_removed_when_no_row_is_left(tmp_path: Path) -> None:
    src = _write(sft_table(["nope"]), tmp_path / "paravt_sft_c_1.parquet")
    good = tmp_path / "out/sft/c.parquet"
    good.parent.mkdir(parents=True)
    good.write_bytes(b"old run")
    report = materialize_file(str(src), Target("/m"), str(good), str(tmp_path / "out/rejected/c.parquet"))
    assert report.output is None and not good.exists()
    assert pq.read_table(report.rejected_output).column("reason").to_pylist() == ["messages_not_json"]


@pytest.mark.parametrize("typ", [pa.large_string(), pa.binary()])
def test_other_string_types_keep_their_type(typ: pa.DataType) -> None:
    rows = [json.dumps(messages("selfqa/a.mp4")), json.dumps(messages("selfqa/b.mp4"), separators=(",", ":"))]
    table = pa.table({"messages": pa.array(rows, pa.string()).cast(typ)})
    out = process_batch(_batch(table), "sft", Target("/m"))
    assert out.good.schema == table.schema
    texts = [v.decode() if isinstance(v, bytes) else v for v in out.good.column("messages").to_pylist()]
    assert [media_urls(json.loads(t)) for t in texts] == [["/m/selfqa/a.mp4"], ["/m/selfqa/b.mp4"]]


@pytest.mark.parametrize("views", [True, False])
def test_cut_strings_inline_long_and_empty(views: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not views:
        monkeypatch.setattr(validate, "VIEW_LIMIT", 0)  # force the byte-gather route
    text = "0123456789abcdefghé/selfqa/long-name.mp4"
    data = pa.py_buffer(text.encode())
    # (start, length): empty, 1 byte, exactly 12 (inline), 13 (by reference), a 2-byte char, the tail
    cuts = [(0, 0), (3, 1), (0, 12), (5, 13), (18, 2), (20, len(text.encode()) - 20)]
    out = cut_strings(data, np.array([c[0] for c in cuts]), np.array([c[1] for c in cuts]))
    assert out.type == pa.string()
    assert out.to_pylist() == ["", "3", "0123456789ab", "56789abcdefgh", "é", "/selfqa/long-name.mp4"]


_path_text = st.text(st.sampled_from(list('ab/._-é"\\ 7')), max_size=30)
_paths = st.one_of(
    st.builds(lambda b, rest: b + rest, st.sampled_from(["selfqa/", "museg/charades/", "file://selfqa/", ""]),
              _path_text),
    st.sampled_from(["selfqa/../x.mp4", "/abs/x.mp4", "selfqa/a-very-long-file-name-over-twelve.mp4"]),
)  # fmt: skip
_row = st.lists(st.tuples(_paths, st.booleans()), max_size=4)


def _row_json(refs: list[tuple[str, bool]], compact: bool) -> str:
    msgs = messages(None)
    for path, image in refs:
        kind = "image_url" if image else "video_url"
        msgs[1]["content"].append({"type": kind, kind: {"url": path}})
    return json.dumps(msgs, separators=(",", ":") if compact else None, ensure_ascii=False)


@pytest.mark.parametrize("view_limit", [validate.VIEW_LIMIT, 0])
@given(rows=st.lists(st.tuples(_row, st.booleans()), min_size=1, max_size=6))
def test_columnar_rewrite_agrees_with_python_walk(view_limit: int, rows: list) -> None:
    """Fast path (split + cut + join) == decode, rewrite in Python, encode; paths and statuses too."""
    texts = [_row_json(refs, compact) for refs, compact in rows]
    saved, validate.VIEW_LIMIT = validate.VIEW_LIMIT, view_limit
    try:
        out = rewrite_messages_json(pa.array(texts, pa.string()), '/m "x"')
    finally:
        validate.VIEW_LIMIT = saved
    expected_refs = []
    for i, text in enumerate(texts):
        obj = json.loads(text)
        found = rewrite_messages_obj(obj, '/m "x"')
        expected_refs += [(i, path, status) for path, status in found]
        if all(status == sentinel.OK for _, status in found):  # other rows are rejected, text unused
            assert json.loads(out.column[i].as_py()) == obj, i
    got = sorted(
        zip(out.refs.rows.tolist(), out.refs.paths.to_pylist(), out.refs.status.tolist(), strict=True)
    )
    assert got == sorted(expected_refs)


# ------------------------------------------------------------------------------ several bad paths in a row

ESC, NOT_SENTINEL, EMPTY, GONE, GOOD = "selfqa/../x.mp4", "other/x.mp4", "", "selfqa/gone.mp4", "selfqa/a.mp4"
# The documented priority (validate.Reason: the lower value wins): path_escapes_root (12) before
# path_not_sentinel (13) before path_empty (14) before missing_file (15); structural reasons come first.
# Each case lists a row's paths in an order that a "first wins" or a "last wins" merge gets wrong.
PRIORITY_CASES = [
    ([GONE, EMPTY, NOT_SENTINEL, ESC], "path_escapes_root"),
    ([ESC, GONE, NOT_SENTINEL], "path_escapes_root"),
    ([EMPTY, NOT_SENTINEL, GOOD], "path_not_sentinel"),
    ([GOOD, NOT_SENTINEL, EMPTY], "path_not_sentinel"),
    ([GONE, EMPTY], "path_empty"),
    ([EMPTY, GONE, GOOD], "path_empty"),
    ([GOOD, GONE], "missing_file"),
]


def _media_tree(tmp_path: Path) -> Target:
    (tmp_path / "selfqa").mkdir()
    (tmp_path / "selfqa" / "a.mp4").write_bytes(b"x")
    # everything was downloaded: an absent file is missing
    return Target("/m", FileChecker(str(tmp_path)), presence=sentinel.Presence(frozenset([GOOD]), True))


def test_sft_row_with_several_bad_paths_gets_the_documented_reason(tmp_path: Path) -> None:
    target = _media_tree(tmp_path)
    rows = [_row_json([(p, i % 2 == 1) for i, p in enumerate(paths)], False) for paths, _ in PRIORITY_CASES]
    no_assistant = messages(None, assistant=False)
    no_assistant[1]["content"] += [{"type": "video_url", "video_url": {"url": ESC}}]
    rows.append(json.dumps(no_assistant))  # a structural reason (6) beats any path reason
    out = process_batch(_batch(sft_table(rows)), "sft", target)
    expected = [why for _, why in PRIORITY_CASES] + ["no_assistant_turn"]
    assert out.rejected.column("reason").to_pylist() == expected
    assert out.good.num_rows == 0


def test_rl_row_with_several_bad_paths_gets_the_documented_reason(tmp_path: Path) -> None:
    target = _media_tree(tmp_path)
    table = rl_table([paths for paths, _ in PRIORITY_CASES])
    out = process_batch(_batch(table), "rl", target)
    assert out.rejected.column("reason").to_pylist() == [why for _, why in PRIORITY_CASES]


# ------------------------------------------------------------------------------ question_type defaults to oe

_EXTRA = pa.struct([("answer", pa.string()), ("question_type", pa.string())])


def _rl_with_extra(extra: pa.Array) -> pa.RecordBatch:
    n = len(extra)
    table = pa.table(
        {
            "prompt": [[{"role": "user", "content": "<video> Which?"}]] * n,
            "videos": [[{"video": "selfqa/a.mp4"}]] * n,
            "extra_info": extra,
        }
    )
    return _batch(table)


def test_struct_question_type_null_or_empty_becomes_oe_and_is_counted() -> None:
    extra = pa.array(
        [
            {"answer": "A", "question_type": "mcq"},
            {"answer": "x", "question_type": None},
            {"answer": "y", "question_type": ""},
            {"answer": "1, 2", "question_type": "tvg"},
            {"answer": None, "question_type": None},  # rejected for the answer: not counted
        ],
        _EXTRA,
    )
    out = process_batch(_rl_with_extra(extra), "rl", Target("/m"))
    assert out.good.column("extra_info").to_pylist() == [
        {"answer": "A", "question_type": "mcq"},
        {"answer": "x", "question_type": "oe"},
        {"answer": "y", "question_type": "oe"},
        {"answer": "1, 2", "question_type": "tvg"},
    ]
    assert out.good.schema.field("extra_info").type == _EXTRA  # the schema is kept
    assert out.rejected.column("reason").to_pylist() == ["extra_info_missing_answer"]
    assert out.question_type_defaulted == 2


def test_struct_without_question_type_field_gains_it() -> None:
    extra = pa.array([{"answer": "A"}, {"answer": "B"}], pa.struct([("answer", pa.string())]))
    out = process_batch(_rl_with_extra(extra), "rl", Target("/m"))
    assert out.good.column("extra_info").to_pylist() == [
        {"answer": "A", "question_type": "oe"},
        {"answer": "B", "question_type": "oe"},
    ]
    assert out.question_type_defaulted == 2


def test_json_question_type_missing_becomes_oe_other_keys_kept() -> None:
    extra = pa.array(
        [
            '{"answer": "A", "question_type": "mcq"}',
            '{"answer": "x", "index": 7}',
            '{"answer": "y", "question_type": null}',
            '{"answer": "z", "question_type": 3}',  # not a string: rejected
        ]
    )
    out = process_batch(_rl_with_extra(extra), "rl", Target("/m"))
    assert [json.loads(t) for t in out.good.column("extra_info").to_pylist()] == [
        {"answer": "A", "question_type": "mcq"},
        {"answer": "x", "index": 7, "question_type": "oe"},
        {"answer": "y", "question_type": "oe"},
    ]
    assert (
        out.good.column("extra_info").to_pylist()[0] == '{"answer": "A", "question_type": "mcq"}'
    )  # untouched
    assert out.rejected.column("reason").to_pylist() == ["extra_info_bad_question_type"]
    assert out.question_type_defaulted == 2
