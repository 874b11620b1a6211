"""Sharded eval: 3 shards merged report exactly what one unsharded run reports on the same
inputs; shards are slices by id, not by position; the merge refuses an incomplete set and names what is missing.

Both runs go through the real stage (rows of every fixture benchmark in their real schemas, the agent loop,
scoring, metrics, report) with the scripted engine, whose replies depend only on the question, so the two runs
get the same answers whatever order the samples run in."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from paravt_core import storage
from paravt_core.eval.records import shard_of
from paravt_core.eval.stage import EvalError, _samples_by_bench, run, select_shard
from tests.support.eval_support import KeyedEngine, tiny_eval_config

# Fixture sizes (paravt_core/eval/fixtures.py): 25 samples per protocol over 8 benchmarks.
PER_PROTOCOL = 25
SHARDS = 3
# Right, wrong, partially right (Charades IoU 0.5) and failing answers, so every metric has something to show.
SCRIPT: dict[str, list[Any]] = {
    "a red circle appears": ["<answer>The event happens in the 1.0 - 3.0 seconds.</answer>"],  # IoU 1
    "a yellow circle appears": [
        "<answer>The event happens in the 5.0 - 6.0 seconds.</answer>"
    ],  # [5,6]/[5,7]
    "What colour is the circle in the video?": ["<answer>C</answer>"],  # right (gold C)
    "What colour is the triangle?": [RuntimeError("backend down")],  # an engine error, counted apart
    "What colour is the square?": ["<answer>blue</answer>"],
}
# Timing fields: the only things allowed to differ between two runs of the same samples.
TIMING = {"latency_s", "wall_s"}


def _engine(processor: Any) -> KeyedEngine:
    return KeyedEngine(processor, {k: list(v) for k, v in SCRIPT.items()}, default="<answer>B</answer>")


def _records(root: Path) -> dict[str, list[dict]]:
    out = {}
    for path in sorted((root / "samples").rglob("*.jsonl")):
        recs = [json.loads(line) for line in path.read_text().splitlines()]
        out[f"{path.parent.name}/{path.stem}"] = sorted(
            ({k: v for k, v in r.items() if k not in TIMING} for r in recs), key=lambda r: r["id"]
        )
    return out


def _diff_paths(a: Any, b: Any, prefix: str = "") -> set[str]:
    """Dotted paths where two JSON values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: set[str] = set()
        for k in a.keys() | b.keys():
            path = f"{prefix}.{k}" if prefix else str(k)
            out |= _diff_paths(a.get(k), b.get(k), path) if k in a and k in b else {path}
        return out
    return set() if a == b else {prefix}


def _without_elapsed(html: str) -> str:
    # the report's one timing: "<code version> · <elapsed> s"
    stripped, n = re.subn(r" · [0-9]+\.[0-9] s</td>", " · – s</td>", html)
    assert n == 1
    return stripped


def test_three_shards_merged_report_equals_the_unsharded_report(tiny_model, eval_fixtures, tmp_path):
    common = {"protocols": ["agentic", "direct"], "runner": {"concurrency": 4, "retries": 0, "backoff_s": 0.0},
              "work_dir": str(tmp_path / "work")}  # fmt: skip
    whole = tiny_eval_config(tmp_path / "whole", "tiny", eval_fixtures, **common)
    run(whole, engine=_engine(tiny_model.processor), processor=tiny_model.processor)

    sharded = tmp_path / "sharded"
    for i in range(SHARDS):  # each shard on its own "machine": a fresh engine
        cfg = tiny_eval_config(sharded, "tiny", eval_fixtures, shard=f"{i}/{SHARDS}", **common)
        run(cfg, engine=_engine(tiny_model.processor), processor=tiny_model.processor)
    merge = tiny_eval_config(sharded, "tiny", eval_fixtures, merge=True, expected_shards=SHARDS, **common)
    run(merge, engine=_engine(tiny_model.processor), processor=tiny_model.processor)

    a, b = Path(whole.output), Path(merge.output)
    # every shard did part of the work, and the parts are disjoint
    per_shard = [_records(b / "shards" / f"{i}-of-{SHARDS}") for i in range(SHARDS)]
    ids = [
        (key, r["id"]) for recs in per_shard for key in recs if key.startswith("agentic/") for r in recs[key]
    ]
    assert all(per_shard) and len(ids) == len(set(ids)) == PER_PROTOCOL

    # the per-sample records are the same (timing aside): same answers, scores and errors
    assert _records(a) == _records(b)
    results_a = json.loads((a / "results.json").read_text())
    results_b = json.loads((b / "results.json").read_text())
    assert results_a["totals"] == {"samples": 2 * PER_PROTOCOL, "scored": 2 * PER_PROTOCOL - 2, "errors": 2,
                                   "error_share": 2 / (2 * PER_PROTOCOL)}  # fmt: skip
    assert results_a["protocols"]["agentic"]["charades"]["miou"] == 75.0  # (1 + 0.5) / 2
    # results.json: equal but for the elapsed time and the run's own settings (where it wrote, how it ran)
    assert _diff_paths(results_a, results_b) == {"elapsed_s", "config.output", "config.merge",
                                                 "config.expected_shards"}  # fmt: skip
    # metrics and plots byte for byte; the report page but for its elapsed time
    assert (a / "metrics.json").read_bytes() == (b / "metrics.json").read_bytes()
    plots = sorted(p.name for p in (a / "plots").iterdir())
    assert plots == ["accuracy.png", "charades_iou.png", "tool_calls.png"]
    for name in plots:
        assert (a / "plots" / name).read_bytes() == (b / "plots" / name).read_bytes(), name
    assert _without_elapsed((a / "report.html").read_text()) == _without_elapsed(
        (b / "report.html").read_text()
    )
    assert storage.is_complete(str(a)) and storage.is_complete(str(b))


def test_a_shard_is_a_slice_by_id_not_by_position(eval_fixtures, tmp_path):
    import dataclasses

    cfg = tiny_eval_config(tmp_path, "tiny", eval_fixtures)
    samples = _samples_by_bench(cfg, str(tmp_path / "work"))

    def shard_ids(by_bench: dict, i: int) -> dict[str, list[str]]:
        return {b: sorted(s.id for s in items) for b, items in select_shard(by_bench, (i, SHARDS)).items()}

    reordered = {b: list(reversed(items)) for b, items in samples.items()}
    # a new row in front of every benchmark: the others keep their shard
    grown = {b: [dataclasses.replace(items[0], id=f"new-{b}")] + items for b, items in samples.items()}
    for i in range(SHARDS):
        mine = shard_ids(samples, i)
        # worked out independently: the ids whose hash lands on i
        assert mine == {
            b: sorted(s.id for s in items if shard_of(s.id, SHARDS) == i) for b, items in samples.items()
        }
        assert shard_ids(reordered, i) == mine
        assert {
            b: [x for x in ids if not x.startswith("new-")] for b, ids in shard_ids(grown, i).items()
        } == mine
    together = sorted((b, x) for i in range(SHARDS) for b, ids in shard_ids(samples, i).items() for x in ids)
    assert together == sorted((b, s.id) for b, items in samples.items() for s in items)  # disjoint, covering


def test_merge_names_the_missing_shards_and_ignores_another_count(tiny_model, eval_fixtures, tmp_path):
    benches = [e for e in eval_fixtures if e["name"] in ("synthetic", "mlvu")]  # 8 + 3 samples
    engine = _engine(tiny_model.processor)

    def cfg(**kw):
        return tiny_eval_config(tmp_path, "tiny", benches, **kw)

    # nothing ran yet: every shard is named
    with pytest.raises(EvalError) as err:
        run(cfg(merge=True, expected_shards=3), engine=engine, processor=tiny_model.processor)
    message = str(err.value)
    assert message.startswith("cannot merge: shard(s) 0/3, 1/3, 2/3 of 3 are missing or incomplete")
    assert "\n" not in message and f"{tmp_path / 'eval' / 'shards'}" in message
    with pytest.raises(EvalError, match=r"^cannot merge: no shards under .*; run them first \(shard=i/n\)$"):
        run(cfg(merge=True), engine=engine, processor=tiny_model.processor)  # and no count given
    # an earlier attempt with 2 shards left its directories: the merge of 3 looks only at shards of 3
    run(cfg(shard="0/2"), engine=engine, processor=tiny_model.processor)
    run(cfg(shard="1/3"), engine=engine, processor=tiny_model.processor)
    with pytest.raises(EvalError, match=r"^cannot merge: shard\(s\) 0/3, 2/3 of 3 are missing or incomplete"):
        run(cfg(merge=True, expected_shards=3), engine=engine, processor=tiny_model.processor)
    with pytest.raises(EvalError, match=r"found \[2, 3\]; set expected_shards"):  # no count: ambiguous
        run(cfg(merge=True), engine=engine, processor=tiny_model.processor)
    for i in (0, 2):
        run(cfg(shard=f"{i}/3"), engine=engine, processor=tiny_model.processor)
    run(cfg(merge=True, expected_shards=3), engine=engine, processor=tiny_model.processor)
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert results["totals"]["samples"] == 11
    with pytest.raises(EvalError, match="expected_shards is the shard count of merge=true"):
        run(cfg(expected_shards=3), engine=engine, processor=tiny_model.processor)


def test_results_do_not_depend_on_the_order_records_come_in(tmp_path):
    """Unsharded, records come in the order samples finished; merged, shard by shard. A float sum depends on
    its order (0.1 + 0.2 + 0.3 != 0.3 + 0.2 + 0.1), so the results are computed from the records in id order."""
    from paravt_core.eval.stage import write_outputs

    def rec(i: int, iou: float) -> dict:
        return {"id": f"c{i}", "status": "ok", "score": iou, "finish_reason": "answer", "tool_calls": 0}

    ious = [0.1, 0.2, 0.3]
    assert sum(ious) != sum(reversed(ious))  # the premise
    forward = [rec(i, v) for i, v in enumerate(ious)]
    cfg = tiny_eval_config(tmp_path, "tiny", [], protocols=["direct"])
    got = []
    for name, recs in (("forward", forward), ("reversed", forward[::-1])):
        write_outputs(cfg, str(tmp_path / name), {"direct": {"charades": recs}}, elapsed=1.0)
        got.append((tmp_path / name / "metrics.json").read_bytes())
    assert got[0] == got[1]
    assert (
        json.loads(got[0])["direct.charades.miou"] == (0.1 + 0.2 + 0.3) * 100 / 3
    )  # ids c0, c1, c2 in order
