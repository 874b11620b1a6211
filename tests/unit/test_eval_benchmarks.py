"""Benchmark loaders on fixture copies in each benchmark's real schema (paravt_core/synth/eval_fixtures.py).

Every expected value below is read off the fixture rows and the datasets' published conventions, not computed
by the code under test: e.g. LongVideoBench ``correct_choice: 4`` -> letter E (0-based index into A-E)."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from paravt_core.eval import benchmarks as B
from paravt_core.eval.formats import FormatError, parse_srt, read_rows, srt_seconds
from tests.support.eval_support import fixture_entry

HINT = "Answer with the option's letter from the given choices."


def _samples(entries, name):
    e = fixture_entry(entries, name)
    rows = read_rows(e["source"], B.get(name).split)
    return B.to_samples(name, rows, B.Context(e["media_root"], e.get("subtitles", "")))


def test_videomme_rows_options_durations_and_videos(eval_fixtures):
    samples = _samples(eval_fixtures, "videomme")
    assert [(s.id, s.gold, s.meta["duration"]) for s in samples] == [
        ("001-1", "B", "short"),
        ("002-1", "C", "medium"),
        ("003-1", "B", "long"),
    ]
    first = samples[0]
    assert first.question == (
        "Question: Which shape appears first in the video?\nOptions:\nA. A blue square.\nB. A red circle.\n"
        f"C. A green triangle.\nD. A yellow circle.\n{HINT}"
    )
    assert first.video.endswith("videomme/data/fxSynthA001.mp4") and os.path.exists(first.video)
    assert first.letters == "ABCD" and first.qtype == "mcq" and first.error is None


def test_videomme_wsub_prepends_the_srt_cues_without_markup(eval_fixtures):
    samples = _samples(eval_fixtures, "videomme_wsub")
    assert samples[0].question.startswith(
        "This video's subtitles are listed below:\nA red circle shows up.\nNow a blue square.\nQuestion: "
    )
    assert "<font" not in samples[0].question
    # fxSynthC003 has no subtitle file
    assert samples[2].question.startswith(
        "This video's subtitles are listed below:\n(no subtitles available)\n"
    )


def test_srt_parsing():
    text = '1\n00:00:01,500 --> 00:00:03,000\n<font color="white" size=".72c">Hello</font>\n\n2\n01:02:03,004 --> 01:02:04,000\nWorld\n'
    # 01:02:03,004 = 3600 + 120 + 3 + 0.004 s
    assert parse_srt(text) == [(1.5, 3.0, "Hello"), (3723.004, 3724.0, "World")]
    assert srt_seconds("00:00:00,5") == 0.5


def test_longvideobench_option_columns_and_index_answers(eval_fixtures):
    a, b = _samples(eval_fixtures, "longvideobench")
    # option4 == "N/A": four options; correct_choice 1 -> B
    assert (a.id, a.gold, a.letters) == ("fxLvbA0001_0", "B", "ABCD")
    assert a.question.splitlines()[2:6] == ["A. a blue square", "B. a red circle", "C. a green triangle",
                                            "D. an empty grey frame"]  # fmt: skip
    # five options; correct_choice 4 -> E
    assert (b.gold, b.letters, b.meta["duration_group"]) == ("E", "ABCDE", "15")
    assert a.video.endswith("longvideobench/videos/fxLvbA0001.mp4") and os.path.exists(a.video)


def test_lvbench_meta_jsonl_nesting_and_inline_options(eval_fixtures):
    samples = _samples(eval_fixtures, "lvbench")
    assert [(s.id, s.gold, s.letters) for s in samples] == [("90001", "B", "ABCD"), ("90002", "A", "ABCD")]
    assert samples[0].question.startswith(
        "Question: Which shape appears last?\n(A) green triangle\n(B) yellow"
    )
    assert samples[0].video.endswith("lvbench/fxLvbenchB.mp4") and os.path.exists(samples[0].video)
    assert samples[1].meta["question_type"] == ["entity recognition"]


def test_lvbench_flat_rows_work_too():
    row = {
        "uid": "7",
        "question": "Q?\n(A) x\n(B) y",
        "answer": "B",
        "video_path": "v.mp4",
        "question_type": ["a"],
    }
    (s,) = B.to_samples("lvbench", [row], B.Context("/media"))
    assert (s.gold, s.letters, s.video) == ("B", "AB", "/media/v.mp4")


def test_mlvu_candidates_are_lettered_and_text_answers_accepted(eval_fixtures):
    samples = _samples(eval_fixtures, "mlvu")
    assert [(s.id, s.gold, s.meta["task_type"]) for s in samples] == [
        ("fx_plotQA_1", "B", "plotQA"),
        ("fx_count_1", "B", "count"),
        ("fx_order_1", "B", "order"),
    ]
    # the inline "(A) Red ..." lines after the first line are replaced by the lettered candidates
    assert (
        samples[0].question
        == f"Question: What colour is the square?\nOptions:\nA. Red\nB. Blue\nC. Green\nD. Yellow\n{HINT}"
    )
    row = {
        "video_name": "v.mp4",
        "question": "Q?",
        "candidates": ["x", "y", "z"],
        "answer": "z",
        "task_type": "ego",
    }
    (s,) = B.to_samples("mlvu", [row], B.Context("/m"))
    assert s.gold == "C"  # the answer is the text of the third candidate


def test_mmvu_choices_dict_urls_and_open_ended(eval_fixtures):
    mc, oe = _samples(eval_fixtures, "mmvu")
    assert (mc.gold, mc.letters, mc.qtype) == ("B", "ABCDE", "mcq")
    assert mc.video.endswith("mmvu/videos/Physics/fx_0.mp4") and os.path.exists(
        mc.video
    )  # hub URL -> local copy
    assert (oe.gold, oe.qtype, oe.letters, oe.question) == (
        "blue",
        "oe",
        "",
        "Question: What colour is the square?",
    )
    assert oe.meta == {"subject": "Physics", "kind": "open-ended"}


def test_charades_float16_timestamps_and_the_grounding_question(eval_fixtures):
    a, b = _samples(eval_fixtures, "charades")
    assert (a.gold, a.qtype) == ("1.0, 3.0", "tvg")
    assert (b.gold, b.qtype) == ("5.0, 7.0", "tvg")
    assert a.question.startswith("Please find the visual event described by a sentence in the video")
    assert 'sentence: "a red circle appears". Please return its start time and end time.' in a.question
    assert a.video.endswith("charades/Charades_v1_480/FXA01.mp4") and os.path.exists(a.video)


def test_synthetic_split(eval_fixtures):
    samples = _samples(eval_fixtures, "synthetic")
    assert len(samples) == 8  # 4 videos x (which-at mcq + when tvg)
    assert [s.qtype for s in samples] == ["mcq", "tvg"] * 4
    assert all(os.path.exists(s.video) for s in samples)


def test_row_with_a_missing_field_becomes_an_error_sample_with_its_id():
    rows = [
        {
            "question_id": "001-1",
            "videoID": "v",
            "duration": "short",
            "question": "Q?",
            "answer": "A",
        },  # no options
        {
            "question_id": "001-2",
            "videoID": "v",
            "duration": "short",
            "question": "Q?",
            "options": ["A. x", "B. y"],
            "answer": "Z",
        },  # answer outside the options  # fmt: skip
    ]
    a, b = B.to_samples("videomme", rows, B.Context("/m"))
    assert (a.id, a.error) == ("001-1", "row_error: missing field 'options'")
    assert b.id == "001-2" and b.error and "neither an option letter" in b.error


def test_repeated_ids_are_made_unique():
    row = {"video": "x.mp4", "caption": "c", "timestamp": [1.0, 2.0]}
    samples = B.to_samples("charades", [row, dict(row)], B.Context("/m"))
    assert [s.id for s in samples] == ["x.mp4::c::1-2", "x.mp4::c::1-2#2"]


def test_saved_dataset_arrow_directory_and_split_selection(tmp_path):
    table = pa.table({"video": ["a.mp4"], "caption": ["c"], "timestamp": [[0.5, 1.5]]})
    for split in ("test", "train"):
        d = tmp_path / split
        d.mkdir()
        with (
            pa.OSFile(str(d / "data-00000-of-00001.arrow"), "wb") as sink,
            pa.ipc.new_stream(sink, table.schema) as w,
        ):
            w.write_table(table if split == "test" else table.slice(0, 0))
    assert read_rows(str(tmp_path), "test") == [{"video": "a.mp4", "caption": "c", "timestamp": [0.5, 1.5]}]
    assert read_rows(str(tmp_path), "train") == []
    with pytest.raises(FormatError, match="does not exist"):
        read_rows(str(tmp_path / "nope"))


def test_s3_media_root_makes_s3_video_uris():
    (s,) = B.to_samples(
        "charades",
        [{"video": "x.mp4", "caption": "c", "timestamp": [1, 2]}],
        B.Context("s3://media-bucket/ch"),
    )
    assert s.video == "s3://media-bucket/ch/Charades_v1_480/x.mp4"


def test_unknown_benchmark_lists_the_known_ones():
    with pytest.raises(ValueError, match="known: videomme, videomme_wsub, longvideobench"):
        B.get("vmme")


# ----------------------------------------------------------------------------------- real-schema rows

# The grounding question of lmms-eval's charades_sta task and the release's driver, with the caption quoted.
CHARADES_REFERENCE = (
    "Please find the visual event described by a sentence in the video, determining its starting and ending "
    "times. The format should be: 'The event happens in the start time - end time'. For example, The event "
    "'person turn a light on' happens in the 24.3 - 30.4 seconds. Now I will give you the textual sentence: "
    '"person opens the door". Please return its start time and end time.'
)


def test_charades_gold_is_unrounded_and_the_question_has_the_references_wording():
    import asyncio

    from paravt_core.eval.scoring import score_sample

    row = {"video": "AO8RW.mp4", "caption": "person opens the door", "timestamp": [130.25, 135.8]}
    (s,) = B.to_samples("charades", [row], B.Context("/m"))
    assert s.question == CHARADES_REFERENCE
    assert s.gold == "130.25, 135.8"  # not 130.2 (rounded to 0.1 s it would lose 0.05 s of the gold)
    # the exact gold span scores 1; against a rounded gold [130.2, 135.8] it would be 5.55/5.6
    assert asyncio.run(score_sample(s, "The event happens in the 130.25 - 135.8 seconds.")).score == 1.0
    # [130.2, 135.8] vs [130.25, 135.8]: inter 5.55, union 5.6
    assert asyncio.run(score_sample(s, "130.2 - 135.8")).score == pytest.approx(5.55 / 5.6)


def test_question_texts_come_from_the_prompt_set():
    from paravt_core.agent.prompts import load_prompt_set

    ps = load_prompt_set()
    texts = ps.benchmark.model_copy(
        update={"mcq_hint": "Letter only.", "charades_question": "Find: {caption}"}
    )
    row = {"question_id": "001-1", "videoID": "v", "duration": "short", "question": "Which shape?",
           "options": ["A. x", "B. y"], "answer": "B"}  # fmt: skip
    (q,) = B.to_samples("videomme", [row], B.Context("/m", texts=texts))
    assert q.question == "Question: Which shape?\nOptions:\nA. x\nB. y\nLetter only."
    (c,) = B.to_samples("charades", [{"video": "x.mp4", "caption": "c", "timestamp": [1, 2]}],
                        B.Context("/m", texts=texts))  # fmt: skip
    assert c.question == "Find: c"
    # the texts are checksummed with the rest of the set: another hint is another checksum
    other = ps.model_copy(update={"benchmark": texts})
    other.__dict__.pop("checksum", None)
    assert other.checksum != ps.checksum


@pytest.mark.parametrize("ext", [".MP4", ".mkv", ".webm"])
def test_videomme_videos_in_other_containers_are_found(tmp_path, ext):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / f"fxVid{ext}").write_bytes(b"x")
    row = {"question_id": "001-1", "videoID": "fxVid", "duration": "short", "question": "Q?",
           "options": ["A. x", "B. y"], "answer": "A"}  # fmt: skip
    (s,) = B.to_samples("videomme", [row], B.Context(str(tmp_path)))
    assert s.video == str(tmp_path / "data" / f"fxVid{ext}")
    (missing,) = B.to_samples("videomme", [dict(row, videoID="nope")], B.Context(str(tmp_path)))
    assert missing.video == str(tmp_path / "data" / "nope.mp4")  # reported as a video error by the episode


def test_longvideobench_json_only_copy_parses(tmp_path):
    """LongVideoBench's own ``lvb_val.json`` (no parquet): the options are a ``candidates`` list."""
    import json

    rows = [{"video_id": "86CxyhFV9MI", "question": "What is the man holding?", "id": "86CxyhFV9MI_0",
             "candidates": ["a cup", "a phone", "a book", "a pen"], "correct_choice": 2,
             "video_path": "86CxyhFV9MI.mp4", "subtitle_path": "86CxyhFV9MI_en.json", "duration_group": 600,
             "question_category": "S2E", "duration": 527.1}]  # fmt: skip
    (tmp_path / "lvb_val.json").write_text(json.dumps(rows))
    # the copy's other json files: the unlabelled test split and the subtitles (not rows of the validation split)
    (tmp_path / "lvb_test_wo_gt.json").write_text(
        json.dumps([{**rows[0], "id": "t_0", "correct_choice": None}])
    )
    (tmp_path / "subtitles").mkdir()
    (tmp_path / "subtitles" / "86CxyhFV9MI_en.json").write_text(json.dumps([{"start": 0.0, "line": "hi"}]))
    (s,) = B.to_samples("longvideobench", read_rows(str(tmp_path), "validation"), B.Context("/m"))
    assert s.error is None
    assert (s.id, s.gold, s.letters) == ("86CxyhFV9MI_0", "C", "ABCD")
    assert s.question.splitlines()[2:6] == ["A. a cup", "B. a phone", "C. a book", "D. a pen"]
    assert s.video == "/m/videos/86CxyhFV9MI.mp4"


def test_eval_and_rewards_import_structure():
    """The eval registry, runner and stage never import the synthetic-data package, and the rule
    scorer and the LLM judge do not import each other (token F1 lives in rewards/f1.py)."""
    import subprocess
    import sys

    probe = (
        "import sys, importlib\n"
        "for m in ('paravt_core.eval.benchmarks', 'paravt_core.eval.runner', 'paravt_core.eval.stage'):\n"
        "    importlib.import_module(m)\n"
        "assert not [m for m in sys.modules if m.startswith('paravt_core.synth')], 'eval imported synth'\n"
        "importlib.import_module('paravt_core.rewards.accuracy')\n"
        "assert 'paravt_core.rewards.judge' not in sys.modules, 'accuracy imported judge'\n"
        "del sys.modules['paravt_core.rewards.accuracy']\n"
        "importlib.import_module('paravt_core.rewards.judge')\n"
        "assert 'paravt_core.rewards.accuracy' not in sys.modules, 'judge imported accuracy'\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
