"""``eval/rescore.py``: saved records re-read offline by either reader, whole runs rescored from a folder or
from S3, and the readers table. Values worked out by hand; no model runs: the eval output is written by hand and
by the stage's own ``write_outputs``."""

from __future__ import annotations

import asyncio
import json

import pytest

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
    # the gold interval reaches the release's reader too: [10, 12.5] read outside any think text, IoU 1
    both = _rescored({**tvg, "final_text": "The event happens in the 10.0 - 12.5 seconds."})
    assert (both["release_score"], both["release_prediction"], both["score"]) == (1.0, [10.0, 12.5], 1.0)
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
    # an empty reply of a record without a gold: the release reads "" and compares it with the gold "" (right);
    # ours reads no letter (wrong)
    empty = _rescored({"id": 5, "status": "ok", "final_text": ""})
    assert (empty["release_score"], empty["release_prediction"], empty["score"]) == (1.0, "", 0.0)
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
    import time

    started = time.perf_counter()
    robust = rescore(str(out), "robust", work=str(tmp_path / "work"))
    took = time.perf_counter() - started
    # the re-scoring's own time: inside the call's (a bound, not a speed: any machine passes it)
    assert 0.0 <= robust["elapsed_s"] <= round(took, 3) + 0.001
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


def test_rescore_downloads_records_from_s3_into_its_work_folder(s3_bucket, tmp_path, monkeypatch):
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
    # no work folder given: ./paravt-work/eval-rescore under the working directory
    monkeypatch.chdir(tmp_path)
    assert rescore(remote, "release")["reader"] == "release"
    assert (tmp_path / "paravt-work/eval-rescore/rescore/samples/agentic/videomme.jsonl").is_file()


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
    (header,) = [line for line in printed.splitlines() if "protocol" in line]
    assert [c.strip() for c in header.strip("│┃ ").split("┃")] == [
        "protocol", "benchmark", "headline metric", "release reader", "robust reader", "read differently"]  # fmt: skip
    rows = [line for line in printed.splitlines() if "agentic" in line]
    cells = [[c.strip() for c in line.strip("│┃ ").split("│")] for line in rows]
    assert cells == [["agentic", "videomme", "accuracy_errors_as_wrong", "40.0", "62.5", "3"],
                     ["agentic", "charades", "miou_errors_as_zero", "50.0", "–", "0"]]  # fmt: skip
    # numbers to the right of their cells, names to the left
    # (each cell padded to its header's width: "release reader" is wider than "40.0", "protocol" than "agentic")
    row = rows[0].split("│")
    assert row[4].endswith(" 40.0 ") and row[4].startswith("   ")
    assert row[1].startswith(" agentic ") and row[2].startswith(" videomme ")
    assert row[3].startswith(" accuracy_errors_as_wrong")
    assert "re-scored results, metrics and report in /out/rescored/release" in printed
