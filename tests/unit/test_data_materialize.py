"""Materialize: sentinel paths rewritten columnar, other columns and schema kept, bad rows set aside."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from paravt_core.data import sentinel
from paravt_core.data.materialize import (
    Target,
    cut_values,
    find_url_values,
    insert_at,
    materialize_file,
    process_batch,
    rewrite_messages_json,
    rewrite_messages_obj,
    rewrite_videos,
)
from paravt_core.data.validate import DataError, FileChecker, check_messages
from tests.support.data_support import RL_SCHEMA, media_urls, messages, rl_table, sft_table
from tests.support.validate_support import MESSAGE_TYPE


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


def test_with_the_structural_mask_an_escaped_url_is_rewritten_in_python() -> None:
    # the canonical shape admits url values without escapes only, so the split's bytes are the path itself;
    # a url written with an escape (`charades\\/f.jpg` is `charades/f.jpg`) is valid, not canonical, and
    # rewritten by the Python walk with its decoded path
    base = messages("longvt_source/videor1_0/v.mp4", "museg/charades/f.jpg")
    rows = [
        json.dumps(base),
        json.dumps(base).replace("charades/f.jpg", "charades\\/f.jpg"),
        json.dumps(base).replace("videor1_0/v.mp4", "videor1_0/v\\u002emp4"),
    ]
    col = pa.array(rows, pa.string())
    reasons, canonical = check_messages(col)
    assert reasons.tolist() == [0, 0, 0] and canonical.tolist() == [True, False, False]
    out = rewrite_messages_json(col, "/m", canonical, reasons != 0)
    expected = ["/m/longvt_source/videor1_0/v.mp4", "/m/museg/charades/f.jpg"]
    assert [media_urls(json.loads(v)) for v in out.column.to_pylist()] == [expected] * 3
    assert out.python_rows == 2
    paths = sorted(zip(out.refs.rows.tolist(), out.refs.paths.to_pylist(), strict=True))
    assert paths == [
        (r, p) for r in range(3) for p in ("longvt_source/videor1_0/v.mp4", "museg/charades/f.jpg")
    ]


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


_path_text = st.text(st.sampled_from(list('ab/._-é"\\ 7')), max_size=30)
_paths = st.one_of(
    st.builds(lambda b, rest: b + rest, st.sampled_from(["selfqa/", "museg/charades/", "file://selfqa/", ""]),
              _path_text),
    st.sampled_from(["selfqa/../x.mp4", "/abs/x.mp4", "selfqa/a-very-long-file-name-over-twelve.mp4"]),
)  # fmt: skip
_row = st.lists(st.tuples(_paths, st.booleans()), max_size=4)


def _row_json(refs: list[tuple[str, bool]], compact: bool, first_media: str | None = None) -> str:
    msgs = messages(None)
    if first_media is not None:  # a media part in the shared first message: its bytes must be searched too
        msgs[0]["content"].insert(0, {"type": "video_url", "video_url": {"url": first_media}})
    for path, image in refs:
        kind = "image_url" if image else "video_url"
        msgs[1]["content"].append({"type": kind, kind: {"url": path}})
    return json.dumps(msgs, separators=(",", ":") if compact else None, ensure_ascii=False)


@given(
    rows=st.lists(st.tuples(_row, st.booleans()), min_size=1, max_size=6),
    first_media=st.one_of(st.none(), _paths),
    large=st.booleans(),
    sliced=st.booleans(),
)
def test_columnar_rewrite_agrees_with_python_walk(
    rows: list, first_media: str | None, large: bool, sliced: bool
) -> None:
    """Fast path (search + cut + insert) == decode, rewrite in Python, encode; paths and statuses too.
    Rows share their first message (with or without a media key in it); string and large_string
    columns, and a column that is a slice of a larger one (offsets not starting at 0)."""
    texts = [_row_json(refs, compact, first_media) for refs, compact in rows]
    col = pa.array(["junk", *texts, None], pa.large_string() if large else pa.string())
    col = col.slice(1, len(texts)) if sliced else pa.array(texts, col.type)
    out = rewrite_messages_json(col, '/m "x"')
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


def test_url_values_found_at_hand_computed_offsets_with_nulls_and_slices() -> None:
    rows = ['ab"url": "x/y"}', None, "", '"url": "p" "url": "q', "no key"]
    col = pa.array(["junk", *rows]).slice(1)  # data buffer offsets start after "junk" (4 bytes)
    found_rows, starts, lengths = find_url_values(col)
    # row 0 at byte 4: 'ab' + the 8-byte key -> value at 4 + 10 = 14, 'x/y' is 3 bytes long;
    # row 3 at byte 4 + 15 = 19: values at 19 + 8 = 27 ('p', 1 byte) and 19 + 19 = 38 ('q', unterminated)
    assert found_rows.tolist() == [0, 3, 3]
    assert starts.tolist() == [14, 27, 38]
    assert lengths.tolist() == [3, 1, -1]
    assert cut_values(col, starts, lengths.clip(0)).to_pylist() == ["x/y", "p", ""]
    out = insert_at(col, found_rows, starts, "/m/")
    assert out.to_pylist() == ['ab"url": "/m/x/y"}', None, "", '"url": "/m/p" "url": "/m/q', "no key"]


def test_value_ends_at_the_quote_of_a_key_right_after_it() -> None:
    """A value's end is searched in its piece of the key split; a piece that the next key follows with
    no `"` of its own ends at that key's opening quote (the next `"` of the row)."""
    col = pa.array(['"url": "ab"url": "c"', '"url": "d'])
    found_rows, starts, lengths = find_url_values(col)
    # row 0: key at 0 -> value at 8, 'ab' up to the next key's quote at 10 (2 bytes); key at 10 -> value
    # at 18, 'c' (1 byte); row 0 is 8 + 2 + 8 + 2 = 20 bytes, so row 1 starts at byte 20: value at 28,
    # no quote before the row's end (-1)
    assert found_rows.tolist() == [0, 0, 1]
    assert starts.tolist() == [8, 18, 28]
    assert lengths.tolist() == [2, 1, -1]


def test_search_skips_the_shared_first_message(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one key search reads each row from the end of the shared system message on: the message's
    bytes are null slots of the searched array (Arrow's kernels never read them), and the values found
    are still every value, with the rewrite equal to the Python walk."""
    texts = [json.dumps(messages("selfqa/a.mp4")), json.dumps(messages("museg/charades/b.jpg"))]
    searched: list[pa.Array] = []
    split = pc.split_pattern

    def spy(arr: pa.Array, pattern: str) -> pa.Array:
        searched.append(arr)
        return split(arr, pattern)

    monkeypatch.setattr(pc, "split_pattern", spy)
    out = rewrite_messages_json(pa.array(texts), "/m")
    system = json.dumps([messages(None)[0]])[:-1]  # '[{...system message...}' (the shared start)
    assert len(searched) == 1
    assert searched[0].to_pylist() == [None, texts[0][len(system) :], None, texts[1][len(system) :]]
    assert out.python_rows == 0
    assert [media_urls(json.loads(t)) for t in out.column.to_pylist()] == [
        ["/m/selfqa/a.mp4"],
        ["/m/museg/charades/b.jpg"],
    ]


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
