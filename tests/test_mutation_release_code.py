"""Issue 41 item 3: the code issues 38 and 40 added, pinned down where its first mutation run found behaviours no
test checked (docs/mutation.md, "Code added by issues 38 and 40"). Every expected value is worked out by hand:
the reader cases from the release (EvolvingLMMs-Lab/ParaVT at cf55249) ``paravt/eval/utils.py``
``extract_letter`` (lines 110-129), ``extract_time_from_response`` (132-169), ``temporal_iou`` (172-175) and
``paravt/eval/driver.py`` ``_score`` (307-317); the comparability lines from ``eval/report.py``'s own texts."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest
import torch

from paravt_core.eval import report
from paravt_core.eval.readers import release_interval, release_iou, release_letter, release_score
from paravt_core.eval.report import comparability
from paravt_core.train import media

# ---------------------------------------------------------------------------------------------------------
# eval/report.py: comparability and _config_differences, whole lines.

PRESET = "preset=paravt, not release (the published numbers come from the release's driver)"
RULE = "error_rule=paravt: errors left out of the denominator (the release scores them wrong)"
READER = "reader=robust: answers read by ours, not the release's extract_letter"
ENGINE = "engine.kind=transformers, not openai (the release queries a vLLM server)"
SUFFIX = "agent.question_suffix=false (the release appends the video path to every agentic question)"
DEMO = "rows from demo_data fixtures, not the benchmark"
MMVU_F1 = "MMVU open-ended items scored by token F1, not the judge or the release's reader"
CHARADES = "the release feeds Charades as video_url (vLLM decodes the whole video server-side); ours sends 64 labelled frames"  # fmt: skip
ALIGNED = "subtitles aligned to the sampled frames (lmms-eval's), not every cue as the release gave them"


def _release(**over):
    """Results the release's in everything comparability checks (no config: the config checks are skipped)."""
    return {"preset": "release", "error_rule": "release", "reader": "release",
            "prompt_checksum": report.release_checksum(), "protocols": {}, **over}  # fmt: skip


def test_comparability_defaults_of_an_old_results_file_name_ours_in_order():
    # a results.json written before these keys existed: preset paravt, no checksum (prompts None, digest ""),
    # error rule paravt, reader robust; joined by "; " after one "not comparable: "
    assert comparability({"protocols": {}}, "videomme") == (
        f"not comparable: {PRESET}; prompts None () are not the release's release-v1; {RULE}; {READER}"
    )


def test_comparability_charades_subtitles_and_mmvu_lines_are_whole():
    assert comparability(_release(), "videomme") == ""
    assert comparability(_release(), "charades") == f"not comparable: {CHARADES}"
    aligned = _release(protocols={"agentic": {"videomme_wsub": {"subtitles": "aligned"}}})
    assert comparability(aligned, "videomme_wsub") == f"not comparable: {ALIGNED}"
    f1 = {"oe_scored_by": ["f1"], "oe_comparable": False}
    # named once even when two protocols scored MMVU's open-ended items by token F1
    two = _release(protocols={"direct": {"mmvu": f1}, "agentic": {"mmvu": dict(f1)}})
    assert comparability(two, "mmvu") == f"not comparable: {MMVU_F1}"
    # the judge (comparable) or no open-ended item scored: nothing to name; the MMVU rule is MMVU's only
    assert (
        comparability(_release(protocols={"agentic": {"mmvu": {**f1, "oe_comparable": True}}}), "mmvu") == ""
    )
    assert comparability(_release(protocols={"agentic": {"mmvu": {"oe_comparable": False}}}), "mmvu") == ""
    assert comparability(_release(protocols={"agentic": {"videomme": f1}}), "videomme") == ""


def test_config_differences_lines_are_whole_and_read_only_this_benchmarks_rows():
    config = {
        # no engine section: transformers, the default engine
        "benchmarks": [{"name": "mlvu"}, {"name": "videomme", "limit": 5, "split": "dev"}],
        "demo_data": "/fixtures",
        "agent": {"question_suffix": False, "frame_path": "qwen-vl-utils"},
    }
    rows = "rows overridden (limit=5, split=dev): the release runs the registry's whole split"
    assert report._config_differences(config, "videomme", "ParaVT-8B") == [ENGINE, rows, DEMO, SUFFIX]
    assert (
        comparability(_release(config=config), "videomme")
        == f"not comparable: {ENGINE}; {rows}; {DEMO}; {SUFFIX}"
    )
    # the other benchmark's overrides are not this one's (and mlvu's entry, first, has none)
    other = {**config, "benchmarks": [{"name": "mlvu", "limit": 3}, {"name": "videomme"}]}
    assert report._config_differences(other, "videomme", None) == [ENGINE, DEMO, SUFFIX]


@pytest.mark.parametrize("engine", [{}, {"kind": None}, None])
def test_config_differences_without_an_engine_kind_name_transformers(engine):
    config = {"engine": engine, "agent": {"frame_path": "qwen-vl-utils"}}
    expected = (
        [ENGINE]
        if engine != {"kind": None}
        else ["engine.kind=None, not openai (the release queries a vLLM server)"]
    )
    assert report._config_differences(config, "videomme", None) == expected


# ---------------------------------------------------------------------------------------------------------
# eval/readers.py: the release's readers, each case followed through utils.py step by step.

LETTER_CASES = [
    # the <answer> body first (line 113-117): without it the first stand-alone A-J, "I", would win (126)
    ("I see a dog. <answer>B</answer>", "B"),
    # a one-character body that is no letter: no stand-alone A-J in it or in the text; the first character (129)
    ("<answer>x</answer>", "<"),
    # "AB" is a substring of "ABCDEFGHIJ" but two characters: not returned whole (116); no word boundary
    # between A and B (118, 126); the first character
    ("<answer>AB</answer>", "<"),
    # the same rule for the whole reply (120-121): "CD" is not one letter; first character "C"
    ("CD", "C"),
]


@pytest.mark.parametrize(("reply", "letter"), LETTER_CASES)
def test_release_letter_single_letter_rules(reply, letter):
    assert release_letter(reply) == letter


INTERVAL_CASES = [
    # the <time> body before the whole reply (142-143): the reply's own first range is 0 - 1
    ("0 - 1 then <time>3 - 4</time>", [3.0, 4.0]),
    # clock times are minutes x 60 + seconds (147-149): 1:05.5 = 65.5, 2:10 = 130
    ("<time>1:05.5 - 2:10</time>", [65.5, 130.0]),
    # a clock range must run forwards (150): 1:00 - 1:00 is refused; the bare-number range then reads "00 - 1"
    ("1:00 - 1:00", [0.0, 1.0]),
    # and end under an hour (150): 60:00 = 3600 is refused; the bare-number range reads "00 - 60"
    ("59:00 - 60:00", [0.0, 60.0]),
    ("59:00 - 59:59.5", [3540.0, 3599.5]),
    # the bare-number range's start is its first number (153-155); the reply's first two numbers differ
    ("Around 7 s: 2 - 5", [2.0, 5.0]),
    # a bare range that does not run forwards is refused (156); the start/end keywords then (158-165)
    ("start 1, end 2: 3 - 3", [1.0, 2.0]),
    # a start without an end: the first two numbers (164-168)
    ("start: 4, then 9", [4.0, 9.0]),
]


@pytest.mark.parametrize(("reply", "interval"), INTERVAL_CASES)
def test_release_interval_fallback_order(reply, interval):
    assert release_interval(reply) == interval


def test_release_iou_is_over_the_hull_and_zero_for_an_empty_one():
    # [4, 8] with [2, 6]: intersection 6 - 4 = 2, hull 8 - 2 = 6
    assert release_iou([4.0, 8.0], [2.0, 6.0]) == pytest.approx(1 / 3)
    # a hull under a second still divides: [1, 1.5] with itself is 0.5 / 0.5
    assert release_iou([1.0, 1.5], [1.0, 1.5]) == 1.0
    # a hull of length 0 (two equal points) or less: 0 (line 175), no division
    assert release_iou([3.0, 3.0], [3.0, 3.0]) == 0.0
    assert release_iou([5.0, 3.0], [4.0, 2.0]) == 0.0  # hull max(3, 2) - min(5, 4) = -1


def test_release_score_of_no_reply_reads_nothing():
    # driver.py _score on an empty final reply: extract_letter("") = "" (129), extract_time_from_response -> None
    assert release_score(None, "mcq", "B") == (0.0, "")
    assert release_score(None, "tvg", "", (1.0, 2.0)) == (0.0, None)


# ---------------------------------------------------------------------------------------------------------
# train/media.py: merge_media by hand (a stand-in embedding table; the tower's output as float32, as a bf16 /
# float32 tower hands it to a model whose embeddings are in another dtype).


def _model(rows):
    table = torch.nn.Embedding.from_pretrained(torch.tensor(rows, dtype=torch.float64))
    return SimpleNamespace(model=SimpleNamespace(language_model=SimpleNamespace(embed_tokens=table)))


def _part(tokens, *layers):
    """An encode_media output: one item's merged tokens and its deepstack features, float32."""
    f32 = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
    return SimpleNamespace(pooler_output=[f32(tokens)], deepstack_features=[[f32(x)] for x in layers])


def test_merge_media_scatters_in_the_embeddings_dtype_and_orders_deepstack_rows_by_position():
    model = _model([[0.0, 0.5], [1.0, 1.5], [2.0, 2.5], [3.0, 3.5]])
    ids = torch.tensor([[0, 1, 2, 3]])
    # position 1 a video token, position 2 an image token (mm_token_type_ids 2 and 1)
    types = torch.tensor([[0, 2, 1, 0]])
    encoded = {"image": _part([[10, 11]], [[1, 2]], [[3, 4]]), "video": _part([[20, 21]], [[5, 6]], [[7, 8]])}
    out = media.merge_media(model, ids, types, encoded)
    assert out["inputs_embeds"].dtype == torch.float64
    assert out["inputs_embeds"].tolist() == [[[0.0, 0.5], [20.0, 21.0], [10.0, 11.0], [3.0, 3.5]]]
    assert out["visual_pos_masks"].tolist() == [[False, True, True, False]]
    # per layer, the visual positions in sequence order: the video row (position 1), then the image row
    assert [t.tolist() for t in out["deepstack_visual_embeds"]] == [[[5, 6], [1, 2]], [[7, 8], [3, 4]]]
    # one kind only: its own mask and layers, the embeddings' dtype again
    only = media.merge_media(model, ids, torch.tensor([[0, 0, 1, 0]]), {"image": encoded["image"]})
    assert only["inputs_embeds"].dtype == torch.float64
    assert only["inputs_embeds"][0, 2].tolist() == [10.0, 11.0]
    assert only["visual_pos_masks"].tolist() == [[False, False, True, False]]
    assert [t.tolist() for t in only["deepstack_visual_embeds"]] == [[[1, 2]], [[3, 4]]]
    assert list(media.merge_media(model, ids, torch.zeros(1, 4, dtype=torch.long), {})) == ["inputs_embeds"]


def test_merge_media_refuses_images_and_videos_with_different_deepstack_depths():
    # one tower makes both, so the depths agree; were they to differ, no layer may be dropped silently
    model = _model([[0.0, 0.5], [1.0, 1.5], [2.0, 2.5]])
    encoded = {"image": _part([[10, 11]], [[1, 2]], [[3, 4]]), "video": _part([[20, 21]], [[5, 6]])}
    with pytest.raises(ValueError, match="zip"):
        media.merge_media(model, torch.tensor([[0, 1, 2]]), torch.tensor([[0, 1, 2]]), encoded)


# ---------------------------------------------------------------------------------------------------------
# eval/rescore.py: records re-read by both readers, by hand; a run written by hand (no model) re-scored.

THINK_A_THEN_B = (
    "<think>A person walks in.</think>B"  # the release reads "A" (first stand-alone A-J), ours "B"
)


def _rescored(record):
    from paravt_core.eval.rescore import rescore_record

    return asyncio.run(rescore_record(record))


def test_rescore_record_reads_the_final_reply_with_both_readers():
    rec = {"id": 7, "benchmark": "videomme", "status": "ok", "final_text": THINK_A_THEN_B, "gold": "B",
           "qtype": "mcq", "letters": "ABCD", "score": 0.0, "question": None}  # fmt: skip
    out = _rescored(rec)
    assert "release_score" not in rec and rec["score"] == 0.0  # the record given is not changed
    assert {k: out[k] for k in ("release_score", "release_prediction", "prediction", "score")} == {
        "release_score": 0.0, "release_prediction": "A", "prediction": "B", "score": 1.0}  # fmt: skip
    assert (out["score_source"], out["score_reason"]) == ("mcq", None)
    # the record's option letters reach our reader (C is out of A-B); the release checks no range
    ab = _rescored({**rec, "final_text": "<answer>C</answer>", "gold": "C", "letters": "AB"})
    assert (ab["release_score"], ab["release_prediction"]) == (1.0, "C")
    assert (ab["score"], ab["prediction"], ab["score_reason"]) == (0.0, "C", "letter_out_of_range")
    # no qtype and no letters: a multiple-choice item with any letter allowed
    bare = _rescored({"id": "x", "status": "ok", "final_text": "<answer>E</answer>", "gold": "E"})
    assert (bare["release_score"], bare["score"], bare["prediction"], bare["score_source"]) == (
        1.0,
        1.0,
        "E",
        "mcq",
    )


def test_rescore_record_grounding_open_ended_errors_and_records_without_a_reply():
    tvg = {"id": 1, "status": "ok", "qtype": "tvg", "gold": "", "gold_interval": [10.0, 12.5], "score": 0.0,
           "final_text": "<think>maybe 2 - 5</think> The event happens in the 10.0 - 12.5 seconds."}  # fmt: skip
    out = _rescored(tvg)
    # release: [2, 5] from the think text, IoU 0 with [10, 12.5]; ours: [10, 12.5], IoU 1
    assert (out["release_score"], out["release_prediction"]) == (0.0, [2.0, 5.0])
    assert (out["score"], out["prediction"], out["score_source"]) == (1.0, [10.0, 12.5], "tvg")
    # open-ended: the judge's score stays; the release reads a letter against the stripped gold
    oe = {"id": 2, "status": "ok", "qtype": "oe", "gold": " A ", "final_text": "<answer>A</answer>",
          "score": 0.7, "score_source": "judge"}  # fmt: skip
    out = _rescored(oe)
    assert (out["release_score"], out["release_prediction"], out["score"], out["score_source"]) == (
        1.0, "A", 0.7, "judge")  # fmt: skip
    # an error stays an error for our reader (no score, no prediction); the release reads its reply
    err = {"id": 3, "status": "error", "qtype": "mcq", "gold": "B", "final_text": "B", "score": None}
    out = _rescored(err)
    assert (out["release_score"], out["score"], "prediction" in out) == (1.0, None, False)
    # no final reply at all: the record itself, untouched
    none = {"id": 4, "status": "error", "final_text": None}
    assert _rescored(none) is none


def _hand_run(tmp_path):
    """A finished eval output written by hand (records, then the stage's own write_outputs): videomme, gold B,
    under error_rule=release; its records as an older reader left them (score 0, no release fields)."""
    from paravt_core.eval.config import EvalConfig
    from paravt_core.eval.stage import write_outputs

    out = tmp_path / "run"
    cfg = EvalConfig.model_validate({"model": "m", "output": str(out), "benchmarks": [{"name": "videomme"}],
                                     "error_rule": "release", "judge": {"enabled": False}})  # fmt: skip
    ok = {"benchmark": "videomme", "status": "ok", "gold": "B", "qtype": "mcq", "letters": "ABCD", "score": 0.0,
          "meta": {}, "tool_calls": 0}  # fmt: skip
    records = [
        {**ok, "id": "1", "final_text": THINK_A_THEN_B},  # release A (wrong), ours B (right)
        {**ok, "id": "2", "final_text": "<answer>C</answer>"},  # both C: wrong
        {
            "benchmark": "videomme",
            "id": "3",
            "status": "error",
            "final_text": None,
            "score": None,
            "meta": {},
            "error": {"reason": "engine_error"},
        },  # fmt: skip
    ]
    path = out / "samples" / "agentic" / "videomme.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    write_outputs(cfg, str(out), {"agentic": {"videomme": records}}, 1.0)
    return out


def test_rescore_a_hand_written_run_with_either_reader(tmp_path):
    from paravt_core.eval.metrics import headline
    from paravt_core.eval.rescore import RescoreError, rescore

    out = _hand_run(tmp_path)
    before = (out / "results.json").read_bytes()
    robust = rescore(str(out), "robust", work=str(tmp_path / "work"))
    vm = robust["protocols"]["agentic"]["videomme"]
    # errors wrong (the run's rule): ours 1 right of 3, the release 0 of 3; read differently: record 1 only
    assert (robust["reader"], headline(vm), vm["accuracy_release"], vm["reader_differences"]) == (
        "robust", pytest.approx(100 / 3), 0.0, 1)  # fmt: skip
    assert json.loads((out / "rescored/robust/results.json").read_text()) == robust
    # no reader given: the run's own (auto: the release's under its error rule)
    release = rescore(str(out), work=str(tmp_path / "work"))
    assert (release["reader"], headline(release["protocols"]["agentic"]["videomme"])) == ("release", 0.0)
    assert (out / "rescored/release/results.json").is_file()
    assert (out / "results.json").read_bytes() == before  # the run's own outputs are not touched
    with pytest.raises(RescoreError, match=r"^/nowhere holds no results\.json: not a finished eval output "
                       r"\(run paravt eval first\)$"):  # fmt: skip
        rescore("/nowhere")


def test_rescore_reads_a_benchmark_without_records_as_none(tmp_path):
    from paravt_core.eval.rescore import _local_records

    out = _hand_run(tmp_path)
    assert [r["id"] for r in _local_records(str(out), "samples/agentic/videomme.jsonl", str(tmp_path))] == ["1", "2", "3"]  # fmt: skip
    assert _local_records(str(out), "samples/agentic/mlvu.jsonl", str(tmp_path)) == []


def test_rescore_downloads_records_from_s3_into_its_work_folder(s3_bucket, tmp_path):
    from paravt_core import storage
    from paravt_core.eval.rescore import _local_records, rescore

    local = _hand_run(tmp_path)
    remote = f"{s3_bucket}/run"
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        storage.write_bytes(f"{remote}/{path.relative_to(local)}", path.read_bytes())
    work = tmp_path / "work"
    recs = _local_records(remote, "samples/agentic/videomme.jsonl", str(work))
    assert [r["id"] for r in recs] == ["1", "2", "3"]
    assert (work / "rescore" / "samples/agentic/videomme.jsonl").is_file()  # read from the local copy
    assert rescore(remote, "robust", work=str(work))["reader"] == "robust"
    assert storage.exists(f"{remote}/rescored/robust/results.json")


def test_readers_table_and_its_console_print(capsys):
    from paravt_core.eval.rescore import print_readers, readers_table

    results = {"reader": "release", "protocols": {"agentic": {
        "videomme": {"headline": "accuracy_errors_as_wrong", "accuracy_release": 40.0, "accuracy_robust": 62.5,
                     "reader_differences": 3},
        "charades": {"headline": "miou_errors_as_zero", "miou_release": 50.0}}}}  # fmt: skip
    assert readers_table(results) == [
        ("agentic", "videomme", "accuracy_errors_as_wrong", 40.0, 62.5, 3),
        ("agentic", "charades", "miou_errors_as_zero", 50.0, None, 0),
    ]
    print_readers(results, "/out/rescored/release")
    printed = capsys.readouterr().err  # the stage console writes to stderr
    assert "paravt eval rescore (headline reader: release)" in printed
    for header in (
        "protocol",
        "benchmark",
        "headline metric",
        "release reader",
        "robust reader",
        "read differently",
    ):
        assert header in printed
    rows = [line for line in printed.splitlines() if "agentic" in line]
    cells = [[c.strip() for c in line.strip("│┃ ").split("│")] for line in rows]
    assert cells == [["agentic", "videomme", "accuracy_errors_as_wrong", "40.0", "62.5", "3"],
                     ["agentic", "charades", "miou_errors_as_zero", "50.0", "–", "0"]]  # fmt: skip
    # numbers to the right of their cells, names to the left
    # (each cell padded to its header's width: "release reader" is wider than "40.0", "protocol" than "agentic")
    row = rows[0].split("│")
    assert row[4].endswith(" 40.0 ") and row[4].startswith("   ")
    assert row[1].startswith(" agentic ") and row[3].startswith(" accuracy_errors_as_wrong")
    assert "re-scored results, metrics and report in /out/rescored/release" in printed


# ---------------------------------------------------------------------------------------------------------
# video/release_frames.py: what the server receives is the frames through JPEG 85 (utils.py pil_to_b64,
# lines 45-48), by default, for the overview and for a crop; a crop carries its window.


def test_release_frames_go_through_jpeg_85_by_default_and_a_crop_keeps_its_window(tmp_path):
    from paravt_core.synth import Event, write_video
    from paravt_core.video import release_frames as R

    video = tmp_path / "v.mp4"
    write_video(
        video, [Event("circle", "red", 0.5, 2.5, (10, 10, 60, 50))], 3.0, 30.0, (160, 120)
    )  # 90 frames
    raw, sent = R.overview(video, 64, jpeg=False), R.overview(video, 64)
    # 120 x 160 is under the overview's 100,352 px: beta = sqrt(19,200 / 100,352) = 0.4374; ceil(274.3 / 28) x 28
    # = 280, ceil(365.8 / 28) x 28 = 392
    assert tuple(raw.frames.shape) == (64, 3, 280, 392) and raw.indices[:3] == [0, 1, 3]  # round(k x 89 / 63)
    assert torch.equal(sent.frames, R.jpeg_round_trip(raw.frames)) and not torch.equal(
        sent.frames, raw.frames
    )
    assert (sent.window, sent.requested) == (None, None)
    # get_frames' default is 64 frames too (fail-soft only where qwen-vl-utils fails)
    assert torch.equal(R.overview_fail_soft(video).frames, sent.frames)
    # crop 0.5-2.5 s at 30 fps: frames ceil(15) = 15 to floor(75) = 75, 61 frames = 2.03 s -> 2 frames; 120 x 160
    # fits 784-50,176 px: round to the 28-px grid, 112 x 168
    crop_raw, crop = R.crop(video, 0.5, 2.5, jpeg=False), R.crop(video, 0.5, 2.5)
    assert (crop.indices, tuple(crop.frames.shape)) == ([15, 75], (2, 3, 112, 168))
    assert torch.equal(crop.frames, R.jpeg_round_trip(crop_raw.frames))
    assert (crop.window, crop.requested) == ((0.5, 2.5), (0.5, 2.5))


def test_release_frames_decode_with_the_callers_cache_and_name_a_bad_time(tmp_path):
    from paravt_core.synth import Event, write_video
    from paravt_core.video import release_frames as R
    from paravt_core.video.decoder import DecoderCache
    from paravt_core.video.errors import CropError, InvalidTimeError, InvalidWindowError

    video = tmp_path / "v.mp4"
    write_video(video, [Event("circle", "red", 0.5, 2.5, (10, 10, 60, 50))], 3.0, 30.0, (160, 120))
    for make in (lambda c: R.overview_fail_soft(video, cache=c), lambda c: R.crop(video, 0.5, 2.5, cache=c)):
        cache = DecoderCache()
        make(cache)
        # the caller's cache decoded them (its handles and tables are reused)
        assert cache.stats.frames_out > 0
    # run_crops: a window with no frame range is returned as a CropError naming it; its sibling is served
    good, bad = R.run_crops(video, [(0.5, 2.5), (2.0, 2.0)])
    assert good.indices == [15, 75]
    assert isinstance(bad, CropError) and (bad.start, bad.end) == (2.0, 2.0)
    assert str(bad) == "the window 2-2 s holds no frame range (60 to 60)"  # ceil(60) = floor(60)
    assert isinstance(bad.cause, InvalidWindowError) and str(bad.cause) == str(bad)
    # fail-soft: 90 frames cannot give 100 (qwen-vl-utils raises; get_frames sends none): empty uint8 frames
    empty = R.overview_fail_soft(video, 100)
    assert (tuple(empty.frames.shape), empty.frames.dtype, empty.timestamps, empty.indices) == (
        (0, 3, 28, 28), torch.uint8, [], [])  # fmt: skip
    with pytest.raises(
        InvalidTimeError,
        match=r"^start_time must be seconds \(e\.g\. 12\.5\) or MM:SS or HH:MM:SS, got 'soon'$",
    ):
        R.crop(video, "soon", 2.0)
    with pytest.raises(
        InvalidTimeError,
        match=r"^end_time must be seconds \(e\.g\. 12\.5\) or MM:SS or HH:MM:SS, got 'later'$",
    ):
        R.crop(video, 0.5, "later")
