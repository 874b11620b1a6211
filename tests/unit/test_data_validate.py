"""Row checks: the Python reference definitions, and the columnar fast paths agreeing with them."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from paravt_core.data import validate
from paravt_core.data.validate import (
    CANONICAL_MESSAGES_RE,
    FileChecker,
    Reason,
    check_extra_info,
    check_messages,
    check_messages_obj,
    check_messages_text,
    check_rl,
)
from tests.support.data_support import messages, rl_table
from tests.support.validate_support import MESSAGE_TYPE

OK = Reason.OK


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        (messages("selfqa/a.mp4", "selfqa/f.jpg"), OK),
        (messages(None), OK),  # text-only rows are fine
        (messages("selfqa/a.mp4", assistant=False), Reason.NO_ASSISTANT_TURN),
        ([], Reason.NO_ASSISTANT_TURN),
        ({"role": "assistant"}, Reason.MESSAGES_NOT_LIST),
        ([{"role": "assistant", "content": []}, "x"], Reason.MESSAGES_NOT_LIST),
        ([{"role": "assistant", "content": "hello"}], Reason.CONTENT_NOT_LIST),
        ([{"role": "assistant"}], Reason.CONTENT_NOT_LIST),
        ([{"role": "assistant", "content": ["hello"]}], Reason.CONTENT_NOT_LIST),
        ([{"role": "assistant", "content": [{"type": "video_url"}]}], Reason.MALFORMED_MEDIA_PART),
        ([{"role": "assistant", "content": [{"type": "image_url", "image_url": "selfqa/a.jpg"}]}],
         Reason.MALFORMED_MEDIA_PART),
        ([{"role": "assistant", "content": [{"type": "video_url", "video_url": {"url": 3}}]}],
         Reason.MALFORMED_MEDIA_PART),
    ],
)  # fmt: skip
def test_check_messages_obj(obj: object, reason: int) -> None:
    assert check_messages_obj(obj) == reason


def test_check_messages_text() -> None:
    assert check_messages_text(None) == Reason.MESSAGES_NULL
    assert check_messages_text("{not json") == Reason.MESSAGES_NOT_JSON
    assert check_messages_text("") == Reason.MESSAGES_NOT_JSON
    assert check_messages_text("null") == Reason.MESSAGES_NOT_LIST
    assert check_messages_text(json.dumps(messages("selfqa/a.mp4"))) == OK


def test_check_messages_json_column_canonical_and_not() -> None:
    good = messages("selfqa/a.mp4", "selfqa/f.jpg")
    rows = [
        json.dumps(good),  # canonical (json.dumps defaults)
        json.dumps(good, separators=(",", ":")),  # valid, compact: decided in Python
        json.dumps([{**good[0], "name": "sys"}, *good[1:]]),  # valid, extra key: decided in Python
        json.dumps(good, indent=2),  # valid, pretty-printed: canonical shape allows any whitespace
        json.dumps(good)[:-5],  # truncated
        None,
        '[{"role": "user", "content": "hi"}]',
    ]
    reasons, canonical = check_messages(pa.array(rows, pa.string()))
    assert reasons.tolist() == [
        OK,
        OK,
        OK,
        OK,
        Reason.MESSAGES_NOT_JSON,
        Reason.MESSAGES_NULL,
        Reason.CONTENT_NOT_LIST,
    ]
    assert canonical.tolist() == [True, False, False, True, False, False, False]


# --- the fast path must agree with the reference on anything ---------------------------------------------

_text = st.text(alphabet=st.sampled_from(list('ab "\\/\n\té{}[]:,url')), max_size=12)
_url = st.sampled_from(["selfqa/a.mp4", "museg/charades/b.mp4", "x/../y", "", "/abs.mp4"])
_part = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, _text),
    st.builds(lambda k, u: {"type": k, k: {"url": u}}, st.sampled_from(["video_url", "image_url"]), _url),
    st.builds(lambda k: {"type": k}, st.sampled_from(["video_url", "image_url"])),
    st.builds(lambda k, u: {k: {"url": u}, "type": k}, st.sampled_from(["video_url", "image_url"]), _url),
    st.just({"type": "text", "text": "x", "extra": [1, 2]}),
    st.just("not a part"),
)
_message = st.one_of(
    st.builds(lambda r, c: {"role": r, "content": c}, st.sampled_from(["system", "user", "assistant"]),
              st.lists(_part, max_size=3)),
    st.builds(lambda c, r: {"content": c, "role": r}, st.lists(_part, max_size=3),
              st.sampled_from(["user", "assistant"])),
    st.just({"role": "assistant", "content": "plain string"}),
    st.just({"role": "assistant"}),
)  # fmt: skip
_style = st.sampled_from(
    [
        {},
        {"separators": (",", ":")},
        {"indent": 1},
        {"ensure_ascii": False},
    ]
)


def _serialize(obj: object, style: dict, cut: int | None) -> str:
    text = json.dumps(obj, **style)
    return text[:cut] if cut is not None else text


@given(
    st.lists(
        st.tuples(st.lists(_message, max_size=4), _style, st.one_of(st.none(), st.integers(0, 40))),
        min_size=1,
        max_size=12,
    )
)
def test_fast_path_agrees_with_reference(rows: list[tuple[list, dict, int | None]]) -> None:
    texts = [_serialize(obj, style, cut) for obj, style, cut in rows]
    reasons, canonical = check_messages(pa.array(texts, pa.string()))
    assert reasons.tolist() == [check_messages_text(t) for t in texts]
    assert canonical.tolist() == _one_pattern(texts)


def _one_pattern(texts: list[str | None]) -> list[bool]:
    """The canonical mask by its definition: the one whole-row pattern, row by row."""
    return [
        t is not None and pc.match_substring_regex(pa.array([t]), CANONICAL_MESSAGES_RE)[0].as_py()
        for t in texts
    ]


@given(
    _message,
    st.lists(
        st.tuples(st.lists(_message, max_size=4), _style, st.one_of(st.none(), st.integers(0, 60))),
        min_size=1,
        max_size=12,
    ),
    st.booleans(),
)
def test_shared_first_message_path_agrees_with_reference(
    first: dict, rows: list[tuple[list, dict, int | None]], large: bool
) -> None:
    """Rows that begin with the same first message (the system prompt) are checked from its end on;
    that must decide every row exactly as the reference, whatever follows (or is cut off)."""
    texts = [_serialize([first, *obj], style, cut) for obj, style, cut in rows]
    col = pa.array(texts, pa.large_string() if large else pa.string())
    reasons, canonical = check_messages(col)
    assert reasons.tolist() == [check_messages_text(t) for t in texts]
    assert all(check_messages_text(t) == OK for t, c in zip(texts, canonical, strict=True) if c)
    assert canonical.tolist() == _one_pattern(texts)


@pytest.mark.parametrize("shared", [True, False])
def test_rows_ending_with_the_answer_take_one_pass(shared: bool, monkeypatch) -> None:
    """The cheap pattern (last message is the assistant's) decides those rows; only the rows it refuses
    meet the general one, which still accepts an assistant turn followed by other messages."""
    seen: list[tuple[str, int]] = []
    real = pc.match_substring_regex

    def spy(strings: pa.Array, pattern: str) -> pa.Array:
        seen.append((pattern, len(strings)))
        return real(strings, pattern)

    monkeypatch.setattr(validate.pc, "match_substring_regex", spy)
    system = {"role": "system", "content": [{"type": "text", "text": "sys"}]}
    answer = {"role": "assistant", "content": [{"type": "text", "text": "A"}]}

    def user(i: int) -> dict:  # shared=False: every row opens with its own question
        return {"role": "user", "content": [{"type": "text", "text": f"q{i if not shared else 0}"}]}

    first = [system] if shared else []
    rows = [
        json.dumps([*first, user(0), answer]),  # ends with the answer: first pattern
        json.dumps([*first, user(1), *messages("selfqa/a.mp4")[2:]]),  # ends with the answer too
        json.dumps([*first, user(2), answer, user(2)]),  # an answer, then a user turn: second pattern
        json.dumps([*first, user(3)]),  # no answer at all: refused by both, decided in Python
    ]
    col = pa.array(rows)
    start = validate.shared_start(col)
    assert start.rows.tolist() == ([True] * 4 if shared else [True, False, False, False])
    seen.clear()
    reasons, canonical = check_messages(col, start)
    assert canonical.tolist() == [True, True, True, False]
    assert reasons.tolist() == [OK, OK, OK, Reason.NO_ASSISTANT_TURN]
    # the tails pass always sees 2 x 4 strings (each row as start + tail); shared: rows 2 and 3 are
    # refused and matched again; not shared: rows 1-3 are matched whole, and rows 2 and 3 again
    if shared:
        assert seen == [(validate._TAIL_ENDS_WITH_ASSISTANT_RE, 8), (validate._TAIL_WITH_ASSISTANT_RE, 2)]
    else:
        assert seen == [
            (validate._TAIL_ENDS_WITH_ASSISTANT_RE, 8),
            (validate.CANONICAL_ENDS_WITH_ASSISTANT_RE, 3),
            (CANONICAL_MESSAGES_RE, 2),
        ]


def test_shared_first_message_is_checked_once_and_rows_from_its_end() -> None:
    system = {"role": "system", "content": [{"type": "text", "text": 'tools: {"name": "crop"}'}]}
    rows = [
        json.dumps([system, *messages("selfqa/a.mp4")[1:]]),  # shared start, canonical tail
        json.dumps([system, {"role": "user", "content": [{"type": "text", "text": "q"}]}]),  # no assistant
        json.dumps([system, *messages("selfqa/a.mp4")[1:]])[:-3],  # shared start, truncated tail
        json.dumps(messages("selfqa/b.mp4")),  # another start: the whole row is matched
    ]
    reasons, canonical = check_messages(pa.array(rows))
    assert reasons.tolist() == [OK, Reason.NO_ASSISTANT_TURN, Reason.MESSAGES_NOT_JSON, OK]
    assert canonical.tolist() == [True, False, False, True]
    # an assistant first message: the tail needs none of its own
    answer = {"role": "assistant", "content": [{"type": "text", "text": "A"}]}
    rows = [json.dumps([answer]), json.dumps([answer, {"role": "user", "content": []}])]
    assert check_messages(pa.array(rows))[1].tolist() == [True, True]


def test_nested_messages_match_reference() -> None:
    rows = [
        messages("selfqa/a.mp4", "selfqa/f.jpg"),
        messages("selfqa/a.mp4", assistant=False),
        None,
        [{"role": "assistant", "content": None}],
        [{"role": "assistant", "content": [{"type": "video_url", "video_url": None}]}],
        [{"role": "assistant", "content": [{"type": "video_url", "video_url": {"url": None}}]}],
        [{"role": "assistant", "content": [None]}],
        [None],
        [],
    ]
    arr = pa.array(rows, MESSAGE_TYPE)
    reasons, canonical = check_messages(arr)
    assert canonical is None

    def reference(obj: object) -> int:
        if obj is None:
            return Reason.MESSAGES_NULL
        # Arrow fills absent struct fields with None; the reference treats None like an absent key
        return check_messages_obj(obj)

    assert reasons.tolist() == [reference(r) for r in arr.to_pylist()]
    assert reasons.tolist() == [
        OK,
        Reason.NO_ASSISTANT_TURN,
        Reason.MESSAGES_NULL,
        Reason.CONTENT_NOT_LIST,
        Reason.MALFORMED_MEDIA_PART,
        Reason.MALFORMED_MEDIA_PART,
        Reason.CONTENT_NOT_LIST,
        Reason.MESSAGES_NOT_LIST,
        Reason.NO_ASSISTANT_TURN,
    ]
    # a sliced array (as batches are) gives the same answers
    assert check_messages(arr.slice(3, 4))[0].tolist() == reasons[3:7].tolist()


def test_rl_checks_struct_extra_info() -> None:
    table = rl_table([["selfqa/a.mp4"], [], None, ["selfqa/b.mp4"]], answers=["A", "B", "C", None])
    reasons = check_rl(table.to_batches()[0])
    assert reasons.tolist() == [
        OK,
        Reason.VIDEOS_EMPTY,
        Reason.VIDEOS_EMPTY,
        Reason.EXTRA_INFO_MISSING_ANSWER,
    ]


def test_rl_extra_info_json_strings() -> None:
    rows = [
        '{"answer": "A", "question_type": "mcq"}',
        '{"answer": "12.0, 18.5", "question_type": "tvg", "index": 3}',  # extra key: decided in Python
        '{"answer": ["a", 1], "question_type": "oe"}',  # non-string answer is still an answer
        '{"question_type": "mcq"}',
        '{"answer": "A", "question_type": ""}',  # empty, null or absent: open-ended (docs/method.md §2.4), kept
        '{"answer": "A", "question_type": null}',
        '{"answer": "A"}',
        '{"answer": "A", "question_type": 5}',  # present but not a string: rejected
        '{"answer": "A"',
        "[1, 2]",
        None,
        '{"answer": "A", "question_type": "mcq"}, "x": 1',  # not one JSON value
    ]
    assert check_extra_info(pa.array(rows, pa.string())).tolist() == [
        OK,
        OK,
        OK,
        Reason.EXTRA_INFO_MISSING_ANSWER,
        OK,
        OK,
        OK,
        Reason.EXTRA_INFO_BAD_QUESTION_TYPE,
        Reason.EXTRA_INFO_INVALID,
        Reason.EXTRA_INFO_INVALID,
        Reason.EXTRA_INFO_INVALID,
        Reason.EXTRA_INFO_INVALID,
    ]


def test_file_checker_checks_each_path_once(tmp_path) -> None:
    (tmp_path / "selfqa").mkdir()
    (tmp_path / "selfqa" / "a.mp4").write_bytes(b"x")
    checker = FileChecker(str(tmp_path))
    assert checker.missing(["selfqa/a.mp4", "selfqa/b.mp4", "selfqa/b.mp4"]) == {"selfqa/b.mp4"}
    (tmp_path / "selfqa" / "a.mp4").unlink()
    # cached: the stage checks each distinct path once per run
    assert checker.missing(["selfqa/a.mp4"]) == set()


def test_file_checker_listing_agrees_with_isfile(tmp_path) -> None:
    d = tmp_path / "selfqa"
    (d / "sub").mkdir(parents=True)
    for name in ("a.mp4", "b.mp4", "c.jpg", "sub/d.mp4"):
        (d / name).write_bytes(b"x")
    (d / "link.mp4").symlink_to(d / "a.mp4")  # a symlink to a file counts as a file
    (d / "dirlink").symlink_to(d / "sub")  # ... a symlink to a directory does not
    (d / "broken.mp4").symlink_to(d / "gone.mp4")
    paths = [
        "selfqa/a.mp4", "selfqa/b.mp4", "selfqa/c.jpg", "selfqa/link.mp4", "selfqa/dirlink",
        "selfqa/broken.mp4", "selfqa/sub", "selfqa/nope.mp4", "selfqa/sub/d.mp4", "selfqa//b.mp4",
        "selfqa/./c.jpg", "selfqa/a.mp4/", "selfqa/a.mp4/x", "selfqa/A.MP4", "museg/charades/x.mp4",
    ]  # fmt: skip
    # Worked out by hand: the files, the link to a file, and the two spellings of existing files.
    present = {"selfqa/a.mp4", "selfqa/b.mp4", "selfqa/c.jpg", "selfqa/link.mp4", "selfqa/sub/d.mp4",
               "selfqa//b.mp4", "selfqa/./c.jpg"}  # fmt: skip
    for list_min in (1, 3, 1000):  # every directory listed, the big groups listed, nothing listed
        checker = FileChecker(str(tmp_path), list_min=list_min)
        assert checker.missing(paths) == set(paths) - present, list_min
        # the columnar lookup (Arrow array, duplicates, a second call answered from what was decided)
        columnar = FileChecker(str(tmp_path), list_min=list_min)
        assert columnar.missing(pa.array(paths[:7] * 2)) == set(paths[:7]) - present, list_min
        assert columnar.missing(pa.array(paths[::-1])) == set(paths) - present, list_min
        assert columnar.missing(pa.array(paths[:3], pa.large_string())) == set(), list_min
    listed = FileChecker(str(tmp_path), list_min=1)
    listed.missing(["selfqa/a.mp4"])
    assert "selfqa" in listed._listings  # the listing route was really taken


def test_file_checker_unlistable_directory_falls_back_to_stat(tmp_path) -> None:
    (tmp_path / "selfqa").mkdir()
    (tmp_path / "selfqa" / "f").write_bytes(b"x")  # a file where a directory is expected
    checker = FileChecker(str(tmp_path), list_min=1)
    assert checker.missing(["selfqa/f/a.mp4", "selfqa/f/b.mp4", "selfqa/f"]) == {
        "selfqa/f/a.mp4",
        "selfqa/f/b.mp4",
    }
