"""The converters' shared helpers (``benchmarks/base.py``) and the registry's lookups and row accounting
(``benchmarks/registry.py``), on hand-made rows and files; expected values by hand beside each case."""

from __future__ import annotations

from pathlib import Path

import pytest

from paravt_core.eval import benchmarks as B
from paravt_core.eval.benchmarks import base, registry

OPTIONS = ["A. Blue square", "B. Red circle", "C. Green triangle"]


@pytest.mark.parametrize(
    ("answer", "options", "gold"),
    [
        (1, OPTIONS, "B"),  # an index
        (0, OPTIONS, "A"),
        ("C", OPTIONS, "C"),
        ("(C)", OPTIONS, "C"),
        ("C.", OPTIONS, "C"),
        (" b ", ["b", "a"], "A"),  # not an upper-case letter: the text of an option (case-insensitive)
        ("red circle", OPTIONS, "B"),  # an option's text without its letter
        ("Green Triangle", OPTIONS, "C"),
        ("A", [], "A"),  # no options known: A is still a letter
    ],
)
def test_letter_of_reads_a_letter_an_index_or_an_option(answer, options, gold):
    assert base.letter_of(answer, options) == gold


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (3, "answer index 3 outside 3 options"),
        (-1, "answer index -1 outside 3 options"),
        ("D", "answer 'D' is neither an option letter nor an option"),  # D beyond three options
        (True, "answer 'True' is neither an option letter nor an option"),  # a bool is not an index
        ("  ", "answer '' is neither an option letter nor an option"),
    ],
)
def test_letter_of_refuses_what_names_no_option(answer, message):
    with pytest.raises(B.RowError) as err:
        base.letter_of(answer, OPTIONS)
    assert str(err.value) == message


def test_need_refuses_missing_and_blank_fields_only():
    assert (
        base.need({"a": 0}, "a") == 0
        and base.need({"a": []}, "a") == []
        and base.need({"a": " x"}, "a") == " x"
    )
    for row in ({}, {"a": None}, {"a": ""}, {"a": " \n"}):
        with pytest.raises(B.RowError, match=r"^missing field 'a'$"):
            base.need(row, "a")


def test_media_joins_under_the_root_and_passes_absolute_paths_and_uris():
    local, s3 = B.Context("/data/vm"), B.Context("s3://bucket/vm/")
    assert base.media(local, "data/x.mp4") == "/data/vm/data/x.mp4"
    assert base.media(local, 12) == "/data/vm/12"
    assert base.media(local, "/abs/x.mp4") == "/abs/x.mp4"
    assert base.media(local, "https://h/x.mp4") == "https://h/x.mp4"
    assert base.media(s3, "data/x.mp4") == "s3://bucket/vm/data/x.mp4"
    assert base.media(B.Context(""), "data/x.mp4") == "data/x.mp4"


def test_lettered_and_the_sample_question_per_protocol():
    assert base.lettered(["x", "y", "z"]) == "A. x\nB. y\nC. z"
    s = B.Sample("b", "1", question="Q", direct_question="Q direct")
    assert (s.question_for("agentic"), s.question_for("direct"), s.question_for("reasoning")) == (
        "Q",
        "Q direct",
        "Q",
    )
    assert B.Sample("b", "1", question="Q").question_for("direct") == "Q"


def test_video_file_finds_the_container_and_release_names_only_mp4(tmp_path: Path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.mkv").write_bytes(b"x")
    (tmp_path / "data" / "b.mp4").write_bytes(b"x")
    (tmp_path / "data" / "b.webm").write_bytes(b"x")
    ctx = B.Context(str(tmp_path))
    release = B.Context(str(tmp_path), preset="release")
    assert base.video_file(ctx, "data/a") == f"{tmp_path}/data/a.mkv"
    assert base.video_file(ctx, "data/b") == f"{tmp_path}/data/b.mp4"  # .mp4 first
    assert base.video_file(ctx, "data/none") == f"{tmp_path}/data/none.mp4"  # none: .mp4, reported later
    assert base.video_file(B.Context("s3://bkt/vm"), "data/a") == "s3://bkt/vm/data/a.mp4"
    assert base.release_missing_mp4(ctx, "data/a") is None  # ours runs the .mkv
    assert base.release_missing_mp4(release, "data/b") is None
    assert base.release_missing_mp4(release, "data/none") is None  # no copy at all: the episode says so
    assert base.release_missing_mp4(B.Context("s3://bkt/vm", preset="release"), "data/a") is None
    assert base.release_missing_mp4(release, "data/a") == (
        f"video not found: {tmp_path}/data/a.mp4 (preset=release looks only for <videoID>.mp4, as the release's "
        "loader; this copy is a.mkv, which preset=paravt runs)"
    )


def test_registry_lookups_of_a_name_outside_it():
    with pytest.raises(ValueError) as err:
        registry.get("nope")
    assert str(err.value) == (
        "unknown benchmark 'nope'; known: videomme, videomme_wsub, longvideobench, lvbench, mlvu, mmvu, charades, "
        "synthetic"
    )
    assert registry.metrics_of("nope") == B.Metrics() and registry.published_of("nope") == B.Published()
    assert registry.metrics_of("charades") is registry.REGISTRY["charades"].metrics
    assert registry.published_of("videomme").numbers["ParaVT-8B"] == 62.1  # docs/method.md §7's table
    # every benchmark but synth's own dataset, in the registry's order
    assert registry.nightly() == [
        "videomme",
        "videomme_wsub",
        "longvideobench",
        "lvbench",
        "mlvu",
        "mmvu",
        "charades",
    ]


def test_to_samples_names_row_errors_by_their_id_or_position_and_numbers_repeats():
    good = {"question_id": "q", "videoID": "v", "duration": "short", "question": "Q?", "options": ["A. x", "B. y"],
            "answer": "A"}  # fmt: skip
    rows = [
        good,
        dict(good),
        dict(good),
        {"question_id": "", "videoID": "v"},  # an empty id field: the row's position names it
        {"videoID": "v", "question": "Q?"},  # no id field at all
        {"question_id": 7, "videoID": "v"},  # the id as a string
    ]
    samples = registry.to_samples("videomme", rows, B.Context("/m"))
    assert [s.id for s in samples] == ["q", "q#2", "q#3", "row-3", "row-4", "7"]
    assert [s.benchmark for s in samples] == ["videomme"] * 6
    assert [s.error is None for s in samples] == [True, True, True, False, False, False]
    assert samples[4].error == "row_error: missing field 'options'"


def test_videomme_wsub_aligned_keeps_the_cues_of_the_sampled_frames_and_names_a_video_it_cannot_probe(
    tmp_path,
):
    from tests.support.eval_support import SUBTITLED_ROW, write_subtitled_video

    write_subtitled_video(tmp_path)
    srt = tmp_path / "subtitle" / "fxA.srt"
    srt.write_bytes(srt.read_bytes().replace(b"middle", b"mid\xffdle"))  # one undecodable byte: replaced
    # 40 frames at 4 fps; 4 sampled frames are 0, 13, 26, 39 (seconds 0, 3.25, 6.5, 9.75): the cue of 2-3 s
    # covers none of them; 64 sampled frames cover every cue
    (four,) = registry.to_samples(
        "videomme_wsub", [SUBTITLED_ROW], B.Context(str(tmp_path), subtitle_frames=4)
    )
    (every,) = registry.to_samples(
        "videomme_wsub", [SUBTITLED_ROW], B.Context(str(tmp_path), subtitle_frames=64)
    )
    assert four.error is None and every.error is None
    assert "Hi" in four.question and "mid\ufffddle" in four.question and "end" in four.question
    assert "skipped" not in four.question and "skipped" in every.question
    (tmp_path / "data" / "fxA.mp4").unlink()
    (gone,) = registry.to_samples(
        "videomme_wsub", [SUBTITLED_ROW], B.Context(str(tmp_path), subtitle_frames=4)
    )
    assert gone.error.startswith("row_error: subtitle_mode=aligned needs the video's frame count (")


MMVU_MC = {"id": "m1", "video": "https://hub.example/ds/videos/Physics/1.mp4", "question": " Which? ",
           "choices": {"A": "up", "B": "down", "C": ""}, "answer": "B", "question_type": "multiple-choice",
           "metadata": {"subject": "Physics"}}  # fmt: skip


def test_mmvu_rows_lettered_from_their_choices_and_a_metadata_that_is_not_a_mapping():
    odd = {**MMVU_MC, "id": "m2", "metadata": "Physics"}  # a row whose metadata is a plain string: no subject
    mc, plain = registry.to_samples("mmvu", [MMVU_MC, odd], B.Context("/m"))
    assert (mc.video, mc.gold, mc.letters, mc.meta) == (
        "/m/videos/Physics/1.mp4", "B", "AB", {"subject": "Physics", "kind": "multiple-choice"})  # fmt: skip
    assert "A. up\nB. down" in mc.question and "C." not in mc.question  # an empty choice is no option
    assert (plain.error, plain.meta) == (None, {"subject": None, "kind": "multiple-choice"})


def test_mmvu_breakdown_by_hand():
    from paravt_core.eval.benchmarks.mmvu import mmvu_breakdown

    def rec(kind, score, status="ok", source="mcq"):
        qtype = "mcq" if kind == "multiple-choice" else "oe"
        return {
            "status": status,
            "score": score,
            "meta": {"kind": kind},
            "qtype": qtype,
            "score_source": source,
        }

    records = [
        rec("multiple-choice", 1.0),
        rec("multiple-choice", 0.0),
        rec("multiple-choice", None, status="error"),
        rec("open-ended", 1.0, source="f1"),
    ]
    got = mmvu_breakdown(records, {"accuracy": 200.0 / 3}, "paravt")
    # multiple choice: 1 of 2 scored (50 %), 1 of 3 with the error as wrong (33.3 %); open-ended 1 of 1
    assert got.values == {
        "mc_accuracy": 50.0,
        "oe_accuracy": 100.0,
        "mc_accuracy_errors_as_wrong": 100.0 / 3,
        "oe_scored_by": ["f1"],
        "oe_comparable": False,
        "all_items_accuracy": 200.0 / 3,
        "headline": "mc_accuracy",
        "denominator": 2,
    }
    assert got.notes == (
        "headline: multiple-choice accuracy; open-ended items apart (scored by token F1, not by the LLM judge: "
        "not comparable)",
    )


def test_synthetic_rows_become_samples_whole():
    rows = [
        {"id": "s1", "video": "v/a.mp4", "question": "Q1", "answer": "B", "question_type": "mcq",
         "options": ["x", "y", "z"]},
        {"id": "s2", "video": "v/b.mp4", "question": "Q2", "answer": "1.0, 2.0", "question_type": "tvg"},
        {"id": "s3", "video": "v/c.mp4", "question": "Q3", "answer": "red", "question_type": "caption"},
    ]  # fmt: skip
    mc, span, free = registry.to_samples("synthetic", rows, B.Context("/m"))
    assert (mc.video, mc.question, mc.gold, mc.qtype, mc.letters, mc.meta) == (
        "/m/v/a.mp4", "Q1", "B", "mcq", "ABC", {"question_type": "mcq"})  # fmt: skip
    assert (span.gold, span.qtype, span.letters) == ("1.0, 2.0", "tvg", "")
    assert (free.gold, free.qtype, free.meta) == (
        "red",
        "oe",
        {"question_type": "caption"},
    )  # not mcq/tvg: open


def test_fixture_srt_stamps_hours_minutes_seconds_and_milliseconds():
    from paravt_core.eval.benchmarks import fixture_files

    text = fixture_files.srt([(3599.9995, 3661.25, "hi")]).decode()
    # 3599.9995 s rounds to 3,600,000 ms: exactly one hour; 3661.25 s = 1 h 1 min 1 s 250 ms
    assert "1\n01:00:00,000 --> 01:01:01,250\n" in text
