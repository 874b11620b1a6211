"""The release's readers score the headline under error_rule=release (ours
beside it), MMVU's release headline is over every item, comparability names every condition the release's
run differs in, and ``paravt eval rescore`` re-reads saved records offline.

Expected values are worked out by hand from the release (EvolvingLMMs-Lab/ParaVT at cf55249):
``paravt/eval/utils.py`` ``extract_letter`` (lines 110-129), ``extract_time_from_response`` (132-169),
``temporal_iou`` (172-175), ``load_samples`` MMVU (376-429: every item ``is_mcq``), ``run_dataset`` (706-711:
accuracy = correct / every result, a failed sample's ``correct`` is False); ``paravt/eval/driver.py`` ``_score``
(307-317: the letter must equal the stripped gold; grounding: IoU, 0 when nothing is read)."""

from __future__ import annotations

import json

import pytest

from paravt_core.eval.metrics import benchmark_metrics, headline
from paravt_core.eval.readers import release_interval, release_iou, release_letter, release_score
from paravt_core.rewards.accuracy import parse_interval, read_mcq_letter

# (reply, the release's letter, ours). Each release value follows extract_letter's steps in order:
LETTERS = [
    # no <answer> (line 113); not one letter (121); no "answer is" (123); first stand-alone A-J (126): the
    # article "A" inside the think text. Ours reads the final statement "B".
    ("<think>A person walks in.</think>B", "A", "B"),
    # "是" is a word character, so "B" has no word boundary before it (126); last resort: first char (129)
    ("答案是B", "答", "B"),
    # the FIRST <answer> body (113-117); ours: the last
    ("<answer>A</answer> wait, no: <answer>B</answer>", "A", "B"),
    # "Based": no stand-alone letter; first character "B" (129): right by accident when the gold is B
    ("Based on the video, none fits.", "B", None),
    # the hedge: "I" is a letter A-J standing alone (126); ours refuses the hedge
    ("I think it is A or B", "I", None),
    # agreements: a stand-alone letter in the answer body (118), "answer is" (123)
    ("<answer>(C) green</answer>", "C", "C"),
    ("The answer is C", "C", "C"),
    ("", "", None),
]


@pytest.mark.parametrize(("reply", "release", "ours"), LETTERS)
def test_release_letter_follows_extract_letter_line_by_line(reply, release, ours):
    assert release_letter(reply) == release
    assert read_mcq_letter(reply)[0] == ours


# (reply, the release's [start, end], ours)
INTERVALS = [
    # the first "a - b" anywhere, think text included (153-157); ours: the answer outside the think block
    ("<think>maybe 2 - 5</think> The event happens in the 10.0 - 12.5 seconds.", [2.0, 5.0], (10.0, 12.5)),
    # a <time> tag first, clock times (142-152)
    ("<time>00:19.7 - 00:25.6</time>", [19.7, 25.6], (19.7, 25.6)),
    # start/end keywords, taken as they come, even end < start (158-165)
    ("start: 30, end: 20", [30.0, 20.0], (20.0, 30.0)),
    # the first "a - b" runs backwards: not searched further, the first two numbers win (166-168)
    ("5 - 3 seconds, I mean 3 - 5", [5.0, 3.0], (3.0, 5.0)),
    ("no times here", None, None),
]


@pytest.mark.parametrize(("reply", "release", "ours"), INTERVALS)
def test_release_interval_follows_extract_time_from_response(reply, release, ours):
    assert release_interval(reply) == release
    assert parse_interval(reply) == ours


def test_release_score_compares_with_the_stripped_gold_and_scores_intervals_by_its_iou():
    assert release_score("<answer>B</answer>", "mcq", " B ") == (1.0, "B")
    # MMVU open-ended under the release: a letter against free text; right only when the gold is that character
    assert release_score("<answer>blue</answer>", "oe", "blue") == (0.0, "<")
    assert release_score("5 apples", "oe", "5") == (1.0, "5")
    # [5, 3] against [2, 6]: intersection max(0, min(3, 6) - max(5, 2)) = 0
    assert release_score("5 - 3 seconds", "tvg", "", (2.0, 6.0)) == (0.0, [5.0, 3.0])
    # [2, 5] against [3, 6]: 2 / 4
    assert release_score("2 - 5", "tvg", "", (3.0, 6.0)) == (0.5, [2.0, 5.0])
    assert release_score("nothing", "tvg", "", (3.0, 6.0)) == (0.0, None)


def _rec(reply, gold, score, qtype="mcq", **meta):
    return {"status": "ok", "final_text": reply, "gold": gold, "qtype": qtype, "score": score, "meta": meta,
            "tool_calls": 0}  # fmt: skip


def test_the_headline_uses_the_release_reader_under_its_error_rule_and_keeps_ours_beside_it():
    recs = [
        _rec("<think>A person walks in.</think>B", "B", 1.0),  # release A: wrong; ours B: right
        _rec("答案是B", "B", 1.0),  # release 答: wrong; ours right
        _rec("Based on the video, none fits.", "B", 0.0),  # release B (first char): right; ours unread
        _rec("<answer>C</answer>", "C", 1.0),  # both right
        {"status": "error", "score": None, "error": {"reason": "engine_error"}, "meta": {}},
    ]
    m = benchmark_metrics("videomme", recs, "release")
    # release reader, errors wrong: 2 right of 5 = 40.0; ours, errors wrong: 3 of 5 = 60.0
    assert (m["reader"], m["headline"], headline(m)) == ("release", "accuracy_errors_as_wrong", 40.0)
    assert (m["accuracy_release"], m["accuracy_robust"], m["reader_differences"]) == (40.0, 60.0, 3)
    ours = benchmark_metrics("videomme", recs)  # error rule paravt: our reader, errors left out
    assert (ours["reader"], headline(ours), ours["accuracy_release"]) == ("robust", 75.0, 50.0)
    # the reader is a choice of its own (paravt eval rescore --reader robust)
    assert headline(benchmark_metrics("videomme", recs, "release", "robust")) == 60.0


def test_charades_headline_reads_intervals_as_the_release_does():
    recs = [
        _rec("<think>maybe 2 - 5</think> The event happens in the 10.0 - 12.5 seconds.", "", 1.0, "tvg"),
        _rec("The event happens in the 10.0 - 12.5 seconds.", "", 1.0, "tvg"),
    ]
    for r in recs:
        r["gold_interval"] = [10.0, 12.5]
    m = benchmark_metrics("charades", recs, "release")
    # release: IoU([2, 5], [10, 12.5]) = 0 and 1 -> 50.0; ours: 1 and 1 -> 100.0
    assert (m["headline"], headline(m), m["miou_robust"], m["reader_differences"]) == (
        "miou_errors_as_zero", 50.0, 100.0, 1)  # fmt: skip


def test_mmvu_release_headline_is_every_item_with_open_ended_read_as_letters_and_errors_wrong():
    """A mixed MMVU run: 3 multiple choice (2 right), 2 open-ended -> ours 66.7, the
    release 40.0 (open-ended gold is free text: the letter read never equals it)."""
    mc = {"kind": "multiple-choice"}
    oe = {"kind": "open-ended"}
    recs = [
        _rec("<answer>B</answer>", "B", 1.0, **mc),
        _rec("<answer>C</answer>", "C", 1.0, **mc),
        _rec("<answer>A</answer>", "D", 0.0, **mc),
        {**_rec("<answer>A</answer>", "blue", 1.0, "oe", **oe), "score_source": "judge"},
        {
            "status": "error",
            "score": None,
            "final_text": "<answer>A</answer>",
            "gold": "photosynthesis",
            "qtype": "oe",
            "error": {"reason": "judge_timeout"},
            "meta": oe,
        },  # fmt: skip
    ]
    m = benchmark_metrics("mmvu", recs, "release")
    assert (m["headline"], headline(m)) == ("accuracy_errors_as_wrong", 40.0)  # 2 of 5
    assert m["mc_accuracy_errors_as_wrong"] == pytest.approx(200 / 3)  # MC only, beside it
    # a judge that timed out is an error of our reader only: the release reads the letter (wrong), no error
    assert (m["errors"], m["oe_scored_by"], m["oe_comparable"]) == (0, ["release"], True)
    ours = benchmark_metrics("mmvu", recs)
    assert (ours["headline"], headline(ours), ours["errors"]) == ("mc_accuracy", pytest.approx(200 / 3), 1)
    # our reader under the release's rule: 3 right (2 MC + the judged open-ended) of 5, the judge error wrong
    assert m["accuracy_robust"] == 60.0


# ---------------------------------------------------------------------------------------------------------
# Item 5: comparability names each condition the release's run differs in.


def _results(config, model="ParaVT-8B", rule="release", reader="release"):
    from paravt_core.eval import report

    m = benchmark_metrics("videomme", [_rec("<answer>B</answer>", "B", 1.0)], rule, reader)
    return {"preset": "release", "error_rule": rule, "reader": reader, "prompt_protocol": "release-v1",
            "prompt_checksum": report.release_checksum(), "published_model": model, "config": config,
            "protocols": {"agentic": {"videomme": m}}}  # fmt: skip


RELEASE_CONFIG = {"engine": {"kind": "openai"}, "benchmarks": [{"name": "videomme", "limit": None}],
                  "demo_data": "", "agent": {"question_suffix": True, "frame_path": "qwen-vl-utils"}}  # fmt: skip


@pytest.mark.parametrize(
    ("change", "model", "named"),
    [
        ({"engine": {"kind": "transformers"}}, "ParaVT-8B", "engine.kind=transformers, not a server"),
        ({"benchmarks": [{"name": "videomme", "limit": 5}]}, "ParaVT-8B", "rows overridden (limit=5)"),
        ({"benchmarks": [{"name": "videomme", "split": "dev"}]}, "ParaVT-8B", "rows overridden (split=dev)"),
        ({"benchmarks": [{"name": "videomme", "source": "/d"}]}, "ParaVT-8B", "rows overridden (source=/d)"),
        ({"agent": {"question_suffix": False, "frame_path": "qwen-vl-utils"}}, "ParaVT-8B",
         "agent.question_suffix=false"),
        ({}, "LongVT-RFT-7B", "published_model=LongVT-RFT-7B: its release prompt (agentic_longvt) is an unfilled"),
        ({"agent": {"question_suffix": True}}, "ParaVT-8B", "frames: ours (swscale to the 32-px grid, PNG"),
    ],
)  # fmt: skip
def test_comparability_names_each_failed_condition(change, model, named):
    from paravt_core.eval.report import comparability

    assert comparability(_results(RELEASE_CONFIG), "videomme") == ""
    why = comparability(_results({**RELEASE_CONFIG, **change}, model), "videomme")
    assert why.startswith("not comparable: ") and named in why and why.count("; ") == 0


def test_preset_release_brings_the_release_frame_path_whatever_the_base_agent_says():
    from paravt_core.agent.config import AgentConfig
    from paravt_core.eval.protocols import preset_agent
    from paravt_core.eval.report import comparability

    assert preset_agent("release", AgentConfig()).frame_path == "qwen-vl-utils"
    assert AgentConfig().frame_path == "decoder"
    base = {
        **RELEASE_CONFIG,
        "preset": "release",
        "agent": {"question_suffix": True, "frame_path": "decoder"},
    }
    assert comparability(_results(base), "videomme") == ""


def test_comparability_names_every_failure_at_once_and_the_reader():
    from paravt_core.eval.report import comparability

    bad = {"engine": {"kind": "transformers"}, "benchmarks": [{"name": "videomme", "limit": 2}],
           "agent": {"question_suffix": False}}  # fmt: skip
    why = comparability(_results(bad, "LongVT-RFT-7B", reader="robust"), "videomme")
    assert why.count("; ") == 5  # reader, engine, rows, suffix, model protocol, frames
    assert "reader=robust: answers read by ours, not the release's extract_letter" in why


# ---------------------------------------------------------------------------------------------------------
# The stage records both readers on every sample, and paravt eval rescore re-reads the saved records.

THINK_A_THEN_B = "<think>A person walks in.</think>B"
CHARADES_THINK = "<think>Maybe 0 - 1.</think>The event happens in the 1.0 - 3.0 seconds."


def _run(tmp_path, tiny_model, eval_fixtures):
    from pathlib import Path

    from paravt_core.eval.stage import run
    from tests.support.eval_support import KeyedEngine, fixture_entry, tiny_eval_config

    benches = [fixture_entry(eval_fixtures, n) for n in ("videomme", "mmvu", "charades")]
    engine = KeyedEngine(
        tiny_model.processor, {"a red circle appears": [CHARADES_THINK]}, default=THINK_A_THEN_B
    )
    cfg = tiny_eval_config(tmp_path, "tiny", benches, preset="release", published_model="ParaVT-8B",
                           runner={"concurrency": 2, "retries": 0, "backoff_s": 0.0})  # fmt: skip
    run(cfg, engine=engine, processor=tiny_model.processor)
    out = Path(cfg.output)
    return json.loads((out / "results.json").read_text()), out


def test_stage_records_both_readers_and_the_report_shows_both(tiny_model, eval_fixtures, tmp_path):
    results, out = _run(tmp_path, tiny_model, eval_fixtures)
    assert results["reader"] == "release"
    first = [json.loads(line) for line in (out / "samples/agentic/videomme.jsonl").read_text().splitlines()]
    assert {(r["release_prediction"], r["prediction"]) for r in first} == {("A", "B")}
    assert all(r["letters"] == "ABCD" for r in first)
    vm = results["protocols"]["agentic"]["videomme"]
    # golds B, C, B: the release reads "A" everywhere (0 of 3); ours "B" (2 of 3)
    assert (headline(vm), vm["accuracy_robust"], vm["reader_differences"]) == (0.0, pytest.approx(200 / 3), 2)
    ch = results["protocols"]["agentic"]["charades"]
    # FXA01 [1, 3]: the release reads [0, 1] in the think text (IoU 0), ours [1, 3] (IoU 1); FXB02 nothing read
    assert (headline(ch), ch["miou_robust"], ch["reader_differences"]) == (0.0, 50.0, 1)
    mmvu = results["protocols"]["agentic"]["mmvu"]
    # MC gold B, open-ended "blue": the release reads "A" for both -> 0 of 2 over every item
    assert (mmvu["headline"], headline(mmvu), mmvu["samples"]) == ("accuracy_errors_as_wrong", 0.0, 2)
    html = (out / "report.html").read_text()
    assert "release reader: 0.0 · robust reader: 66.7 (2 read differently)" in html


def test_rescore_rereads_saved_records_offline_with_either_reader(
    tiny_model, eval_fixtures, tmp_path, capsys
):
    from paravt_core.cli import main

    _, out = _run(tmp_path, tiny_model, eval_fixtures)
    # the records as an older reader left them: every score 0, no release fields
    path = out / "samples/agentic/videomme.jsonl"
    old = [json.loads(line) for line in path.read_text().splitlines()]
    for r in old:
        r["score"] = 0.0
        del r["release_score"], r["release_prediction"]
    path.write_text("".join(json.dumps(r) + "\n" for r in old))
    before = (out / "results.json").read_bytes()

    assert main(["eval", "rescore", str(out), "--reader", "robust"]) == 0
    printed = "".join(capsys.readouterr())  # the stage console writes to stderr
    again = json.loads((out / "rescored/robust/results.json").read_text())
    vm = again["protocols"]["agentic"]["videomme"]
    assert (again["reader"], headline(vm), vm["accuracy_release"]) == ("robust", pytest.approx(200 / 3), 0.0)
    assert "videomme" in printed and "66.7" in printed and (out / "rescored/robust/report.html").exists()
    assert (out / "results.json").read_bytes() == before  # the run's own outputs are not touched

    assert main(["eval", "rescore", str(out)]) == 0  # the run's reader: the release's under its error rule
    rel = json.loads((out / "rescored/release/results.json").read_text())
    assert headline(rel["protocols"]["agentic"]["videomme"]) == 0.0
    assert main(["eval", "rescore", str(tmp_path / "nothing")]) != 0
    assert "holds no results.json" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------
# Files read as the release read them under preset=release (the others are named in docs/eval-release-protocol.md).


def test_release_overview_frames_carry_no_timestamps_without_the_tool_either():
    """driver.py ``_video_user_content`` (lines 388-416): image_url frames, no labels, in every prompt mode."""
    from paravt_core.agent.config import AgentConfig
    from paravt_core.eval import benchmarks as B
    from paravt_core.eval.protocols import agent_config

    mcq, tvg = B.Sample("videomme", "1"), B.Sample("charades", "2", qtype="tvg")
    for protocol in ("direct", "reasoning", "agentic"):
        assert (
            agent_config(protocol, B.get("videomme"), mcq, AgentConfig(), "release").overview_labels is False
        )
        assert (
            agent_config(protocol, B.get("charades"), tvg, AgentConfig(), "release").overview_labels is True
        )
        assert agent_config(protocol, B.get("videomme"), mcq, AgentConfig(), "paravt").overview_labels is True


def test_release_preset_waits_as_long_as_the_release_client(tiny_model_dir):
    """utils.py run_shard (line 616) / driver.py OPENAI_TIMEOUT_S (line 206): 1800 s per request; ours 600 s."""
    from paravt_core.eval.config import EvalConfig
    from paravt_core.eval.stage import build_engine

    engine = {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"}
    release, _ = build_engine(EvalConfig(model=tiny_model_dir, preset="release", engine=engine))
    ours, _ = build_engine(EvalConfig(model=tiny_model_dir, engine=engine))
    assert (release.timeout_s, ours.timeout_s) == (1800.0, 600.0)


# The release's readers, each case followed through the release's paravt/eval/utils.py step by step:
# extract_letter (lines 110-129), extract_time_from_response (132-169), temporal_iou (172-175), and
# paravt/eval/driver.py _score (307-317).

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
