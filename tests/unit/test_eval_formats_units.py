"""Reading benchmark copies and subtitle files (``paravt_core/eval/formats.py``), rule by rule, each case's
expected value written out by hand. Written for the survivors of the module's mutation run (docs/mutation.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from paravt_core.eval.formats import (
    FormatError,
    aligned_subtitles,
    find_files,
    parse_srt,
    read_rows,
    srt_seconds,
    subtitle_text,
)

# --------------------------------------------------------------------------------------------- row files


def _write_json(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_hidden_folders_and_folders_named_like_files_are_not_row_files(tmp_path: Path) -> None:
    rows = _write_json(tmp_path / "data" / "val.json", [{"q": 1}])
    _write_json(tmp_path / ".cache" / "huggingface" / "old.json", [{"q": "stale"}])
    (tmp_path / "extra.json").mkdir()  # a folder whose name ends like a row file
    assert find_files(str(tmp_path)) == [rows]
    assert read_rows(str(tmp_path)) == [{"q": 1}]


def test_a_source_with_no_row_files_names_the_formats_and_the_source(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(FormatError) as err:
        find_files(str(tmp_path))
    assert str(err.value) == f"no .parquet, .arrow, .jsonl, .json files under {tmp_path}"


def test_an_arrow_file_in_the_random_access_format_is_read(tmp_path: Path) -> None:
    # save_to_disk writes IPC streams; an Arrow *file* (magic "ARROW1" first) is read by the fallback, which
    # must start again from byte 0 after the stream reader gave up.
    table = pa.table({"question": ["a?", "b?"], "answer": ["A", "B"]})
    path = tmp_path / "data.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    assert read_rows(str(path)) == [{"question": "a?", "answer": "A"}, {"question": "b?", "answer": "B"}]


def test_an_unreadable_file_is_named_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "rows.json"
    path.write_text("[{", encoding="utf-8")
    with pytest.raises(FormatError) as err:
        read_rows(str(path))
    assert str(err.value).startswith(f"{path}: cannot be read (JSONDecodeError: ")


def test_json_text_is_read_as_utf8(tmp_path: Path) -> None:
    path = tmp_path / "rows.json"
    path.write_bytes(json.dumps([{"q": "¿qué?"}], ensure_ascii=False).encode("utf-8"))
    assert read_rows(str(path)) == [{"q": "¿qué?"}]


@pytest.mark.parametrize(
    ("data", "rows"),
    [
        ({"validation": [{"q": 1}, {"q": 2}]}, [{"q": 1}, {"q": 2}]),  # one list: the rows
        ({"meta": "v1", "data": [{"q": 1}]}, [{"q": 1}]),  # one list beside other values
        ({"q": 1, "a": "B"}, [{"q": 1, "a": "B"}]),  # no list: one row
        ({"val": [{"q": 1}], "test": [{"q": 2}]}, [{"val": [{"q": 1}], "test": [{"q": 2}]}]),  # two: one row
    ],
)
def test_a_json_object_is_its_one_list_of_rows_or_one_row(tmp_path: Path, data: dict, rows: list) -> None:
    assert read_rows(str(_write_json(tmp_path / "rows.json", data))) == rows


@pytest.mark.parametrize("data", [[{"q": 1}, "not a row"], ["a", "b"]])
def test_a_list_that_holds_anything_but_objects_is_refused(tmp_path: Path, data: list) -> None:
    path = _write_json(tmp_path / "rows.json", data)
    with pytest.raises(FormatError) as err:
        read_rows(str(path))
    assert str(err.value) == f"{path}: expected a list of objects"


# --------------------------------------------------------------------------------------------- subtitles


def test_a_time_that_is_not_srt_is_named() -> None:
    with pytest.raises(ValueError) as err:
        srt_seconds("1:2:3")
    assert str(err.value) == "not an SRT time: '1:2:3'"


SRT = (
    "1\n00:00:01,000 --> 00:00:02,500\nHello\nthere\n\n"
    "a block with no times\n\n"
    "3\n00:00:0x,000 --> 00:00:04,000\nbad start\n\n"
    "4\n00:00:05,000 --> 00:00:06,000 --> 00:00:07,000\ntwo arrows\n\n"
    "5\n00:00:08,000 --> 00:00:09,000\nlast\n"
)


def test_srt_blocks_without_times_or_with_bad_ones_are_skipped_and_the_rest_read() -> None:
    # the second block has no arrow and the third an unreadable start: both are skipped, not the end of the
    # file; the fourth's end is the first time after its first arrow.
    assert parse_srt(SRT) == [
        (1.0, 2.5, "Hello there"),
        (5.0, 6.0, "two arrows"),
        (8.0, 9.0, "last"),
    ]
    assert parse_srt(SRT, join="\n")[0] == (1.0, 2.5, "Hello\nthere")


def test_subtitle_text_of_an_srt_file_joins_a_cues_lines_with_a_space(tmp_path: Path) -> None:
    path = tmp_path / "v.srt"
    path.write_text(SRT, encoding="utf-8")
    assert subtitle_text(str(path)) == "Hello there\ntwo arrows\nlast"
    assert subtitle_text(str(path), join="\n") == "Hello\nthere\ntwo arrows\nlast"


def test_subtitle_bytes_that_are_not_utf8_are_replaced_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "v.srt"
    path.write_bytes(b"1\n00:00:01,000 --> 00:00:02,000\ncaf\xe9 au lait\n")
    assert subtitle_text(str(path)) == "caf\ufffd au lait"


def test_subtitle_text_of_a_missing_file_is_none(tmp_path: Path) -> None:
    assert subtitle_text(str(tmp_path / "absent.srt")) is None


def test_longvideobench_json_subtitles_in_both_layouts(tmp_path: Path) -> None:
    items = [
        {"start": 0.0, "end": 1.0, "line": " first "},
        {"timestamp": [1.0, 2.0], "text": "second"},
        {"start": 2.0, "end": 3.0},  # neither key: an empty line
        "not an object",
        {"line": "fourth", "text": "ignored"},
    ]
    path = _write_json(tmp_path / "v.json", items)
    assert subtitle_text(str(path)) == "first\nsecond\n\nfourth"


def test_a_json_named_subtitle_is_not_read_as_srt(tmp_path: Path) -> None:
    # the same cue as SRT text inside a .json file would be a JSON error; as .srt it is one cue.
    path = _write_json(tmp_path / "v.json", [{"line": "00:00:01,000 --> 00:00:02,000"}])
    assert subtitle_text(str(path)) == "00:00:01,000 --> 00:00:02,000"


# One cue per frame of a 10-frame video at 1 fps: cue i covers [i, i + 1) seconds, i.e. frame i only.
CUES = [(float(i), float(i + 1), f"c{i}") for i in range(10)]


@pytest.mark.parametrize(
    ("frame_num", "total_frames", "fps", "expected"),
    [
        (0, 10, 1.0, ""),  # no frames sampled
        (1, 10, 1.0, "c0"),  # one frame: frame 0
        (2, 10, 1.0, "c0\nc9"),  # frames 0 and 9 (the last)
        (4, 10, 1.0, "c0\nc3\nc6\nc9"),  # linspace(0, 9, 4) = 0, 3, 6, 9
        (3, 10, 1.0, "c0\nc4\nc9"),  # 0, 4.5 -> 4, 9
        (1, 1, 1.0, "c0"),  # a one-frame video
        (3, 0, 1.0, ""),  # no frames in the video
        (3, 10, 0.0, ""),  # no frame rate
    ],
)
def test_aligned_subtitles_keep_the_cues_of_the_sampled_frames(
    frame_num: int, total_frames: int, fps: float, expected: str
) -> None:
    assert aligned_subtitles(CUES, fps, total_frames, frame_num) == expected


def test_a_cue_ending_on_a_sampled_frame_does_not_cover_it() -> None:
    # frames 0 and 4 at 1 fps; the cue [1, 4) ends at frame 4 (exclusive), the cue [4, 5) covers it.
    cues = [(1.0, 4.0, "ends at 4"), (4.0, 5.0, "covers 4")]
    assert aligned_subtitles(cues, 1.0, 5, 2) == "covers 4"


def test_aligned_subtitles_scale_cue_times_by_the_frame_rate() -> None:
    # 2 fps, 20 frames, 2 sampled: 0 and 19. [9.5, 10) s is frames [19, 20): covers 19.
    cues = [(0.2, 0.4, "early"), (9.5, 10.0, "late"), (0.0, 0.5, "first")]
    assert aligned_subtitles(cues, 2.0, 20, 2) == "late\nfirst"


def test_release_srt_lines_reads_lone_cr_line_ends_and_goes_past_a_short_block() -> None:
    from paravt_core.eval.formats import release_srt_lines

    # old Mac line ends: Python's text mode (the release's open()) makes every "\r" a line end
    raw = b"1\r00:00:01,000 --> 00:00:02,000\rHello\r\r2\r00:00:03,000 --> 00:00:04,000\rWorld\r"
    assert release_srt_lines(raw) == "Hello\nWorld"
    # a block of fewer than three lines is skipped, not the end of the file
    assert release_srt_lines(b"lonely line\n\n1\n00:00:01,000 --> 00:00:02,000\nHi\n") == "Hi"
