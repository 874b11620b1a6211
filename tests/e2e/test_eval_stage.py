"""The eval stage end to end: every fixture benchmark on the tiny model, reruns, SIGKILL midway, shards and
merge, the error-share gate, and the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from paravt_core import storage
from paravt_core.eval.stage import EvalError, run
from tests.support.eval_support import TINY_AGENT, KeyedEngine, fixture_entry, tiny_eval_config
from tests.support.paths import ROOT

# Fixture sizes (paravt_core/eval/fixtures.py): synthetic 8, videomme 3, videomme_wsub 3, longvideobench 2,
# lvbench 2, mlvu 3, mmvu 2, charades 2 -> 25 samples per protocol.
PER_PROTOCOL = 25
BENCHES = ("synthetic", "videomme", "videomme_wsub", "longvideobench", "lvbench", "mlvu", "mmvu", "charades")


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_fixture_benchmark_on_the_tiny_model_with_and_without_the_tool(
    tiny_model_dir, eval_fixtures, tmp_path
):
    agent = {**TINY_AGENT, "max_new_tokens": 8}
    cfg = tiny_eval_config(tmp_path, tiny_model_dir, eval_fixtures, protocols=["agentic", "direct"], agent=agent,
                           max_error_share=0.0)  # fmt: skip
    result = run(cfg)
    out = Path(cfg.output)
    for protocol in ("agentic", "direct"):
        for bench in BENCHES:
            records = _lines(out / "samples" / protocol / f"{bench}.jsonl")
            assert all(r["status"] == "ok" for r in records)  # the random model answers garbage, never errors
            for key in ("id", "question", "gold", "prediction", "score", "finish_reason", "tool_calls", "turns",
                        "frames", "latency_s", "error"):  # fmt: skip
                assert key in records[0]
    results = json.loads((out / "results.json").read_text())
    assert results["totals"] == {"samples": 2 * PER_PROTOCOL, "scored": 2 * PER_PROTOCOL, "errors": 0,
                                 "error_share": 0.0}  # fmt: skip
    assert set(results["protocols"]["agentic"]) == set(BENCHES)
    assert results["protocols"]["agentic"]["videomme"]["by_duration"].keys() == {"short", "medium", "long"}
    assert {"micro", "macro"} <= results["protocols"]["direct"]["mlvu"].keys()
    assert {"miou", "r@0.3", "r@0.5", "r@0.7"} <= results["protocols"]["agentic"]["charades"].keys()
    assert (
        results["prompt_checksum"]
        and results["model"] == tiny_model_dir
        and results["config"]["demo_data"] == ""
    )
    # every number names its preset, protocol and prompt set, in results.json and the report
    from paravt_core.agent.prompts import load_prompt_set

    checksum = load_prompt_set().checksum
    for protocol, benches in results["protocols"].items():
        for m in benches.values():
            assert m["provenance"] == {"preset": "paravt", "protocol": protocol, "prompt_set": "paravt-v1",
                                       "prompt_checksum": checksum}  # fmt: skip
    report_html = (out / "report.html").read_text()
    assert report_html.count(f"paravt/agentic · paravt-v1 sha256:{checksum[7:19]}") == len(BENCHES)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["total.samples"] == 2 * PER_PROTOCOL and "agentic.charades.miou" in metrics
    assert all(isinstance(v, float) for v in metrics.values())  # what a KFP Metrics artifact accepts
    html = (out / "report.html").read_text()
    # the random model scores 0 everywhere: the accuracy chart would have no bar and is left out, saying so
    assert "videomme_wsub" in html and html.count("data:image/png;base64,") == 2
    assert "The accuracy chart is left out: every headline above is 0" in html
    assert {p.name for p in (out / "plots").iterdir()} == {"tool_calls.png", "charades_iou.png"}
    assert storage.is_complete(str(out)) and result.outputs["results.json"].endswith("results.json")

    # a rerun finds every sample recorded and runs none again
    sizes = {p: p.stat().st_size for p in (out / "samples").rglob("*.jsonl")}
    run(cfg)
    assert {p: p.stat().st_size for p in (out / "samples").rglob("*.jsonl")} == sizes


def test_error_share_gate_fails_after_writing_everything(tiny_model, eval_fixtures, tmp_path):
    charades = fixture_entry(eval_fixtures, "charades")
    (tmp_path / "no-media").mkdir()  # a media root without the videos: every sample's video is missing
    broken = {**fixture_entry(eval_fixtures, "lvbench"), "media_root": str(tmp_path / "no-media")}
    script = {
        "a red circle appears": ["<answer>The event happens in the 1.0 - 3.0 seconds.</answer>"],  # IoU 1
        "a yellow circle appears": [
            "<answer>The event happens in the 5.0 - 6.0 seconds.</answer>"
        ],  # [5,6]/[5,7]
    }
    engine = KeyedEngine(tiny_model.processor, script)
    cfg = tiny_eval_config(tmp_path, "tiny", [charades, broken], max_error_share=0.25)
    with pytest.raises(EvalError) as err:
        run(cfg, engine=engine, processor=tiny_model.processor)
    # 2 lvbench samples have no video: 2 errors of 2 lvbench samples = 100% > 25% (the limit is per benchmark)
    assert str(err.value).startswith(
        "error share above max_error_share 25.0% in agentic.lvbench 100.0% (by reason: {'video_error': 2})"
    )
    out = Path(cfg.output)
    results = json.loads((out / "results.json").read_text())
    assert (
        results["protocols"]["agentic"]["charades"]["miou"] == 75.0
    )  # (1 + 0.5) / 2: the scored half is reported
    assert results["protocols"]["agentic"]["lvbench"]["accuracy"] is None
    assert (out / "report.html").exists() and (out / "metrics.json").exists()
    assert not storage.is_complete(str(out))


def test_shards_merge_only_when_complete(tiny_model, eval_fixtures, tmp_path):
    benches = [fixture_entry(eval_fixtures, n) for n in ("synthetic", "videomme", "mlvu")]  # 8 + 3 + 3 = 14
    engine = KeyedEngine(tiny_model.processor, {}, default="<answer>B</answer>")

    def cfg(**kw):
        return tiny_eval_config(tmp_path, "tiny", benches, **kw)

    run(cfg(shard="0/2"), engine=engine, processor=tiny_model.processor)
    with pytest.raises(EvalError, match=r"cannot merge: shard\(s\) 1/2 of 2 are missing or incomplete"):
        run(cfg(merge=True), engine=engine, processor=tiny_model.processor)
    run(cfg(shard="1/2"), engine=engine, processor=tiny_model.processor)
    out = Path(cfg().output)
    shard_ids = [r["id"] for i in (0, 1) for b in ("synthetic", "videomme", "mlvu")
                 for r in _lines(out / "shards" / f"{i}-of-2" / "samples" / "agentic" / f"{b}.jsonl")]  # fmt: skip
    assert len(shard_ids) == 14 and len(set(shard_ids)) == 14  # disjoint shards covering all
    run(cfg(merge=True), engine=engine, processor=tiny_model.processor)
    merged = [
        r["id"]
        for b in ("synthetic", "videomme", "mlvu")
        for r in _lines(out / "samples" / "agentic" / f"{b}.jsonl")
    ]
    assert sorted(merged) == sorted(shard_ids)
    assert json.loads((out / "results.json").read_text())["totals"]["samples"] == 14


def test_merge_refuses_a_shard_that_lost_samples(tiny_model, eval_fixtures, tmp_path):
    benches = [fixture_entry(eval_fixtures, "videomme")]
    engine = KeyedEngine(tiny_model.processor, {}, default="<answer>B</answer>")
    for shard in ("0/1",):
        run(
            tiny_eval_config(tmp_path, "tiny", benches, shard=shard),
            engine=engine,
            processor=tiny_model.processor,
        )
    path = Path(tmp_path / "eval/shards/0-of-1/samples/agentic/videomme.jsonl")
    path.write_text("".join(line + "\n" for line in path.read_text().splitlines()[:-1]))  # a crashed copy
    with pytest.raises(EvalError, match="agentic/videomme: 1 sample\\(s\\) missing"):
        run(
            tiny_eval_config(tmp_path, "tiny", benches, merge=True),
            engine=engine,
            processor=tiny_model.processor,
        )


def test_sigkill_midway_then_rerun_records_every_sample_exactly_once(tiny_model_dir, eval_fixtures, tmp_path):
    benches = [fixture_entry(eval_fixtures, n) for n in ("synthetic", "videomme")]  # 8 + 3 samples
    cfg = tiny_eval_config(tmp_path, tiny_model_dir, benches, agent={**TINY_AGENT, "max_new_tokens": 16},
                           runner={"concurrency": 1, "retries": 0})  # fmt: skip
    config = tmp_path / "eval.yaml"
    config.write_text(yaml.safe_dump(cfg.model_dump(mode="json", by_alias=True)))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "paravt_core.cli", "eval", "--config", str(config)]
    records = Path(cfg.output) / "samples" / "agentic" / "synthetic.jsonl"

    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if records.exists() and len(records.read_bytes().splitlines()) >= 3:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _lines(records)
    assert 3 <= len(before) < 8
    with open(records, "ab") as fh:  # as if the kill had landed inside a write
        fh.write(b'{"id": "eval-000')

    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    ids = []
    for bench in ("synthetic", "videomme"):
        for line in (Path(cfg.output) / "samples" / "agentic" / f"{bench}.jsonl").read_text().splitlines():
            ids.append(json.loads(line)["id"])  # every line parses: the torn tail was cut
    assert len(ids) == 11 and len(set(ids)) == 11
    assert [r["id"] for r in _lines(records)][: len(before)] == [r["id"] for r in before]  # kept, not redone


def test_cli_config_error_and_help():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    bad = subprocess.run([sys.executable, "-m", "paravt_core.cli", "eval", "runner.concurency=2"], env=env,
                         capture_output=True, text=True)  # fmt: skip
    assert bad.returncode == 2 and "unknown config key 'runner.concurency'" in bad.stderr
    help_text = subprocess.run([sys.executable, "-m", "paravt_core.cli", "eval", "--help"], env=env,
                               capture_output=True, text=True).stdout  # fmt: skip
    assert "max_error_share = 0.05" in help_text and "agent.subagent.temperature = 0.0" in help_text


def test_openai_compatible_server_engine(tiny_model, tiny_model_dir, eval_fixtures, tmp_path):
    """engine.kind=openai against a real OpenAI-compatible server on loopback (the tiny model behind it); its
    first completion fails with 503 and the client's retry absorbs it."""
    from paravt_core.engines.transformers_engine import TransformersEngine
    from tests.support.openai_test_server import TinyChatServer

    benches = [fixture_entry(eval_fixtures, "mlvu")]
    with TinyChatServer(TransformersEngine(tiny_model.model, tiny_model.processor), fail_first=1) as server:
        cfg = tiny_eval_config(tmp_path, tiny_model_dir, benches, protocols=["direct"],
                               agent={**TINY_AGENT, "max_new_tokens": 8},
                               engine={"kind": "openai", "base_url": server.base_url, "served_model": "tiny"},
                               max_error_share=0.0)  # fmt: skip
        run(cfg)
        assert server.attempts == 3 + 1  # three samples, one retried 503
    records = _lines(Path(cfg.output) / "samples" / "direct" / "mlvu.jsonl")
    assert sorted(r["id"] for r in records) == ["fx_count_1", "fx_order_1", "fx_plotQA_1"]
    assert all(r["status"] == "ok" for r in records)


def test_s3_output_uploads_records_and_a_fresh_machine_resumes(
    s3_bucket, tiny_model, eval_fixtures, tmp_path
):
    benches = [fixture_entry(eval_fixtures, "videomme")]
    engine = KeyedEngine(
        tiny_model.processor, {"fxSynth": ["<answer>B</answer>"]}, default="<answer>B</answer>"
    )
    output = f"{s3_bucket}/eval/run1"
    first = tiny_eval_config(tmp_path / "a", "tiny", benches, output=output)
    run(first, engine=engine, processor=tiny_model.processor)
    key = f"{output}/samples/agentic/videomme.jsonl"
    uploaded = [json.loads(x) for x in storage.read_bytes(key).decode().splitlines()]
    assert sorted(r["id"] for r in uploaded) == ["001-1", "002-1", "003-1"]
    assert storage.is_complete(output) and storage.exists(f"{output}/report.html")
    # another machine (empty work_dir) reruns: the uploaded records are taken over, no sample runs again
    calls = engine.generate_calls
    second = tiny_eval_config(tmp_path / "b", "tiny", benches, output=output)
    run(second, engine=engine, processor=tiny_model.processor)
    assert engine.generate_calls == calls
    again = [json.loads(x) for x in storage.read_bytes(key).decode().splitlines()]
    assert again == uploaded


def test_rerun_with_another_model_config_is_refused(tiny_model, eval_fixtures, tmp_path):
    benches = [fixture_entry(eval_fixtures, "mlvu")]
    engine = KeyedEngine(tiny_model.processor, {}, default="<answer>B</answer>")
    run(tiny_eval_config(tmp_path, "tiny", benches), engine=engine, processor=tiny_model.processor)
    other = tiny_eval_config(tmp_path, "tiny", benches, agent={**TINY_AGENT, "overview_frames": 8})
    with pytest.raises(EvalError, match="holds records made with a different agent; use another output"):
        run(other, engine=engine, processor=tiny_model.processor)


def test_rerun_of_a_complete_output_with_the_same_config_is_reused_in_one_line(
    tiny_model, eval_fixtures, tmp_path, capsys
):
    """Like SFT, RL and data: the same config on a complete output says so in one line and returns the
    finished run's numbers; nothing runs again, nothing is rewritten."""
    benches = [fixture_entry(eval_fixtures, "mlvu")]
    engine = KeyedEngine(tiny_model.processor, {}, default="<answer>B</answer>")
    cfg = tiny_eval_config(tmp_path, "tiny", benches)
    first = run(cfg, engine=engine, processor=tiny_model.processor)
    results = Path(cfg.output) / "results.json"
    written, calls = results.read_bytes(), engine.generate_calls
    capsys.readouterr()
    again = run(cfg, engine=engine, processor=tiny_model.processor)
    err = capsys.readouterr().err
    assert f"paravt eval: {cfg.output} is complete with the same config; reused, nothing to do\n" in err
    assert "resolved config saved" not in err
    assert engine.generate_calls == calls and results.read_bytes() == written
    assert again.metrics == {**first.metrics, "reused_output": True} and again.outputs == first.outputs
    assert storage.is_complete(cfg.output)
