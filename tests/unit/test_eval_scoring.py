"""Scoring hand-made predictions (hedged, multi-letter, empty, malformed, out of range) and the metrics of
hand-made records. Expected values are worked out by hand next to each case."""

from __future__ import annotations

import asyncio

import pytest

from paravt_core.eval.benchmarks import Sample
from paravt_core.eval.metrics import benchmark_metrics, headline
from paravt_core.eval.scoring import prediction_of, score_sample
from paravt_core.rewards.judge import Judge
from tests.support.judge_test_server import ScriptedChatServer

MCQ = Sample("videomme", "q1", question="Q", gold="B", qtype="mcq", letters="ABCD")
TVG = Sample("charades", "q2", question="Q", gold="1.0, 3.0", qtype="tvg")
OE = Sample("mmvu", "q3", question="What colour is the square?", gold="blue", qtype="oe")


def _score(sample, prediction, judge=None):
    return asyncio.run(score_sample(sample, prediction, judge))


@pytest.mark.parametrize(
    ("prediction", "score", "reason"),
    [
        ("<answer>B</answer>", 1.0, None),
        ("<think>the circle comes first</think><answer>(B) a red circle</answer>", 1.0, None),
        ("The answer is B.", 1.0, None),  # no tags: the plain text is read
        ("<answer>A or B</answer>", 0.0, "hedged_letter"),
        ("<answer>A, B</answer>", 0.0, "hedged_letter"),  # two letters
        ("<answer>B/C</answer>", 0.0, "hedged_letter"),
        ("<answer></answer>", 0.0, "empty_answer"),
        ("", 0.0, "empty_answer"),
        ("<answer>E</answer>", 0.0, "letter_out_of_range"),  # only A-D exist
        ("<answer>it is the red one</answer>", 0.0, "unparseable_letter"),
        ("<answer>B</answer> wait <answer>C</answer>", 0.0, None),  # the last answer counts: C != B
        ("<answer>B", 1.0, None),  # cut before </answer>: the stray tag is dropped, the letter B stays
        ("<answer>A B</answer>", 0.0, "hedged_letter"),  # normalizes to "b" but names two letters
    ],
)
def test_multiple_choice(prediction, score, reason):
    result = _score(MCQ, prediction)
    assert (result.score, result.reason, result.error) == (score, reason, None)


@pytest.mark.parametrize(
    ("prediction", "score"),
    [
        ("<answer>The event happens in the 2.0 - 4.0 seconds.</answer>", 1 / 3),  # [2,3] of [1,4]
        ("<answer>1.0 to 3.0</answer>", 1.0),
        ("<answer>0:01 - 0:03</answer>", 1.0),
        ("<answer>3.0 - 1.0</answer>", 1.0),  # reversed pair
        ("<answer>5 - 6</answer>", 0.0),  # disjoint
        ("<answer>somewhere in the middle</answer>", 0.0),
    ],
)
def test_grounding_iou(prediction, score):
    assert _score(TVG, prediction).score == pytest.approx(score)


def test_grounding_unparseable_reason():
    assert _score(TVG, "<answer>no idea</answer>").reason == "unparseable_interval"


def test_open_ended_without_judge_is_token_f1():
    assert _score(OE, "<answer>blue</answer>").score == 1.0
    # tokens {dark, blue} vs {blue}: precision 1/2, recall 1 -> F1 = 2*(1/2)/(3/2) = 2/3
    result = _score(OE, "<answer>dark blue</answer>")
    assert (result.score, result.source) == (pytest.approx(2 / 3), "f1")


def _judge(server):
    return Judge(
        server.base_url, "judge", api_key="k", timeout_s=5, max_retries=0, backoff_s=0.0, deadline_s=10
    )


def test_open_ended_goes_to_the_judge():
    with ScriptedChatServer(reply="1.0") as server:
        result = _score(OE, "<answer>navy</answer>", _judge(server))
        assert server.attempts == 1
    assert (result.score, result.source, result.error) == (1.0, "judge", None)


def test_judge_down_is_an_error_not_a_score():
    with ScriptedChatServer(status=503) as server:
        result = _score(OE, "<answer>navy</answer>", _judge(server))
    assert (result.score, result.error) == (None, "judge_error")


def test_multiple_choice_never_asks_the_judge():
    with ScriptedChatServer(status=503) as server:
        result = _score(MCQ, "<answer>B</answer>", _judge(server))
        assert server.attempts == 0
    assert result.score == 1.0


def test_the_final_reply_decides():
    """docs/method.md §7: an earlier turn's <answer>A</answer> never overrides the final reply "C"
    (the forced answer of the release scores C)."""
    assert prediction_of("The answer is C") == "The answer is C"
    assert _score(MCQ, prediction_of("C")).parsed == "C"
    assert _score(MCQ, prediction_of("<answer>B</answer>")).score == 1.0


# ------------------------------------------------------------------------------------------------ metrics


def _rec(score, **meta):
    return {"status": "ok", "score": score, "meta": meta, "tool_calls": meta.pop("calls", 0), "qtype": "mcq"}


def _err(reason):
    return {"status": "error", "score": None, "error": {"reason": reason}, "meta": {}}


def test_videomme_accuracy_excludes_errors_and_breaks_down_by_duration():
    records = [
        _rec(1.0, duration="short"),
        _rec(0.0, duration="short"),
        _rec(1.0, duration="medium"),
        _rec(1.0, duration="long", calls=3),
        _err("engine_timeout"),
    ]
    m = benchmark_metrics("videomme", records)
    assert m["accuracy"] == 75.0  # 3 right of 4 scored; the error is not a wrong answer
    assert m["accuracy_errors_as_wrong"] == 60.0  # 3 of 5 (the lower bound)
    assert m["by_duration"] == {"short": 50.0, "medium": 100.0, "long": 100.0}
    assert (m["samples"], m["scored"], m["errors"]) == (5, 4, 1)
    assert m["errors_by_reason"] == {"engine_timeout": 1}
    assert m["avg_tool_calls"] == 0.75 and m["tool_use_rate"] == 25.0  # calls [0,0,0,3]


def test_mlvu_micro_and_macro():
    records = [_rec(1.0, task_type="plotQA"), _rec(1.0, task_type="plotQA"), _rec(1.0, task_type="plotQA"),
               _rec(0.0, task_type="count")]  # fmt: skip
    m = benchmark_metrics("mlvu", records)
    assert m["micro"] == 75.0  # 3 of 4
    assert m["macro"] == 50.0  # mean(plotQA 100, count 0)
    assert m["by_task_type"] == {"count": 0.0, "plotQA": 100.0}
    # the published MLVU number is the release's micro accuracy; lmms-eval's M-avg is shown beside it
    assert (m["headline"], m["accuracy"], m["m_avg"]) == ("accuracy", 75.0, 50.0)


def test_charades_miou_and_recalls():
    records = [_rec(0.2), _rec(0.5), _rec(0.8), _err("video_error")]
    m = benchmark_metrics("charades", records)
    assert m["miou"] == pytest.approx(50.0)  # (0.2 + 0.5 + 0.8) / 3
    assert m["r@0.3"] == pytest.approx(200 / 3)  # 0.5, 0.8
    assert m["r@0.5"] == pytest.approx(200 / 3)  # 0.5 (>=), 0.8
    assert m["r@0.7"] == pytest.approx(100 / 3)  # 0.8
    assert m["headline"] == "miou" and m["errors"] == 1


def test_mmvu_mc_and_open_ended():
    records = [
        _rec(1.0, kind="multiple-choice"),
        _rec(0.0, kind="multiple-choice"),
        _rec(0.5, kind="open-ended"),
    ]
    m = benchmark_metrics("mmvu", records)
    assert (m["mc_accuracy"], m["oe_accuracy"], m["accuracy"]) == (50.0, 50.0, 50.0)


def test_mmvu_headline_is_multiple_choice_and_f1_open_ended_is_not_comparable():
    mc = [
        _rec(1.0, kind="multiple-choice"),
        _rec(1.0, kind="multiple-choice"),
        _rec(0.0, kind="multiple-choice"),
    ]
    f1 = {**_rec(0.5, kind="open-ended"), "qtype": "oe", "score_source": "f1"}
    m = benchmark_metrics("mmvu", [*mc, f1])
    assert (m["headline"], m["mc_accuracy"], m["oe_accuracy"]) == (
        "mc_accuracy",
        pytest.approx(200 / 3),
        50.0,
    )
    assert m["oe_scored_by"] == ["f1"] and m["oe_comparable"] is False
    assert any("not comparable" in n for n in m["notes"])
    judged = benchmark_metrics("mmvu", [*mc, {**f1, "score_source": "judge", "score": 1.0}])
    assert judged["oe_comparable"] is True and judged["oe_accuracy"] == 100.0


def test_longvideobench_unparseable_answers_are_wrong_and_counted():
    records = [
        _rec(1.0),
        {**_rec(0.0), "score_reason": "unparseable_letter"},
        {**_rec(0.0), "score_reason": None},
    ]
    m = benchmark_metrics("longvideobench", records)
    assert (m["accuracy"], m["unparseable_as_wrong"]) == (pytest.approx(100 / 3), 1)  # 1 right of 3; 1 unread
    assert "random letter" in m["notes"][0]


def test_all_errors_gives_no_accuracy_rather_than_zero():
    m = benchmark_metrics("lvbench", [_err("video_error"), _err("video_error")])
    assert m["accuracy"] is None and m["errors"] == 2


# ------------------------------------------------------------------ metrics: mutation survivors
# Each test pins what a reader of results.json sees, with the numbers worked out by hand in the comments.


def test_accuracy_beside_errors_and_of_no_records_by_hand():
    # 3 scored samples 1, 0, 1 + 1 error -> accuracy 2/3 = 66.67, errors 1, errors-as-wrong 2/4 = 50.0
    m = benchmark_metrics("lvbench", [_rec(1.0), _rec(0.0), _rec(1.0), _err("engine_timeout")])
    assert (m["accuracy"], m["errors"], m["accuracy_errors_as_wrong"]) == (pytest.approx(200 / 3), 1, 50.0)
    # no records at all: nothing to divide by, so no number (not 0, not a ZeroDivisionError)
    empty = benchmark_metrics("lvbench", [])
    assert (empty["samples"], empty["accuracy"], empty["accuracy_errors_as_wrong"]) == (0, None, None)
    assert (empty["avg_tool_calls"], empty["tool_use_rate"]) == (None, None)


@pytest.mark.parametrize("bench", ["videomme", "videomme_wsub"])
def test_videomme_duration_groups_read_short_medium_long(bench):
    # the subtitles variant is broken down the same way; groups in the order short, medium, long
    # (not alphabetical: long, medium, short). short 1,0 -> 50; medium 1 -> 100; long 0,0,1 -> 33.33
    records = [_rec(0.0, duration="long"), _rec(1.0, duration="medium"), _rec(1.0, duration="short"),
               _rec(0.0, duration="long"), _rec(0.0, duration="short"), _rec(1.0, duration="long")]  # fmt: skip
    m = benchmark_metrics(bench, records)
    assert list(m["by_duration"].items()) == [
        ("short", 50.0),
        ("medium", 100.0),
        ("long", pytest.approx(100 / 3)),
    ]


def test_longvideobench_duration_groups_and_the_unparseable_note():
    # duration_group 15: right, unparseable, hedged -> 1/3; 3600: empty answer, wrong letter -> 0/2
    records = [
        _rec(1.0, duration_group="15"),
        {**_rec(0.0, duration_group="15"), "score_reason": "unparseable_letter"},
        {**_rec(0.0, duration_group="15"), "score_reason": "hedged_letter"},
        {**_rec(0.0, duration_group="3600"), "score_reason": "empty_answer"},
        {**_rec(0.0, duration_group="3600"), "score_reason": None},
    ]
    m = benchmark_metrics("longvideobench", records)
    assert m["by_duration_group"] == {"15": pytest.approx(100 / 3), "3600": 0.0}
    assert (m["accuracy"], m["unparseable_as_wrong"]) == (20.0, 3)  # 1 right of 5; 3 answers name no option
    assert m["notes"] == [
        "3 unparseable answer(s) counted wrong; the release reads the reply's first character for them (right "
        "when it is the gold letter) and lmms-eval's LongVideoBench parser answers a random letter (about 1 in 4-5 "
        "of them right by chance)"
    ]


def test_longvideobench_duration_groups_read_shortest_first():
    # one record per group, longest first; 60 s is right -> 100, the others 0
    records = [_rec(float(g == "60"), duration_group=g) for g in ("3600", "600", "60", "15")]
    groups = benchmark_metrics("longvideobench", records)["by_duration_group"]
    assert list(groups.items()) == [("15", 0.0), ("60", 100.0), ("600", 0.0), ("3600", 0.0)]


def test_mlvu_micro_and_m_avg_on_an_unbalanced_mix_and_its_note():
    # plotQA 1,1,1,0 -> 75; count 0 -> 0; needle 1,1 -> 100
    # micro (headline) = 5 right of 7 = 71.43; M-avg = (75 + 0 + 100) / 3 = 58.33
    records = [*(_rec(s, task_type="plotQA") for s in (1.0, 1.0, 1.0, 0.0)), _rec(0.0, task_type="count"),
               _rec(1.0, task_type="needle"), _rec(1.0, task_type="needle")]  # fmt: skip
    m = benchmark_metrics("mlvu", records)
    assert (m["headline"], m["micro"]) == ("accuracy", pytest.approx(500 / 7))
    assert m["m_avg"] == m["macro"] == pytest.approx(175 / 3)
    assert m["notes"] == [
        "headline: micro accuracy over all questions (the release's driver, published number); "
        "M-avg over task types (lmms-eval's MLVU score) beside it"
    ]
    # only errors: no task type was scored, so there is no M-avg (rather than a division by zero)
    only_errors = benchmark_metrics("mlvu", [_err("video_error")])
    assert (only_errors["micro"], only_errors["m_avg"], only_errors["by_task_type"]) == (None, None, {})


MMVU_NOTE = "headline: multiple-choice accuracy; open-ended items apart"
NOT_COMPARABLE = " (scored by token F1, not by the LLM judge: not comparable)"


@pytest.mark.parametrize(
    ("oe_sources", "comparable", "note"),
    [
        ([], False, MMVU_NOTE),  # no open-ended item: nothing to flag
        (["judge"], True, MMVU_NOTE),  # judged: comparable, no flag
        (["f1"], False, MMVU_NOTE + NOT_COMPARABLE),  # no judge: token F1
        (["judge", "f1_fallback"], False, MMVU_NOTE + NOT_COMPARABLE),  # the judge fell back on one item
    ],
)
def test_mmvu_note_flags_open_ended_not_scored_by_the_judge(oe_sources, comparable, note):
    records = [_rec(1.0, kind="multiple-choice"), _rec(0.0, kind="multiple-choice")]
    records += [{**_rec(1.0, kind="open-ended"), "qtype": "oe", "score_source": s} for s in oe_sources]
    m = benchmark_metrics("mmvu", records)
    assert (m["headline"], m["mc_accuracy"]) == ("mc_accuracy", 50.0)  # 1 of 2 multiple-choice
    assert (m["oe_scored_by"], m["oe_comparable"], m["notes"]) == (sorted(oe_sources), comparable, [note])


def test_error_reasons_finish_reasons_and_tool_use_by_hand():
    records = [
        {**_rec(1.0, calls=0), "finish_reason": "stop"},
        {**_rec(0.0, calls=1), "finish_reason": "stop"},
        {**_rec(1.0, calls=2), "finish_reason": "length"},
        {**_rec(0.0, calls=1), "finish_reason": "stop"},
        {**_err("engine_timeout"), "finish_reason": "abort"},
        {"status": "error", "score": None},  # an error record without its error / finish reason
    ]
    m = benchmark_metrics("videomme", records)
    assert m["errors_by_reason"] == {"engine_timeout": 1, "None": 1}
    assert m["finish_reasons"] == {"stop": 3, "length": 1, "abort": 1, "None": 1}  # over all 6 records
    # calls of the 4 scored samples 0, 1, 2, 1: 3 of 4 used the tool (one call is enough) -> 75.0; mean 1.0
    assert (m["tool_use_rate"], m["avg_tool_calls"]) == (75.0, 1.0)


def test_headline_value_per_benchmark():
    charades = benchmark_metrics("charades", [_rec(0.3), _rec(0.7)])  # mIoU (0.3 + 0.7) / 2 = 50
    mmvu = benchmark_metrics("mmvu", [_rec(1.0, kind="multiple-choice"), {**_rec(0.0, kind="open-ended")}])
    mlvu = benchmark_metrics(
        "mlvu", [_rec(1.0, task_type="a"), _rec(1.0, task_type="a"), _rec(0.0, task_type="b")]
    )
    assert (charades["headline"], headline(charades)) == ("miou", pytest.approx(50.0))
    # IoUs exactly on a threshold count (R@t is IoU >= t): R@0.3 2/2, R@0.5 1/2 (0.7), R@0.7 1/2 (0.7)
    assert [charades[f"r@{t}"] for t in (0.3, 0.5, 0.7)] == [100.0, 50.0, 50.0]
    assert (mmvu["headline"], headline(mmvu)) == ("mc_accuracy", 100.0)  # the open-ended 0 stays apart
    assert (mlvu["headline"], headline(mlvu)) == ("accuracy", pytest.approx(200 / 3))  # micro, not M-avg 50
    # metrics that name no headline (written before it existed) read as accuracy
    assert headline({"accuracy": 40.0, "miou": 10.0}) == 40.0
    assert headline({}) is None
