"""preset=release against a real vLLM server (its CPU build, tests/fixtures/vllm_server.py, the tiny Qwen3-VL):
the fixture videos' 64 frames reach the server as images, each as the JPEG bytes its pixels were decoded from,
and the prompt token ids vLLM builds from them equal ours, id for id; Charades goes as the release sends it, the
whole video as a ``file://`` ``video_url`` that vLLM decodes itself.

The eval runs on a server launched with the release's flags (``release_vllm_server``: 1,024 images a request, its
``utils.py`` ``launch_servers``): a release request carries the 64 overview frames (and the crops), over the
session server's 8 (and a context just above the fixtures' prompts). Token counts by hand: every fixture frame
(128 x 96, or 160 x 128 for the synthetic benchmark) is sized by qwen-vl-utils to 280 x 392 (308 x 364) for the
overview and 84 x 140 (140 x 168) for a crop, and the tiny processor's own settings (longest_edge 16,384 px,
32-px grid) bring each to 96 x 128: (96 / 16) x (128 / 16) / 2^2 = 12 image tokens a frame.

The same launch has no ``--trust-request-mm-kwargs`` (the release's had none), so the default preset's requests,
which carry the pixel budget as ``mm_processor_kwargs``, are refused there: once each, naming the flag; nor the
transfer backend, so a push over a process group into it is refused before anything is sent."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import torch
from PIL import Image

from paravt_core.engines.base import GenerationRequest, SamplingParams
from paravt_core.engines.openai_engine import OpenAIEngine
from paravt_core.engines.vllm_engine import VllmEngine
from paravt_core.eval.stage import run
from paravt_core.rl.weight_sync import NcclSync, PushFailed
from paravt_core.video import release_frames as R
from tests.support.eval_support import TINY_AGENT, fixture_entry, tiny_eval_config
from tests.support.ports import free_port

PER_PROTOCOL = 25  # the fixture benchmarks' samples (tests/e2e/test_eval_stage.py)
TOKENS_PER_FRAME = 12  # see the module docstring


class ObservedVllm(VllmEngine):
    """The real vLLM engine, keeping each chat body it sent and vLLM's answer to it."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.exchanges: list[tuple[dict[str, Any], dict[str, Any]]] = []

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        data = await super()._post(path, body)
        self.exchanges.append((body, data))
        return data


def _image_urls(body: dict[str, Any]) -> list[str]:
    return [p["image_url"]["url"] for m in body["messages"] if isinstance(m["content"], list)
            for p in m["content"] if p["type"] == "image_url"]  # fmt: skip


def _video_urls(body: dict[str, Any]) -> list[str]:
    return [p["video_url"]["url"] for m in body["messages"] if isinstance(m["content"], list)
            for p in m["content"] if p["type"] == "video_url"]  # fmt: skip


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_eval_under_preset_release_sends_every_frame_as_jpeg_and_vllm_sees_our_prompt_ids(
    release_vllm_server, tiny_model, eval_fixtures, tmp_path
):
    server = release_vllm_server
    engine = ObservedVllm(server.base_url, server.model, processor=tiny_model.processor)
    # the checkpoint as the stage reads it, with a repetition penalty in its generation_config.json: the
    # release's server applied it to every request, and so must the preset (the served weights are the same)
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    for f in Path(server.model).iterdir():
        (checkpoint / f.name).symlink_to(f)
    generation = json.loads((checkpoint / "generation_config.json").read_text())
    (checkpoint / "generation_config.json").unlink()
    (checkpoint / "generation_config.json").write_text(json.dumps({**generation, "repetition_penalty": 1.3}))
    # agentic: every benchmark's first request (the overview) and its tool rounds (crops); direct sends the same
    # overview under another prompt text
    cfg = tiny_eval_config(tmp_path, str(checkpoint), eval_fixtures, protocols=["agentic"],
                           agent={**TINY_AGENT, "max_new_tokens": 8}, max_error_share=0.0, preset="release",
                           engine={"kind": "vllm", "base_url": server.base_url})  # fmt: skip
    run(cfg, engine=engine, processor=tiny_model.processor)
    results = json.loads((Path(cfg.output) / "results.json").read_text())
    assert results["totals"]["samples"] == PER_PROTOCOL and results["totals"]["errors"] == 0
    assert (results["sampling"]["penalties"], results["sampling"]["sent"]) == (
        {"repetition_penalty": 1.3},
        True,
    )
    assert all(body["repetition_penalty"] == 1.3 for body, _ in engine.exchanges)
    # Charades as the release sends it (the whole video, decoded by vLLM); every other benchmark as frames
    channels = results["overview_channels"]
    assert channels.pop("charades") == "video_url" and set(channels.values()) == {"frames"}
    records = [r for p in Path(cfg.output, "samples").rglob("*.jsonl") for r in _lines(p)]
    charades = [r for r in records if r["benchmark"] == "charades"]
    framed = [r for r in records if r["benchmark"] != "charades"]
    assert len(records) == PER_PROTOCOL and all(r["status"] == "ok" for r in records) and charades
    assert all(r["frames"] == 64 for r in framed) and all(r["frames"] == 0 for r in charades)  # none here
    # every request's ids compared but those with the server's own video tokens, none different
    videos = [body for body, _ in engine.exchanges if _video_urls(body)]
    assert len(videos) == sum(r["turns"] for r in charades)  # every Charades request carries the video
    assert engine.prompt_ids_checked == sum(r["turns"] for r in framed) == len(engine.exchanges) - len(videos)
    assert engine.prompt_id_mismatches == 0 and engine.prompt_token_mismatches == 0
    pad = tiny_model.processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    video_pad = tiny_model.processor.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    overview_only = 0
    for body, answer in engine.exchanges:
        urls = _image_urls(body)
        assert all(u.startswith("data:image/jpeg;base64,") for u in urls)
        assert "mm_processor_kwargs" not in body  # the checkpoint's own processor settings, as the release
        # vLLM expanded every image it was sent into its tokens
        assert answer["prompt_token_ids"].count(pad) == TOKENS_PER_FRAME * len(urls)
        assert answer["usage"]["prompt_tokens"] == len(answer["prompt_token_ids"])
        if _video_urls(body):  # a file:// URL of the sample's own video, which vLLM decoded into its tokens
            (url,) = _video_urls(body)
            assert url.startswith("file:///") and Path(url.removeprefix("file://")).is_file()
            assert answer["prompt_token_ids"].count(video_pad) > 0
            continue
        assert len(urls) >= 64 and answer["prompt_token_ids"].count(video_pad) == 0
        overview_only += len(urls) == 64
    assert overview_only >= len(framed)  # every framed sample's first request: the 64 overview frames alone


def test_one_request_of_release_crop_frames_is_decoded_by_vllm_as_ours(
    vllm_server, tiny_model, eval_fixtures
):
    """On the session server (8 images at most): two crops' frames as JPEG; vLLM builds the same prompt ids."""
    video = fixture_entry(eval_fixtures, "videomme")["media_root"] + "/data/fxSynthA001.mp4"
    frames = [*R.crop(video, 1.0, 3.0).frames, *R.crop(video, 4.0, 7.0).frames]  # 2 + 2 frames: 1 fps, even
    messages = [{"role": "user", "content": [*({"type": "image", "image": f} for f in frames),
                                             {"type": "text", "text": "What is shown?"}]}]  # fmt: skip
    processor = tiny_model.processor
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = processor(text=[text], images=frames, return_tensors="pt")["input_ids"][0].tolist()
    engine = ObservedVllm(vllm_server.base_url, vllm_server.model, processor=processor)
    request = GenerationRequest(messages=messages, input_ids=ids,
                                sampling=SamplingParams(temperature=0.0, max_new_tokens=2))  # fmt: skip
    asyncio.run(engine.generate([request]))
    ((body, answer),) = engine.exchanges
    urls = _image_urls(body)
    assert len(urls) == len(frames) == 4
    for url, frame in zip(urls, frames, strict=True):
        head, data = url.split(",", 1)
        assert head == "data:image/jpeg;base64"
        pixels = np.asarray(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB"))
        assert np.array_equal(pixels, frame.permute(1, 2, 0).numpy())
    assert answer["prompt_token_ids"] == ids and engine.prompt_id_mismatches == 0
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert ids.count(pad) == TOKENS_PER_FRAME * 4


def test_a_refusal_is_not_retried_and_names_the_server_flag(
    release_vllm_server, tiny_model, eval_fixtures, tmp_path
):
    """vLLM 0.32 without --trust-request-mm-kwargs (the release's launch) refuses every request that carries
    mm_processor_kwargs (HTTP 400): one call per sample, recorded as engine_refused with the flag to set, never
    retried."""
    server = release_vllm_server
    engine = OpenAIEngine(server.base_url, server.model, processor=tiny_model.processor)
    cfg = tiny_eval_config(tmp_path, server.model, [fixture_entry(eval_fixtures, "mlvu")], protocols=["direct"],
                           agent={**TINY_AGENT, "max_new_tokens": 8}, runner={"retries": 3, "backoff_s": 0.0},
                           engine={"kind": "openai", "base_url": server.base_url})  # fmt: skip
    run(cfg, engine=engine, processor=tiny_model.processor)
    records = _lines(Path(cfg.output) / "samples" / "direct" / "mlvu.jsonl")
    assert len(records) == 3 and engine.attempts == 3  # one HTTP call per sample: no retry at either level
    for r in records:
        assert (r["status"], r["finish_reason"], r["attempts"]) == ("error", "engine_refused", 1)
        message = r["error"]["message"]
        assert (
            r["error"]["reason"] == "engine_refused"
            and "HTTP 400" in message
            and "(after 1 attempt(s))" in message
        )
        assert message.endswith("as mm_processor_kwargs; launch vLLM with --trust-request-mm-kwargs")


def test_a_group_push_into_a_server_without_our_backend_is_refused_before_it_is_sent(release_vllm_server):
    """A server launched without the transfer backend (as the release launched it) dies of
    ``/init_weight_transfer_engine``: the push is refused here, naming how to start it, and the server still
    answers."""
    server = release_vllm_server
    engine = VllmEngine(server.base_url, server.model)
    sync = NcclSync(engine, master_address="127.0.0.1", master_port=free_port(), server_ranks=1, backend="gloo",
                    bucket_bytes=1 << 20, pause_mode="wait", timeout_s=120)  # fmt: skip
    with pytest.raises(
        PushFailed, match="weight-transfer backend None, not 'paravt_torch': start it with PYTHONPATH="
    ):
        sync.push({"w": torch.zeros(2)}, version=1)
    assert httpx.get(engine.root + "/health", timeout=30).status_code == 200
