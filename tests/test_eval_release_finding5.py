"""Issue 38, finding 5: under ``preset=release`` the files are read and the server's limits applied as the release
did (EvolvingLMMs-Lab/ParaVT at cf55249, ``paravt/eval/utils.py`` and ``driver.py``), the default preset
unchanged. Expected values are worked out by hand from the release's lines cited in each test.

- Video-MME copies named ``.MP4``/``.mkv``: the release's loader names every video ``<videoID>.mp4`` (utils.py
  lines 246 and 282) and ``eval_one`` answers a missing path with the error "video not found" (driver.py lines
  439-440), which its ``run_dataset`` counts wrong (utils.py lines 706-711: ``correct`` False stays in);
- SRT files: ``parse_srt`` (utils.py lines 178-195): UTF-8 with ``errors="ignore"``, blocks split at blank
  lines, every line after the second of a block of three or more lines;
- LVBench rows that list their options apart: the loader writes ``f"{item['question']}\\n{mcq_instr}"`` (utils.py
  line 329), the options list never read;
- the server: vLLM 0.17.1 started with ``--max-model-len 65536`` and ``--limit-mm-per-prompt
  '{"video":1,"image":1024}'`` (utils.py lines 517-524).
"""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from paravt_core.agent.config import AgentConfig
from paravt_core.agent.prompts import load_prompt_set
from paravt_core.eval import benchmarks as B
from paravt_core.eval import protocols, report
from paravt_core.eval.config import EvalBenchmarkConfig, EvalConfig
from paravt_core.eval.formats import release_srt_lines
from paravt_core.eval.metrics import benchmark_metrics
from paravt_core.eval.runner import RunOptions, run_one
from paravt_core.eval.server import served_context
from paravt_core.eval.stage import build_results, load_samples, server_report

RELEASE_TEXTS = load_prompt_set("release-v1").benchmark
HINT = "Answer with the option letter only."  # utils.py load_samples mcq_instr


def _release(root: str = "", subtitles: str = "") -> B.Context:
    return B.Context(root, subtitles, texts=RELEASE_TEXTS, preset="release")


def _videomme_row(video_id: str, qid: str) -> dict[str, Any]:
    return {"videoID": video_id, "question_id": qid, "duration": "short", "question": "Which shape?",
            "options": ["A. red", "B. blue"], "answer": "A"}  # fmt: skip


# ---------------------------------------------------------------------------------------------------------
# Video-MME files named .MP4 / .mkv


def test_videomme_copy_not_named_mp4_is_the_release_error_and_scored_wrong(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for name in ("up.MP4", "mk.mkv", "ok.mp4"):
        (data / name).write_bytes(b"")
    rows = [_videomme_row("up", "1"), _videomme_row("mk", "2"), _videomme_row("ok", "3")]
    up, mk, ok = B.to_samples("videomme", rows, _release(str(tmp_path)))
    # the release's path, <videoID>.mp4, which does not exist; the error says why and what preset=paravt runs
    assert up.video == str(data / "up.mp4") and mk.video == str(data / "mk.mp4")
    assert up.error_reason == mk.error_reason == "video_not_found"
    assert up.error.startswith(f"video not found: {data / 'up.mp4'} ") and "up.MP4" in up.error
    assert "mk.mkv" in mk.error and "<videoID>.mp4" in mk.error
    assert ok.error is None and ok.video == str(data / "ok.mp4")
    # the default preset runs both copies, as before
    d_up, d_mk, _ = B.to_samples("videomme", rows, B.Context(str(tmp_path), texts=RELEASE_TEXTS))
    assert (d_up.video, d_up.error) == (str(data / "up.MP4"), None)
    assert (d_mk.video, d_mk.error) == (str(data / "mk.mkv"), None)

    # recorded as an error (never run: no engine is needed), counted wrong under the release's error rule
    bench = B.get("videomme")
    base = protocols.preset_agent("release", EvalConfig(preset="release").agent)
    records = [
        asyncio.run(run_one(s, "agentic", bench, None, base, RunOptions(), preset="release"))
        for s in (up, mk)
    ]
    assert [(r["status"], r["error"]["reason"]) for r in records] == [("error", "video_not_found")] * 2
    right = {"id": "3", "status": "ok", "score": 1.0, "release_score": 1.0, "qtype": "mcq", "gold": "A"}
    m = benchmark_metrics("videomme", [*records, right], "release", "release")
    assert m["headline"] == "accuracy_errors_as_wrong" and m["accuracy_errors_as_wrong"] == pytest.approx(
        100 / 3
    )


def test_videomme_wsub_copy_not_named_mp4_is_the_error_before_its_subtitles_are_read(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "v.mkv").write_bytes(b"")
    (tmp_path / "subtitle").mkdir()
    (tmp_path / "subtitle" / "v.srt").write_text("1\n00:00:01,000 --> 00:00:02,000\nhello\n")
    (s,) = B.to_samples("videomme_wsub", [_videomme_row("v", "1")], _release(str(tmp_path)))
    assert s.error_reason == "video_not_found" and "v.mkv" in s.error


# ---------------------------------------------------------------------------------------------------------
# SRT files

# One file with every case where the release's positional reader and our cue parser differ. By hand, after
# utils.py lines 183-193: invalid bytes \xff\xfe dropped ("Caf sign"); a block without its index line loses
# its first text line ("no index first line"); a cue of two lines gives two lines (tags removed); a broken time
# line is not noticed ("broken time" kept); a block of two lines (no text) gives nothing. CRLF ends are "\n".
ODD_SRT = (
    b"1\r\n00:00:01,000 --> 00:00:02,000\r\nCaf\xff\xfe sign\r\n\r\n"
    b"00:00:03,000 --> 00:00:04,000\nno index first line\nsecond line\n\n"
    b"3\n00:00:05,000 --> 00:00:06,000\n<b>multi</b>\nline cue\n\n"
    b"4\n00:00:07,000 --> 00:00:0x,000\nbroken time\n \n"
    b"5\n00:00:09,000 --> 00:00:10,000\n"
)
RELEASE_LINES = "Caf sign\nsecond line\nmulti\nline cue\nbroken time"
# ours (formats.parse_srt, cue by cue from the time line; release-v1's one line per line): invalid bytes become
# U+FFFD, the cue without index keeps both lines, the cue with a broken time is dropped
OUR_LINES = "Caf\ufffd\ufffd sign\nno index first line\nsecond line\nmulti\nline cue"


def test_release_srt_reader_is_positional_and_drops_undecodable_bytes():
    assert release_srt_lines(ODD_SRT) == RELEASE_LINES
    assert release_srt_lines(b"") == ""
    assert release_srt_lines(b"1\n00:00:01,000 --> 00:00:02,000\n") == ""  # two lines: no text


def test_videomme_wsub_question_carries_the_release_subtitle_lines_under_release_only(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "v.mp4").write_bytes(b"")
    (tmp_path / "subtitle").mkdir()
    (tmp_path / "subtitle" / "v.srt").write_bytes(ODD_SRT)
    row = _videomme_row("v", "1")
    (rel,) = B.to_samples("videomme_wsub", [row], _release(str(tmp_path)))
    # utils.py line 273 and 278: header, the lines, a blank line, then the question
    question = "Question: Which shape?\nOptions:\nA. A. red\nB. B. blue\n" + HINT
    assert rel.question == f"This video's subtitles are listed below:\n{RELEASE_LINES}\n\n{question}"
    (ours,) = B.to_samples("videomme_wsub", [row], B.Context(str(tmp_path), texts=RELEASE_TEXTS))
    assert ours.question == f"This video's subtitles are listed below:\n{OUR_LINES}\n\n{question}"


# ---------------------------------------------------------------------------------------------------------
# LVBench rows with an options list


LISTED = {"uid": "u1", "video_path": "v.mp4", "question": "What is shown?", "options": ["a cat", "a dog"],
          "answer": "B", "question_type": ["entity recognition"]}  # fmt: skip


def test_lvbench_options_list_is_not_shown_under_release():
    (rel,) = B.to_samples("lvbench", [LISTED], _release("/m"))
    assert rel.question == f"What is shown?\n{HINT}"  # utils.py line 329: the question field as it is
    assert (rel.gold, rel.letters) == ("B", "AB")  # the options still give the gold and the letter range
    (ours,) = B.to_samples("lvbench", [LISTED], B.Context("/m", texts=RELEASE_TEXTS))
    assert ours.question == f"What is shown?\n(A) a cat\n(B) a dog\n{HINT}"  # lmms-eval's layout, ours


def test_stage_reads_rows_with_the_preset(tmp_path):
    """``paravt eval`` hands the preset to the converters (the LVBench case above, through the stage)."""
    src = tmp_path / "rows.jsonl"
    src.write_text(json.dumps(LISTED) + "\n")
    b = EvalBenchmarkConfig(name="lvbench", source=str(src), media_root=str(tmp_path))
    (rel,) = load_samples(b, str(tmp_path / "w"), "release-v1", 64, "release")
    (ours,) = load_samples(b, str(tmp_path / "w"), "release-v1", 64)
    assert rel.question == f"What is shown?\n{HINT}"
    assert ours.question == f"What is shown?\n(A) a cat\n(B) a dog\n{HINT}"


# ---------------------------------------------------------------------------------------------------------
# The server's context and image limit


class _Models(BaseHTTPRequestHandler):
    """``GET /v1/models`` as vLLM 0.17.1 answers it (``entrypoints/openai/models/serving.py``
    ``show_available_models``: one ``ModelCard`` per served model with ``max_model_len``)."""

    cards: list[dict[str, Any]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": self.cards}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def models_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def _results(server: dict[str, Any] | None) -> dict[str, Any]:
    cfg = EvalConfig(preset="release", engine={"kind": "openai", "base_url": "http://x/v1"})
    return build_results(cfg, {"agentic": {"videomme": []}}, 0.0, server)


def test_server_context_is_recorded_and_a_smaller_one_makes_the_row_not_comparable(
    models_server, monkeypatch
):
    monkeypatch.setattr(_Models, "cards", [{"id": "other", "max_model_len": 4096},
                                           {"id": "ParaVT/ParaVT-8B", "object": "model", "max_model_len": 32768}])  # fmt: skip
    cfg = EvalConfig(preset="release", model="ParaVT/ParaVT-8B",
                     engine={"kind": "openai", "base_url": models_server})  # fmt: skip
    server = server_report(cfg)
    assert server == {"max_model_len": 32768, "source": "GET /models"}  # the served model's card
    results = _results(server)
    assert results["server"] == server
    why = report.comparability(results, "videomme")
    assert "the server's context is 32768 tokens, under the release's --max-model-len 65536" in why
    assert "server context</th><td>32768 tokens (the release's vLLM: 65536)" in report.render_html(
        results, {}
    )
    # the release's own context, or a larger one (the episode still stops at 65,536): not named
    for ok in (65536, 131072, None):
        assert "server's context" not in report.comparability(_results({"max_model_len": ok}), "videomme")


def test_server_that_reports_no_context_or_cannot_be_asked(models_server, monkeypatch):
    monkeypatch.setattr(_Models, "cards", [{"id": "m", "object": "model"}])  # SGLang <0.4 / other servers
    assert served_context(models_server, "m")["max_model_len"] is None
    gone = served_context("http://127.0.0.1:9/v1", "m", timeout_s=2)  # nothing listens on the discard port
    assert gone["max_model_len"] is None and gone["source"].startswith("GET /models failed")
    assert server_report(EvalConfig(preset="release")) is None  # in-process engine: no server to ask


def test_release_episode_never_reaches_the_server_image_limit_and_fills_its_context_as_vllm():
    """vLLM 0.17.1 refuses a prompt with more than ``--limit-mm-per-prompt`` images
    (``vllm/multimodal/processing/context.py`` ``validate_num_items``): 1024 in the release. A release episode
    sends at most 64 overview + 3 rounds x 5 calls x 16 crop frames = 304. Its context is the release's 65,536
    whatever the base config says."""
    agent = protocols.preset_agent(
        "release", AgentConfig(max_turns=9, max_parallel=9, max_context_tokens=4096)
    )
    assert protocols.max_images(agent) == 64 + 3 * 5 * 16 == 304 <= protocols.RELEASE_IMAGE_LIMIT == 1024
    assert agent.max_context_tokens == protocols.RELEASE_MAX_MODEL_LEN == 65_536


def test_a_release_preset_over_the_image_limit_is_refused(monkeypatch):
    monkeypatch.setitem(protocols.RELEASE_AGENT, "overview_frames", 1024)
    with pytest.raises(ValueError, match="over the release server's --limit-mm-per-prompt of 1024"):
        protocols.preset_agent("release", AgentConfig())


def test_charades_engine_failure_without_the_tool_is_left_out_as_the_release_does():
    """A request the server refuses (context_overflow) or that fails: inside the release's agent loop the reply
    is "[API error: ...]", read as no interval (IoU 0; driver.py lines 466-476); under direct/reasoning the
    sample is an error result (driver.py lines 453-460) that Charades leaves out (utils.py line 729)."""
    ok = {"id": "a", "status": "ok", "score": 0.6, "release_score": 0.6, "qtype": "tvg"}
    overflow = {"id": "b", "status": "error", "score": None, "error": {"reason": "context_overflow"}}
    agentic = benchmark_metrics("charades", [ok, overflow], "release", "release", "agentic")
    direct = benchmark_metrics("charades", [ok, overflow], "release", "release", "direct")
    assert agentic["miou_errors_as_zero"] == pytest.approx(30.0) and agentic["denominator"] == 2
    assert direct["miou_errors_as_zero"] == pytest.approx(60.0) and direct["denominator"] == 1


def test_release_request_asks_for_the_room_left_and_a_full_context_ends_the_sample(tiny_model, tmp_path):
    """vLLM 0.17.1 lowers ``max_tokens`` to ``max_model_len - prompt`` (``entrypoints/utils.py``
    ``get_max_tokens``) and refuses only a prompt of ``max_model_len`` tokens or more
    (``v1/engine/input_processor.py`` ``_validate_prompt_len``): the release episode does the same with the
    release's 65,536 (frames included: 64 unlabelled overview frames of the synthetic video). A refused
    request is an error the release scores wrong (``context_overflow``, in ``IN_LOOP_ERRORS``)."""
    from paravt_core.engines.scripted import ScriptedEngine
    from paravt_core.synth import Event, write_video

    video = tmp_path / "v.mp4"
    write_video(video, [Event("circle", "red", 1.0, 8.0, (10, 10, 120, 100))], 12.0, 30.0, (426, 240))
    base = protocols.preset_agent("release", EvalConfig(preset="release").agent)
    bench = B.get("videomme")

    def run(question: str) -> tuple[dict[str, Any], ScriptedEngine]:
        sample = B.Sample("videomme", "1", str(video), question, "A", letters="AB")
        engine = ScriptedEngine(tiny_model.processor, ["<answer>A</answer>"])
        record = asyncio.run(run_one(sample, "direct", bench, engine, base, RunOptions(retries=0),
                                     processor=tiny_model.processor, preset="release"))  # fmt: skip
        return record, engine

    short, engine = run("Which shape?")
    (request,) = engine.requests
    assert short["status"] == "ok" and short["frames"] == 64 and request.sampling.max_new_tokens == 2048
    per = len(tiny_model.processor.tokenizer(" hello" * 1000)["input_ids"]) // 1000  # tokens per " hello"
    p0 = len(request.input_ids)
    near, engine = run("Which shape?" + " hello" * ((65_536 - 100 - p0) // per))
    (request,) = engine.requests
    assert near["status"] == "ok" and 65_536 - 2048 < len(request.input_ids) < 65_536
    assert request.sampling.max_new_tokens == 65_536 - len(request.input_ids)  # under the 2048 asked for
    full, engine = run("Which shape?" + " hello" * ((65_536 - p0) // per + 1))
    assert engine.requests == []  # never sent: the release's server answers such a request with 400
    assert (full["status"], full["error"]["reason"]) == ("error", "context_overflow")
