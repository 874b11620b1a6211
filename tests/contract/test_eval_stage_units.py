"""Unit checks of ``paravt_core/eval/stage.py`` with values worked out by hand (the survivors of its
mutation run): the results' tool use, totals, published column and server report, the error gate, the console
summary, the outputs map, the code version, the completion markers of a shard and of a whole run, the engines
``build_engine`` makes, a records file that cannot be opened, merges of hand-written shards (a foreign
fingerprint, UTF-8 text, shards on S3) and benchmark rows on S3 spread over sub-folders."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from paravt_core import storage
from paravt_core.eval import stage
from paravt_core.eval.config import EvalBenchmarkConfig
from paravt_core.eval.stage import EvalError
from tests.support.eval_support import (
    SUBTITLED_ROW,
    KeyedEngine,
    fixture_entry,
    tiny_eval_config,
    write_subtitled_video,
)


def _rec(i: int, tool_calls: int | None, status: str = "ok") -> dict[str, Any]:
    rec: dict[str, Any] = {"id": f"s{i}", "status": status, "score": 1.0 if i == 0 else 0.0, "tool_calls": tool_calls,
                           "finish_reason": "answer", "duration": "short"}  # fmt: skip
    if status == "error":
        rec.update(score=None, error={"reason": "video_error"})
    return rec


# ----------------------------------------------------------------------------------------------- results


def test_results_count_tool_use_of_scored_samples_under_the_tool_protocol_only(tmp_path, monkeypatch):
    monkeypatch.setenv("PARAVT_CODE_VERSION", "v-test-1")
    bench = {"name": "videomme_wsub", "source": str(tmp_path), "subtitle_mode": "aligned"}
    cfg = tiny_eval_config(
        tmp_path, "tiny", [bench], protocols=["agentic", "direct"], published_model="Qwen3-VL-8B"
    )
    agentic = [_rec(0, 0), _rec(1, 2), _rec(2, None), _rec(3, 3), _rec(4, 9, status="error")]
    direct = [_rec(0, 7), _rec(1, 0)]  # not a tool protocol: its calls are not counted
    server = {"max_model_len": 32768, "source": "GET /models"}
    results = stage.build_results(cfg, {"agentic": {"videomme_wsub": agentic}, "direct": {"videomme_wsub": direct}},
                                  12.3456, server)  # fmt: skip
    # calls of the 4 scored agentic samples: 0, 2, 0 (None), 3 -> 5 / 4 = 1.25 per sample; 2 of 4 call the tool
    assert results["avg_tool_calls"] == 1.25
    assert results["tool_use_rate"] == 50.0
    assert results["totals"] == {"samples": 7, "scored": 6, "errors": 1, "error_share": 1 / 7}
    assert results["errors_by_reason"] == {"video_error": 1}
    assert results["protocols"]["agentic"]["videomme_wsub"]["subtitles"] == "aligned"
    assert results["server"] == server
    assert results["code_version"] == "v-test-1"
    assert results["elapsed_s"] == 12.346
    # docs/method.md §7's published table, row Qwen3-VL-8B (each Benchmark.published in paravt_core/eval/benchmarks/)
    assert results["published"] == {"videomme": 59.9, "videomme_wsub": 68.4, "longvideobench": 52.2,
                                    "lvbench": 33.1, "mlvu": 58.3, "mmvu": 68.0, "charades": 49.3,
                                    "synthetic": None}  # fmt: skip
    # one of three samples calls the tool, once: 100 x 1 / 3 = 33.3333 and 1 / 3 = 0.3333 (4 places)
    three = stage.build_results(
        cfg, {"agentic": {"videomme_wsub": [_rec(0, 1), _rec(1, 0), _rec(2, 0)]}}, 1.0
    )
    assert three["tool_use_rate"] == 33.3333 and three["avg_tool_calls"] == 0.3333
    assert "server" not in three


def test_subtitle_mode_all_is_named_in_the_results(tmp_path):
    bench = {"name": "videomme_wsub", "source": str(tmp_path)}  # subtitle_mode's default: all
    cfg = tiny_eval_config(tmp_path, "tiny", [bench], protocols=["direct"])
    results = stage.build_results(cfg, {"direct": {"videomme_wsub": [_rec(0, 0)]}}, 1.0)
    assert results["protocols"]["direct"]["videomme_wsub"]["subtitles"] == "all"
    assert results["published"] == {} and results["avg_tool_calls"] is None


def test_error_gate_is_per_protocol_and_benchmark_and_skips_empty_ones():
    per = {
        "agentic": {"a": {"errors": 1, "samples": 4}, "b": {"errors": 0, "samples": 2}},
        "direct": {"a": {"errors": 0, "samples": 0}, "c": {"errors": 2, "samples": 10}},
    }
    assert stage.error_gate(per, 0.2) == {
        "max_error_share": 0.2,
        "passed": False,
        "shares": {"agentic.a": 0.25, "agentic.b": 0.0, "direct.c": 0.2},
        "failing": {"agentic.a": 0.25},  # 0.2 is within the limit
    }
    assert stage.error_gate(per, 0.25)["passed"] is True


def test_outputs_map_names_each_file_under_the_output():
    assert stage._outputs("/runs/e") == {
        "results.json": "/runs/e/results.json",
        "metrics.json": "/runs/e/metrics.json",
        "report.html": "/runs/e/report.html",
        "eval": "/runs/e",
        "samples": "/runs/e/samples",
    }


def test_summary_prints_each_row_with_its_published_value_and_the_totals(capsys):
    results = {
        "protocols": {
            "direct": {
                "videomme": {"headline": "accuracy", "accuracy": 50.0, "scored": 3, "errors": 1},
                "synthetic": {"headline": "accuracy", "accuracy": None, "scored": 0, "errors": 2},
            }
        },
        "published": {"videomme": 59.9, "synthetic": None},
        "totals": {"samples": 6, "scored": 3, "errors": 3, "error_share": 0.5},
        "errors_by_reason": {"video_error": 3},
    }
    stage.print_summary(results)
    err = capsys.readouterr().err
    cells = [re.split("[│┃]", line)[1:-1] for line in err.splitlines()]  # the header's rule is heavy
    rows = [[c.strip() for c in row] for row in cells if len(row) == 6]
    assert rows == [
        ["protocol", "benchmark", "headline", "scored", "errors", "published"],
        ["direct", "videomme", "50.0 accuracy", "3", "1", "59.9"],
        ["direct", "synthetic", "–", "0", "2", "–"],
    ]
    assert "errors: 3 of 6 samples (50.0%) by reason {'video_error': 3}" in err


# ----------------------------------------------------------------------------------------------- inputs


def test_a_media_root_that_is_not_a_folder_is_refused_before_any_row_is_read(tmp_path):
    missing = tmp_path / "videos"
    b = EvalBenchmarkConfig(name="videomme", source=str(tmp_path / "rows.json"), media_root=str(missing))
    with pytest.raises(EvalError) as err:
        stage.load_samples(b, str(tmp_path / "work"))
    assert str(err.value) == (
        f"benchmark videomme: media_root {missing} is not a directory; point it at the benchmark's videos"
    )


def test_subtitle_mode_all_keeps_every_cue_whatever_the_frame_count(tmp_path):
    # the 4 cues of the subtitled video (tests/support/eval_support.py): "all" keeps each, at any frame count
    write_subtitled_video(tmp_path)
    (tmp_path / "rows.json").write_text(json.dumps([SUBTITLED_ROW]))
    b = EvalBenchmarkConfig(name="videomme_wsub", source=str(tmp_path / "rows.json"), media_root=str(tmp_path),
                            subtitle_mode="all")  # fmt: skip
    (sample,) = stage.load_samples(b, str(tmp_path / "work"), overview_frames=4)
    assert all(cue in sample.question for cue in ("Hi", "skipped", "middle", "end"))


def _videomme_row(video: str, qid: str, question: str) -> dict[str, Any]:
    return {**SUBTITLED_ROW, "videoID": video, "question_id": qid, "question": question}


def test_rows_on_s3_spread_over_sub_folders_are_all_read(s3_bucket, tmp_path):
    """A source prefix holding row files in two sub-folders: both are fetched under the work folder and read."""
    storage.write_bytes(
        f"{s3_bucket}/rows/part-a/one.json", json.dumps([_videomme_row("vA", "1", "First?")]).encode()
    )
    storage.write_bytes(
        f"{s3_bucket}/rows/part-b/two.json", json.dumps([_videomme_row("vB", "2", "Second?")]).encode()
    )
    work = tmp_path / "work"
    b = EvalBenchmarkConfig(name="videomme", source=f"{s3_bucket}/rows")
    samples = stage.load_samples(b, str(work))
    assert len(samples) == 2
    assert sorted(q for s in samples for q in ("First?", "Second?") if q in s.question) == [
        "First?",
        "Second?",
    ]
    assert sorted(p.relative_to(work).as_posix() for p in work.rglob("*.json")) == [
        "sources/videomme/part-a/one.json",
        "sources/videomme/part-b/two.json",
    ]


# ----------------------------------------------------------------------------------------------- engines


class _Models(BaseHTTPRequestHandler):
    """An OpenAI-compatible server's ``GET /v1/models`` only."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = json.dumps(
            {"data": [{"id": "other", "max_model_len": 1024}, {"id": "tiny", "max_model_len": 4096}]}
        )
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: Any) -> None:
        pass


def test_server_report_asks_an_openai_server_only(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        served = tiny_eval_config(
            tmp_path, "m", [], engine={"kind": "openai", "base_url": url, "served_model": "tiny"}
        )
        assert stage.server_report(served) == {"max_model_len": 4096, "source": "GET /models"}
        # the in-process engine has no server to ask (and no base_url to give it)
        assert stage.server_report(tiny_eval_config(tmp_path, "m", [])) is None
        with pytest.raises(ValidationError, match="base_url"):
            tiny_eval_config(tmp_path, "m", [], engine={"kind": "transformers", "base_url": url})
    finally:
        server.shutdown()
        server.server_close()


def test_openai_engine_needs_a_url_and_takes_the_release_timeout_under_its_preset(tiny_model_dir, tmp_path):
    def engine(**kw: Any) -> Any:
        cfg = tiny_eval_config(tmp_path, tiny_model_dir, [], **kw)
        return stage.build_engine(cfg)[0]

    with pytest.raises(EvalError, match=r"^engine.kind=openai needs engine.base_url$"):
        engine(engine={"kind": "openai"})
    url = "http://127.0.0.1:9/v1"
    # the release's client timeout (utils.py run_shard, OPENAI_TIMEOUT_S = 1800 at cf55249); ours: the default 600
    assert engine(engine={"kind": "openai", "base_url": url}, preset="release").timeout_s == 1800.0
    assert engine(engine={"kind": "openai", "base_url": url}).timeout_s == 600.0


def test_in_process_engine_is_loaded_as_the_evaluated_model_and_coalesced_unseeded(
    tiny_model_dir, tmp_path, capsys
):
    cfg = tiny_eval_config(tmp_path, tiny_model_dir, [])
    engine, processor = stage.build_engine(cfg)
    from paravt_core.engines.coalesce import CoalescingEngine

    assert isinstance(engine, CoalescingEngine)
    assert engine._seed is None and engine.max_retries == 0  # greedy eval; the runner retries samples itself
    assert processor is not None
    assert f"evaluated model: loaded {tiny_model_dir} (" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------- the stage


def test_a_records_file_holding_an_id_twice_is_refused_in_one_line(eval_fixtures, tmp_path):
    cfg = tiny_eval_config(tmp_path, "tiny", [fixture_entry(eval_fixtures, "mlvu")], protocols=["direct"])
    log = Path(cfg.output) / "samples" / "direct" / "mlvu.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text('{"id": "fx_count_1", "status": "ok"}\n' * 2)
    with pytest.raises(EvalError) as err:
        stage.run(cfg, engine=object(), processor=None)  # refused before any sample runs
    assert str(err.value) == f"{log} holds the same sample id twice; it was not written by this runner"


def test_a_shard_and_a_whole_run_mark_their_output_complete_with_what_they_did(
    tiny_model, eval_fixtures, tmp_path
):
    benches = [fixture_entry(eval_fixtures, n) for n in ("synthetic", "mlvu")]  # 8 + 3 samples
    engine = KeyedEngine(tiny_model.processor, {}, default="<answer>B</answer>")
    shard = tiny_eval_config(tmp_path, "tiny", benches, protocols=["direct"], shard="1/2")
    stage.run(shard, engine=engine, processor=tiny_model.processor)
    root = Path(shard.output) / "shards" / "1-of-2"
    recorded = sum(len(p.read_text().splitlines()) for p in (root / "samples").rglob("*.jsonl"))
    assert 0 < recorded < 11
    assert storage.completion_info(str(root))["info"] == {
        "stage": "eval",
        "shard": "1/2",
        "records": recorded,
    }
    whole = tiny_eval_config(tmp_path / "whole", "tiny", benches, protocols=["direct"])
    stage.run(whole, engine=engine, processor=tiny_model.processor)
    assert storage.completion_info(whole.output)["info"] == {"stage": "eval", "samples": 11}


def _shard(cfg: Any, output: str, records: list[dict[str, Any]], fingerprint_of: Any = None) -> None:
    """Shard 0 of 1 written by hand: its fingerprint (of ``fingerprint_of``, else ``cfg``), records, marker."""
    root = storage.join(output, "shards", "0-of-1")
    stage.check_records_fingerprint(root, fingerprint_of or cfg)
    body = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    storage.write_bytes(storage.join(root, "samples", "direct", "mlvu.jsonl"), body.encode())
    storage.mark_complete(root)


def _merge_cfg(tmp_path: Path, output: str, model: str = "tiny") -> Any:
    bench = {"name": "mlvu", "source": str(tmp_path)}
    return tiny_eval_config(tmp_path, model, [bench], protocols=["direct"], output=output, merge=True,
                            expected_shards=1)  # fmt: skip


def test_merged_records_keep_their_text_as_utf8(tmp_path):
    output = str(tmp_path / "eval")
    cfg = _merge_cfg(tmp_path, output)
    _shard(cfg, output, [{"id": "b", "prediction": "naïve – 東京"}, {"id": "a", "prediction": "café"}])
    samples = {"mlvu": [SimpleNamespace(id="a"), SimpleNamespace(id="b")]}
    merged = stage.merge_shards(cfg, output, str(tmp_path / "work"), samples)
    assert merged == {
        "direct": {"mlvu": [{"id": "a", "prediction": "café"}, {"id": "b", "prediction": "naïve – 東京"}]}
    }
    written = (tmp_path / "eval" / "samples" / "direct" / "mlvu.jsonl").read_bytes()
    assert (
        written == '{"id": "a", "prediction": "café"}\n{"id": "b", "prediction": "naïve – 東京"}\n'.encode()
    )


def test_merge_refuses_a_shard_made_by_another_model(tmp_path):
    output = str(tmp_path / "eval")
    cfg = _merge_cfg(tmp_path, output)
    _shard(cfg, output, [{"id": "a"}], fingerprint_of=_merge_cfg(tmp_path, output, model="other"))
    shard = storage.join(output, "shards", "0-of-1")
    with pytest.raises(EvalError) as err:
        stage.merge_shards(cfg, output, str(tmp_path / "work"), {"mlvu": [SimpleNamespace(id="a")]})
    assert str(err.value) == (
        f"{shard} holds records made with a different model; use another output (or delete it) to evaluate "
        "this config"
    )


def test_merge_of_shards_on_s3_reads_them_through_the_work_folder(s3_bucket, tmp_path):
    output = f"{s3_bucket}/eval"
    cfg = _merge_cfg(tmp_path, output)
    _shard(cfg, output, [{"id": "b"}, {"id": "a"}])
    work = tmp_path / "work"
    merged = stage.merge_shards(
        cfg, output, str(work), {"mlvu": [SimpleNamespace(id="a"), SimpleNamespace(id="b")]}
    )
    assert merged == {"direct": {"mlvu": [{"id": "a"}, {"id": "b"}]}}
    assert (work / "merge" / "0-of-1" / "samples" / "direct" / "mlvu.jsonl").read_text() == (
        '{"id": "b"}\n{"id": "a"}\n'  # the shard's copy, as written
    )
    assert storage.read_bytes(f"{output}/samples/direct/mlvu.jsonl") == b'{"id": "a"}\n{"id": "b"}\n'


@pytest.mark.parametrize("saved_config", [True, False], ids=["config-saved", "no-config-saved"])
def test_a_shard_run_of_a_complete_output_evaluates_its_shard(
    tiny_model, eval_fixtures, tmp_path, saved_config
):
    """Without a saved config.yaml (an output made before it was saved, or copied without it) the changed-config
    rule has nothing to compare, and only the shard itself says the whole output is not what was asked for."""
    from paravt_core import storage
    from paravt_core.eval.records import shard_of
    from paravt_core.eval.stage import run
    from tests.support.eval_support import KeyedEngine, tiny_eval_config

    benches = [e for e in eval_fixtures if e["name"] == "mlvu"]
    engine = KeyedEngine(tiny_model.processor, {}, default="<answer>B</answer>")
    whole = run(tiny_eval_config(tmp_path, "tiny", benches, protocols=["direct"]), engine=engine,
                processor=tiny_model.processor)  # fmt: skip
    assert storage.is_complete(whole.outputs["eval"])
    ids = [json.loads(x)["id"] for x in (tmp_path / "eval" / "samples" / "direct" / "mlvu.jsonl").open()]
    mine = [i for i in ids if shard_of(i, 2) == 0]
    assert 0 < len(mine) < len(ids)  # the shard is a real part of the output
    if not saved_config:
        (tmp_path / "eval" / "config.yaml").unlink()
    shard = run(tiny_eval_config(tmp_path, "tiny", benches, protocols=["direct"], shard="0/2"), engine=engine,
                processor=tiny_model.processor)  # fmt: skip
    assert "reused_output" not in shard.metrics
    assert shard.metrics == {"records": len(mine)}
    assert shard.outputs == {"shard": str(tmp_path / "eval" / "shards" / "0-of-2")}
    assert storage.is_complete(shard.outputs["shard"])


# 10 ---------------------------------------------------------------------------------------------------------
def test_release_preset_aligns_subtitles_to_its_own_frame_count(tmp_path):
    """Video-MME with aligned subtitles under ``preset=release`` keeps the cues covering the preset's 64 frames,
    whatever ``agent.overview_frames`` (4 here) says. 40 frames at 4 fps: 64 samples cover every frame, so
    every cue is kept; 4 samples (0, 13, 26, 39) miss the cue of seconds 2-3 (frames 8-11)."""
    from paravt_core.eval.stage import _samples_by_bench
    from tests.support.eval_support import SUBTITLED_ROW, tiny_eval_config, write_subtitled_video

    write_subtitled_video(tmp_path)
    row = dict(SUBTITLED_ROW)
    (tmp_path / "rows.json").write_text(json.dumps([row]))
    bench = {"name": "videomme_wsub", "source": str(tmp_path / "rows.json"), "media_root": str(tmp_path),
             "subtitle_mode": "aligned"}  # fmt: skip

    def question(preset: str) -> str:
        cfg = tiny_eval_config(tmp_path / preset, "tiny", [bench], preset=preset)
        assert cfg.agent.overview_frames == 4
        ((sample,),) = _samples_by_bench(cfg, str(tmp_path / preset / "work")).values()
        return sample.question

    assert "skipped" in question("release") and "middle" in question("release")
    assert "skipped" not in question("paravt") and "middle" in question("paravt")  # 4 frames: the agent's
