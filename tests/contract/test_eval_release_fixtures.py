"""For one sample per benchmark, the chat requests ``preset=release`` sends equal those the
release's own code sent (EvolvingLMMs-Lab/ParaVT, ``paravt/eval/utils.py`` ``load_samples`` and
``paravt/eval/driver.py`` ``eval_one``), recorded once by ``scripts/record_release_fixtures.py`` from the release
snapshot into ``tests/fixtures/release/*.json`` (each names its commit; no release code is in this repository).

Both sides get the same synthetic dataset row, the same synthetic video (regenerated here bit for bit) and the
same scripted replies (agentic: three rounds of ``crop_video`` calls, with a window after the end of the video,
six calls of which five are kept and a "MM:SS" time without an end, then the forced answer; ``direct`` and
``reasoning``: the answer). On our side the row goes through our converter, ``run_one`` under ``preset=release``
and the real ``OpenAIEngine`` whose HTTP post is replaced by a recorder (the same stub the recording used for the
release's client). The comparison is on the OpenAI message lists (each request, message by message, part by
part): text byte for byte, images by size and pixels (the sha256 of the decoded RGB, else a 4 x 4 box thumbnail
within JPEG round-off); then on each request's text rendered by the Qwen3-VL chat template. Differences by
design are listed exactly (``WIRE_ONLY``, ``FRAMES_STAND_IN``), so a new one, or one that goes away, fails."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from paravt_core.engines.openai_engine import OpenAIEngine
from paravt_core.eval import benchmarks as B
from paravt_core.eval.config import EvalConfig
from paravt_core.eval.protocols import preset_agent
from paravt_core.eval.runner import RunOptions, run_one
from paravt_core.synth import Event, write_video
from tests.support.paths import ROOT

FIXTURES = sorted((ROOT / "tests" / "fixtures" / "release").glob("*.json"))
COMMIT = "cf55249e391004b5aafea3f19cf5580d3517cb43"
THUMB_TOLERANCE = 2  # 4 x 4 box means of two JPEG-85 round trips of frames equal within the decoders' +-2


@functools.cache
def _recorder() -> Any:
    """The recording script as a module: its cases (rows, layout) and its summaries of messages and images."""
    spec = importlib.util.spec_from_file_location(
        "record_release_fixtures", ROOT / "scripts" / "record_release_fixtures.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class RecordingEngine(OpenAIEngine):
    """The real client up to the wire: each chat body is recorded and answered with the next scripted reply."""

    def __init__(self, replies: list[str], processor: Any):
        super().__init__("http://recorder.invalid/v1", "model", processor=processor)
        self.replies = list(replies)
        self.bodies: list[dict[str, Any]] = []

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(json.loads(json.dumps(body)))
        text = self.replies.pop(0)
        return {"choices": [{"message": {"content": text}, "finish_reason": "stop"}], "usage": {}}


def ours(
    fixture: dict[str, Any], tmp: Path, processor: Any, video_urls: bool = True
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Our requests for the fixture's row (each as the recording stores them) and our record; ``video_urls``:
    the engine's server decodes a ``video_url`` (vLLM, the release's engine), so Charades goes as one."""
    v = fixture["video"]
    video = tmp / "v.mp4"
    events = [Event(s, c, a, b, tuple(box)) for s, c, a, b, box in v["events"]]
    write_video(video, events, v["seconds"], v["fps"], tuple(v["size"]))
    assert hashlib.sha256(video.read_bytes()).hexdigest() == v["sha256"]  # the very video the release read
    root = tmp / fixture["media_root"]
    case = _recorder().CASES[fixture["benchmark"]]
    target = tmp / case["release_video"]  # our converters read the same layout under media_root
    target.parent.mkdir(parents=True, exist_ok=True)
    target.symlink_to(video)
    if fixture["srt"]:
        (tmp / case["srt"]).parent.mkdir(parents=True)
        (tmp / case["srt"]).write_text(fixture["srt"], encoding="utf-8")
    cfg = EvalConfig(preset="release")
    from paravt_core.agent.prompts import load_prompt_set

    ctx = B.Context(str(root), texts=load_prompt_set(cfg.agent.prompt_set).benchmark, preset=cfg.preset)
    bench = B.get(fixture["dataset"])  # the release's dataset name is ours (mmvu_open_ended: mmvu)
    (sample,) = B.to_samples(bench.name, [fixture["row"]], ctx)
    engine = RecordingEngine(fixture["replies"], processor)
    protocol = "agentic" if fixture["prompt_mode"].startswith("agentic_") else fixture["prompt_mode"]
    record = asyncio.run(run_one(sample, protocol, bench, engine, preset_agent("release", cfg.agent),
                                 RunOptions(video_urls=video_urls), processor=processor, preset="release"))  # fmt: skip
    return _recorder().tails(engine.bodies), record


def compare(theirs: list[dict[str, Any]], mine: list[dict[str, Any]]) -> tuple[int, list[str]]:
    """(identical items, differences): one item per request setting, message role and content part."""
    same, diffs = 0, []
    if len(theirs) != len(mine):
        return same, [f"requests: {len(theirs)} vs {len(mine)}"]
    for i, (t, m) in enumerate(zip(theirs, mine, strict=True)):
        for key in ("max_tokens", "temperature", "keeps"):
            if t[key] == m[key]:
                same += 1
            else:
                diffs.append(f"request {i} {key}: {t[key]!r} vs {m[key]!r}")
        if len(t["adds"]) != len(m["adds"]):
            diffs.append(f"request {i} messages: {len(t['adds'])} vs {len(m['adds'])}")
            continue
        for j, (tm, mm) in enumerate(zip(t["adds"], m["adds"], strict=True)):
            where = f"request {i} message {j}"
            tc = (
                tm["content"]
                if isinstance(tm["content"], list)
                else [{"type": "text", "text": tm["content"]}]
            )
            mc = (
                mm["content"]
                if isinstance(mm["content"], list)
                else [{"type": "text", "text": mm["content"]}]
            )
            if tm["role"] != mm["role"]:
                diffs.append(f"{where} role: {tm['role']} vs {mm['role']}")
            if isinstance(tm["content"], list) != isinstance(mm["content"], list):
                diffs.append(
                    f"{where} content shape: {type(tm['content']).__name__} vs {type(mm['content']).__name__}"
                )
            if len(tc) != len(mc):
                diffs.append(f"{where} parts: {len(tc)} vs {len(mc)}")
                continue
            for k, (tp, mp) in enumerate(zip(tc, mc, strict=True)):
                if tp["type"] != mp["type"]:
                    diffs.append(f"{where} part {k}: {tp['type']} vs {mp['type']}")
                elif tp["type"] == "text":
                    if tp["text"] == mp["text"]:
                        same += 1
                    else:
                        diffs.append(f"{where} part {k} text: {tp['text']!r} vs {mp['text']!r}")
                elif tp["type"] == "video_url":  # a file:// URL: the recording keeps the file's name
                    if tp["name"] == mp["name"]:
                        same += 1
                    else:
                        diffs.append(f"{where} part {k} video: {tp['name']} vs {mp['name']}")
                else:
                    if tp["size"] != mp["size"]:
                        diffs.append(f"{where} part {k} size: {tp['size']} vs {mp['size']}")
                    elif tp["sha256"] == mp["sha256"]:
                        same += 1
                    else:
                        worst = max(abs(a - b) for a, b in zip(tp["thumb"], mp["thumb"], strict=True))
                        if worst <= THUMB_TOLERANCE:
                            same += 1
                        else:
                            diffs.append(f"{where} part {k} pixels: thumbnail off by {worst}")
    return same, diffs


def full_lists(requests: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Each request's whole message list (the recording keeps only what each adds to the one before)."""
    out: list[list[dict[str, Any]]] = []
    for r in requests:
        before = out[-1] if out else []
        assert r["keeps"] == len(before)
        out.append(before + r["adds"])
    return out


def rendered(processor: Any, messages: list[dict[str, Any]]) -> str:
    """The chat template's text of a recorded message list (image and video parts as the template's own)."""
    kinds = {"image": {"type": "image"}, "video_url": {"type": "video"}}
    msgs = [
        {"role": m["role"], "content": m["content"] if isinstance(m["content"], str)
         else [kinds.get(p["type"], p) for p in m["content"]]}
        for m in messages
    ]  # fmt: skip
    return processor.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)


# Differences by design, asserted exactly (a new one, or one that goes away, fails):
# - "content shape": the release sends the system prompt, the "[Error cropping …]" response and the forced answer as
#   a plain string, we send one text part of the same text; the chat template renders both the same (checked below on the
#   rendered text), so only the JSON differs.
WIRE_ONLY = [
    "request 0 message 0 content shape: str vs list",
    "request 1 message 2 content shape: str vs list",
    "request 3 message 2 content shape: str vs list",
]
# - Charades overview: the release's recipe sends Charades as a ``video_url`` (scripts/reproduce_paravt_8b.sh
#   ``--video_channel video_url``; driver.py ``_video_user_content``), decoded by the vLLM server with its own
#   frame sampling and timestamps. So do we on an engine whose server decodes it (``video_urls``: vLLM); on any
#   other, 64 frames of the release's sizing stand in, each after its time label (``overview_labels``): that
#   overview alone differs.
FRAMES_STAND_IN = {"charades": ["request 0 message 1 parts: 2 vs 129"]}
# items compared equal (settings, texts byte for byte, images, video file names); 112 elsewhere
IDENTICAL = {"charades": 49, "videomme_direct": 69, "mlvu_reasoning": 69}


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_release_requests_equal_ours_but_for_the_named_differences(path, tmp_path, tiny_model):
    fixture = json.loads(path.read_text(encoding="utf-8"))
    assert fixture["commit"] == COMMIT and fixture["release"] == "EvolvingLMMs-Lab/ParaVT"
    mine, record = ours(fixture, tmp_path, tiny_model.processor)
    same, diffs = compare(fixture["requests"], mine)
    single_turn = not fixture["prompt_mode"].startswith("agentic_")  # direct, reasoning: one request
    assert diffs == WIRE_ONLY[:1] + ([] if single_turn else WIRE_ONLY[1:])
    assert same == IDENTICAL.get(path.stem, 112)
    # the rendered chat template: equal for every request
    theirs, ours_full = full_lists(fixture["requests"]), full_lists(mine)
    for t, m in zip(theirs, ours_full, strict=True):
        assert rendered(tiny_model.processor, t) == rendered(tiny_model.processor, m)
    if (
        path.stem in FRAMES_STAND_IN
    ):  # an engine that cannot send the video: its stand-in overview alone differs
        framed, _ = ours(fixture, tmp_path / "framed", tiny_model.processor, video_urls=False)
        assert (
            compare(fixture["requests"], framed)[1]
            == WIRE_ONLY[:1] + FRAMES_STAND_IN[path.stem] + WIRE_ONLY[1:]
        )
    # the release's reader on the final reply reads what the release's own scoring read
    release = fixture["release_result"]
    assert record["status"] == "ok"
    assert record["tool_calls"] == release["tool_calls"] == (0 if single_turn else 8)  # 2 + 5 kept of 6 + 1
    assert record["release_score"] == release["score"]
    if fixture["dataset"] != "charades":
        assert record["release_prediction"] == release["pred"]


def test_the_fixtures_cover_every_release_benchmark_once():
    names = {p.stem for p in FIXTURES}
    assert names == {"videomme", "videomme_wsub", "longvideobench", "lvbench", "mlvu", "mmvu", "mmvu_open_ended",
                     "charades", "videomme_direct", "mlvu_reasoning"}  # fmt: skip
    # the recorder's cases are the fixtures: a case added there and not recorded fails here
    assert set(_recorder().CASES) == names
