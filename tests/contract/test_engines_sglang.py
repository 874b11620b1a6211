"""SGLangEngine against SGLang 0.5.23's request contract, over a loopback server that enforces it.

The contract (read in SGLang 0.5.23's source: ``entrypoints/http_server.py`` + ``api_contract.py`` (the JSON
schema gate), ``managers/io_struct.py``, ``managers/tokenizer_manager.py``, ``multimodal/processors/
qwen_vl.py`` + ``base_processor.py``), which ``_ContractServer`` below enforces so that payloads breaking it
fail these tests:

- ``image_data`` mixing ``null`` and image lists is rejected by the schema when a ``null`` comes first (400);
  ``sampling_params`` with unknown keys too; duplicate ``rid`` s in one body (400).
- a ``rid`` the server still tracks (e.g. the first attempt of a retry) answers 400 "Duplicate request ID".
- ``input_ids`` carry ONE ``<|image_pad|>`` (between vision start/end) per image; the server expands each
  from the grid its own image processor computes with the checkpoint's defaults updated by
  ``--mm-process-config``'s ``image`` keywords; ``meta_info.prompt_tokens`` is the expanded length. Other pad
  counts fail (500: placeholder/image count mismatch).
- ``/init_weights_update_group`` returns only once the trainer side has joined the group.

It serves the tiny model through ``TransformersEngine`` (or a ``ScriptedEngine`` for scripted episodes), so
outputs are compared with in-process generation. SGLang's own schema gate (its wheel, set up by
``scripts/setup.sh``; ``tests/support/sglang_support.py``) decodes our bodies too
(``test_payloads_pass_sglangs_own_schema_gate``; control bodies in ``test_sglang_contract.py``).

GPU checklist (run on a GPU machine with ``sglang==0.5.23`` installed and a Qwen3-VL checkpoint; not run
here; ``make gpu-check`` (``scripts/gpu_check.py``) runs 1-3 and 6 on a random Qwen3-VL-shaped model):
1. ``SGLangEngine.launch(<dir>, port=30000, max_pixels=50176, min_pixels=784)`` starts
   ``python -m sglang.launch_server ... --mm-process-config '{"image":{"size":{...}}}'`` and comes up
   healthy; ``engine.server.stop()`` ends it.
2. An overview request (64 frames of 224x224 from ``video.api.overview``) with collapsed pads is accepted
   and the reply's ``meta_info.prompt_tokens`` equals our expanded ``len(input_ids)`` (49 tokens per frame,
   not 64: the server kept our 224² frames); ``engine.prompt_token_mismatches == 0`` after an episode.
3. ``SGLangEngine`` on the same prompt as ``TransformersEngine`` (greedy, bf16): same first tokens, log-probs
   within ~1e-2; ``output_token_logprobs`` includes the stop token (``<|im_end|>``) as the last entry.
4. A mixed call (text-only + image requests) returns both in order; a retry after a client timeout is not
   answered "Duplicate request ID".
5. ``launch(..., deterministic_inference=True)``: two sampled runs with the same seed give the same tokens;
   without it completions say ``seed_applied=False``.
6. ``update_weights_from_disk(<checkpoint dir>)`` returns success and changes greedy outputs;
   ``init_weights_update_group(..., trainer_join=<rank-0 init_process_group>)`` +
   ``update_weights_from_distributed`` give the same outputs as the disk path for the same weights.
7. ``paravt agent run --engine sglang --model <dir> --video v.mp4 --question ...`` (launches the server; or
   ``--base-url http://127.0.0.1:30000`` for a running one) prints a full trajectory.
"""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
import torch

from paravt_core.agent.episode import arun_episode
from paravt_core.agent.parsing import format_tool_call
from paravt_core.engines.base import EngineError, GenerationRequest, SamplingParams, image_processor_kwargs
from paravt_core.engines.scripted import ScriptedEngine
from paravt_core.engines.sglang_engine import (
    SGLangEngine,
    generate_payload,
    launch_command,
    mm_process_config,
    parse_generate_response,
)
from paravt_core.engines.transformers_engine import TransformersEngine
from paravt_core.video.sizing import fit_to_grid
from tests.support.agent_support import (
    MAX_PIXELS,
    MIN_PIXELS,
    image_request,
    random_frames,
    tiny_agent_config,
)
from tests.support.openai_test_server import _decode_data_url
from tests.support.sglang_contract_server import (
    _ContractServer,
)


def _launched_config(**kwargs) -> dict:
    """The --mm-process-config our launch command passes (what a real server would be started with)."""
    cmd = launch_command("/models/x", max_pixels=MAX_PIXELS, min_pixels=MIN_PIXELS, **kwargs)
    return json.loads(cmd[cmd.index("--mm-process-config") + 1])


@pytest.fixture(scope="module")
def engine(tiny_model) -> TransformersEngine:
    return TransformersEngine(tiny_model.model, tiny_model.processor)


def _image_request(processor, seed: int, n_images: int, max_new_tokens: int = 10) -> GenerationRequest:
    frames = random_frames(seed, n_images, 64, 64)
    return image_request(
        processor, frames, f"frame set {seed}", temperature=0.0, max_new_tokens=max_new_tokens
    )


def _collapsed(processor, request_text_frames: tuple[str, int]) -> list[int]:
    """One pad per image, independently: the chat template's text tokenized by the tokenizer alone (the
    template writes one <|vision_start|><|image_pad|><|vision_end|> per image; only the processor expands)."""
    text, n = request_text_frames
    parts = [{"type": "image"}] * n + [{"type": "text", "text": text}]
    rendered = processor.apply_chat_template(
        [{"role": "user", "content": parts}], add_generation_prompt=True, tokenize=False
    )
    return processor.tokenizer(rendered, add_special_tokens=False)["input_ids"]


def test_generate_payload_follows_the_contract(tiny_model):
    processor = tiny_model.processor
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    with_images = _image_request(processor, 0, 2)
    # 64x64 frames: (64/16)^2 = 16 patches, merged 2x2 -> 4 pads each in the processor's expansion
    assert with_images.input_ids.count(pad) == 2 * 4
    text_only = GenerationRequest(
        input_ids=[1, 2, 3],
        sampling=SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=7, stop=("</answer>",), seed=5),
    )
    body = generate_payload([with_images], image_token_id=pad)
    assert set(body) == {
        "input_ids",
        "sampling_params",
        "return_logprob",
        "logprob_start_len",
        "rid",
        "image_data",
    }
    assert body["input_ids"] == [_collapsed(processor, ("frame set 0", 2))]
    assert body["input_ids"][0].count(pad) == 2
    assert body["rid"] == [with_images.request_id]
    assert body["return_logprob"] is True and body["logprob_start_len"] == -1
    (urls,) = body["image_data"]
    assert all(u.startswith("data:image/png;base64,") for u in urls)
    assert all(torch.equal(_decode_data_url(u), f) for u, f in zip(urls, with_images.images, strict=True))

    text_body = generate_payload([text_only], rids=["r-1"], seeds=True)
    assert "image_data" not in text_body and text_body["rid"] == ["r-1"]
    assert text_body["sampling_params"] == [
        {
            "temperature": 0.7,
            "top_p": 0.9,
            "max_new_tokens": 7,
            "stop": ["</answer>"],
            "sampling_seed": 5,
            "skip_special_tokens": False,
            "no_stop_trim": True,
        }
    ]
    assert "sampling_seed" not in generate_payload([text_only], seeds=False)["sampling_params"][0]
    with pytest.raises(ValueError, match="only image requests or only text requests"):
        generate_payload([with_images, text_only], image_token_id=pad)
    with pytest.raises(EngineError, match="image token"):
        generate_payload([with_images])
    bad = GenerationRequest(input_ids=with_images.input_ids, images=with_images.images[:1])
    with pytest.raises(EngineError, match="2 image placeholders for 1 images"):
        generate_payload([bad], image_token_id=pad)
    with pytest.raises(EngineError, match="input_ids"):
        generate_payload([GenerationRequest(messages=[])])
    json.dumps(body)  # plain JSON


def test_parse_documented_responses():
    requests = [GenerationRequest(input_ids=[1] * 5), GenerationRequest(input_ids=[1] * 3)]
    documented = [  # shapes from SGLang's native API docs
        {
            "text": " Paris.",
            "output_ids": [12095, 13],
            "meta_info": {
                "id": "a",
                "finish_reason": {"type": "length", "length": 2},
                "prompt_tokens": 5,
                "completion_tokens": 2,
                "output_token_logprobs": [[-0.5, 12095, None], [-0.25, 13, None]],
                "e2e_latency": 0.04,
            },
        },
        {
            "text": "A",
            "output_ids": [32, 151645],
            "meta_info": {
                "id": "b",
                "finish_reason": {"type": "stop", "matched": 151645},
                "prompt_tokens": 3,
                "completion_tokens": 2,
                "output_token_logprobs": [[-0.1, 32, None], [-0.01, 151645, None]],
            },
        },
    ]
    a, b = parse_generate_response(documented, requests)
    assert (a.token_ids, a.logprobs, a.finish_reason, a.text, a.prompt_tokens) == (
        [12095, 13],
        [-0.5, -0.25],
        "length",
        " Paris.",
        5,
    )
    assert a.latency_s == pytest.approx(0.04)
    assert (b.token_ids, b.finish_reason, b.stop_reason) == ([32, 151645], "stop", 151645)
    single = parse_generate_response(documented[0], requests[:1])  # non-batched reply: one object
    assert single[0].token_ids == [12095, 13]
    aborted = {
        **documented[0],
        "meta_info": {**documented[0]["meta_info"], "finish_reason": {"type": "abort", "message": "oom"}},
    }
    with pytest.raises(EngineError, match="aborted.*oom"):
        parse_generate_response([aborted], requests[:1])
    with pytest.raises(EngineError, match="2 outputs for 1"):
        parse_generate_response(documented, requests[:1])
    with pytest.raises(EngineError, match="output_token_logprobs"):
        parse_generate_response([{"meta_info": {"finish_reason": {"type": "stop"}}}], requests[:1])
    # the server counted 9 prompt tokens where we sent 5: an error naming both numbers
    recounted = {**documented[0], "meta_info": {**documented[0]["meta_info"], "prompt_tokens": 9}}
    with pytest.raises(EngineError, match="counted 9 prompt tokens.*we have 5"):
        parse_generate_response([recounted], requests[:1])


def test_mixed_batch_over_the_contract_equals_in_process(engine, tiny_model):
    requests = [_image_request(tiny_model.processor, s, n) for s, n in [(1, 1), (2, 2), (3, 0)]]
    with _ContractServer(engine, tiny_model.processor, mm_config=_launched_config()) as server:
        client = SGLangEngine(server.url, processor=tiny_model.processor)
        remote = asyncio.run(client.generate(requests))
    bodies = [body for path, body in server.calls]
    # image requests and the text request in separate bodies; together they cover the call in order
    assert sorted(len(b["input_ids"]) for b in bodies) == [1, 2]
    assert sorted(r for b in bodies for r in b["rid"]) == sorted(r.request_id for r in requests)
    assert client.prompt_token_mismatches == 0
    local = engine.generate_sync(requests)
    for got, want, request in zip(remote, local, requests, strict=True):
        assert (
            got.token_ids == want.token_ids and got.finish_reason == want.finish_reason and got.exact_tokens
        )
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-6)
        assert got.text == tiny_model.tokenizer.decode(want.token_ids, skip_special_tokens=False)
        assert got.prompt_tokens == len(request.input_ids)


def test_a_server_with_other_image_settings_is_caught(engine, tiny_model):
    """Launched without our --mm-process-config the server upsizes 64x64 frames to its 96² minimum: 9
    image tokens per frame instead of our 4; the engine reports it instead of generating on other pixels."""
    request = _image_request(tiny_model.processor, 4, 1)
    with _ContractServer(engine, tiny_model.processor, mm_config=None) as server:
        client = SGLangEngine(server.url, processor=tiny_model.processor, max_retries=0)
        with pytest.raises(EngineError) as info:
            asyncio.run(client.generate([request]))
    sent = len(request.input_ids)
    assert f"counted {sent - 4 + 9} prompt tokens for request {request.request_id}, we have {sent}" in str(
        info.value
    )
    assert client.prompt_token_mismatches == 1


@pytest.mark.parametrize(
    ("max_pixels", "min_pixels"), [(50176, 784), (MAX_PIXELS, MIN_PIXELS), (360 * 640, 784)]
)
def test_server_sizing_keeps_our_frame_sizes(tiny_model, max_pixels, min_pixels):
    """For our budget and many source sizes, the size the server's image processor computes (transformers'
    smart_resize with the values --mm-process-config passes, and the real processor's grid) is our size."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    config = mm_process_config(max_pixels=max_pixels, min_pixels=min_pixels)
    size = config["image"]["size"]
    assert config == {"image": image_processor_kwargs(max_pixels=max_pixels, min_pixels=min_pixels)}
    sources = [
        (224, 224),
        (1080, 1920),
        (480, 640),
        (97, 333),
        (1000, 60),
        (28, 28),
        (720, 1280),
        (2160, 3840),
    ]
    for src_h, src_w in sources:
        h, w = fit_to_grid(src_h, src_w, max_pixels=max_pixels, min_pixels=min_pixels)  # what we send
        assert smart_resize(
            h, w, factor=32, min_pixels=size["shortest_edge"], max_pixels=size["longest_edge"]
        ) == (h, w)
    # the real processor (what SGLang calls with these keywords) on a frame we made: grid = size / 16
    h, w = fit_to_grid(96, 128, max_pixels=MAX_PIXELS, min_pixels=MIN_PIXELS)
    assert (h, w) == (64, 64)  # 96*128 = 12288 > 6144: scale sqrt(2), floor to 32 -> 64 x 64
    frame = torch.zeros(3, h, w, dtype=torch.uint8)
    launched = _launched_config()
    grid = tiny_model.processor.image_processor(images=[frame], return_tensors="pt", **launched["image"])[
        "image_grid_thw"
    ]
    assert grid.tolist() == [[1, 4, 4]]
    # why it matters: the real Qwen3-VL default minimum (65536 px) turns a 224x224 frame into 256x256
    assert smart_resize(224, 224, factor=32, min_pixels=65536, max_pixels=16777216) == (256, 256)


def test_retry_goes_out_under_a_new_request_id(engine, tiny_model):
    request = _image_request(tiny_model.processor, 5, 1, max_new_tokens=4)
    with _ContractServer(
        engine, tiny_model.processor, mm_config=_launched_config(), delay_first_s=5.0
    ) as server:
        client = SGLangEngine(
            server.url, processor=tiny_model.processor, timeout_s=0.5, max_retries=2, backoff_s=0.01
        )
        (completion,) = asyncio.run(client.generate([request]))
        first, second = [b["rid"][0] for p, b in server.calls if p == "/generate"]
        aborted = list(server.aborted)
    # the first id was still tracked by the server when the retry came: a reused id would get
    # "Duplicate request ID" (400, not retried); the retry carries a new one, and the first was aborted
    assert first == request.request_id and second != first and second.startswith(request.request_id)
    assert aborted == [first]
    assert completion.request_id == request.request_id
    (local,) = engine.generate_sync([request])
    assert completion.token_ids == local.token_ids


def test_retries_stop_at_the_total_time_bound(engine, tiny_model):
    request = GenerationRequest(input_ids=[1, 2, 3], sampling=SamplingParams(max_new_tokens=2))
    with _ContractServer(engine, tiny_model.processor, fail_first=10_000) as server:
        client = SGLangEngine(server.url, max_retries=1000, backoff_s=0.05, max_total_s=0.5)
        # the last attempt ends with the 503 or, when it started just before the bound, its shortened timeout
        with pytest.raises(
            EngineError, match=r"(HTTP 503|timed out after).*no time left of max_total_s=0\.5"
        ):
            asyncio.run(client.generate([request]))
        calls = len(server.calls)
    # backoff 0.05, 0.1, 0.2, 0.4 s: the 0.5 s bound ends it after a handful of attempts, not 1001
    assert 1 < calls < 1001


def test_retries_back_off_exponentially(engine, tiny_model):
    """Three 503s, then an answer: the waits before attempts 2, 3 and 4 are backoff_s * 1, 2 and 4. Each
    retry leaves after the failed answer came back plus its wait, so the arrivals at the server are at least
    that far apart (lower bounds only: a slow machine makes the gaps longer, never shorter)."""
    request = GenerationRequest(input_ids=[1, 2, 3], sampling=SamplingParams(max_new_tokens=2))
    with _ContractServer(engine, tiny_model.processor, fail_first=3) as server:
        client = SGLangEngine(server.url, max_retries=3, backoff_s=0.3)
        (completion,) = asyncio.run(client.generate([request]))
        arrivals = list(server.arrivals)
    assert len(arrivals) == 4 and client.retried_posts == 3 and completion.token_ids
    gaps = [b - a for a, b in zip(arrivals[:-1], arrivals[1:], strict=True)]
    for gap, wait in zip(gaps, [0.3, 0.6, 1.2], strict=True):
        assert gap >= wait - 0.01, (gaps, "waits of 0.3, 0.6, 1.2 s expected")


def test_seeds_need_deterministic_inference(engine, tiny_model):
    request = GenerationRequest(
        input_ids=tiny_model.tokenizer("hello", add_special_tokens=False)["input_ids"],
        sampling=SamplingParams(temperature=0.8, max_new_tokens=3, seed=11),
    )
    for deterministic in (False, True):
        with _ContractServer(engine, tiny_model.processor) as server:
            client = SGLangEngine(
                server.url, processor=tiny_model.processor, deterministic_inference=deterministic
            )
            (completion,) = asyncio.run(client.generate([request]))
        (params,) = server.calls[0][1]["sampling_params"]
        assert ("sampling_seed" in params) is deterministic and completion.seed_applied is deterministic
        if deterministic:
            assert params["sampling_seed"] == 11
    assert "--enable-deterministic-inference" in launch_command("/m", deterministic_inference=True)
    assert "--enable-deterministic-inference" not in launch_command("/m")


def test_scripted_episode_over_the_sglang_protocol(tiny_model, video):
    main = [
        format_tool_call("crop_video", {"start_time": 0, "end_time": 2})
        + format_tool_call("crop_video", {"start_time": 3, "end_time": 5}),
        "The circle.</think><answer>B</answer>",
    ]
    scripted = ScriptedEngine(tiny_model.processor, main, subagent=lambda req, i: f"Report {i}.")
    with _ContractServer(scripted, tiny_model.processor, mm_config=_launched_config()) as server:
        client = SGLangEngine(server.url, processor=tiny_model.processor)
        cfg = tiny_agent_config(think_prefix=True)
        result = asyncio.run(arun_episode({"video": str(video), "question": "Which shape?"}, client, cfg))
    assert (result.finish_reason, result.answer, len(result.turns)) == ("answer", "B", 2)
    assert [(c.window, c.frames, c.report, c.ok) for c in result.calls] == [
        ((0.0, 2.0), 2, "Report 0.", True),  # 1 fps over [0, 2]: 2 frames
        ((3.0, 5.0), 2, "Report 1.", True),
    ]
    assert [t.finish_reason for t in result.turns] == ["stop", "stop"]
    bodies = [b for p, b in server.calls if p == "/generate"]
    # main (8 overview frames), both sub-agents in one body (2 crop frames each), main again
    assert [[len(urls) for urls in b["image_data"]] for b in bodies] == [[8], [2, 2], [8]]
    pad = tiny_model.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert [[ids.count(pad) for ids in b["input_ids"]] for b in bodies] == [[8], [2, 2], [8]]
    assert client.prompt_token_mismatches == 0  # the server's expansion equals our exact count every time
    generated = [s for s in result.main.segments if s.kind == "generated"]
    assert [s.text for s in generated] == [main[0] + "<|im_end|>", main[1] + "<|im_end|>"]


def test_weight_update_requests(engine, tiny_model, tiny_model_dir):
    with _ContractServer(engine, tiny_model.processor) as server:
        client = SGLangEngine(server.url)
        # the served weights themselves: the shared engine is reloaded with what it already holds
        asyncio.run(client.update_weights_from_disk(tiny_model_dir, weight_version="5"))
        with pytest.raises(EngineError, match="update_weights_from_disk failed: Failed to update weights"):
            asyncio.run(client.update_weights_from_disk(tiny_model_dir + "/missing"))
        asyncio.run(
            client.init_weights_update_group(
                "10.0.0.1",
                29600,
                rank_offset=1,
                world_size=2,
                trainer_join=server.trainer_joined.set,
                timeout_s=20,
            )
        )
        sent = []
        tensors = [
            ("model.lm_head.weight", torch.zeros(4, 2, dtype=torch.bfloat16)),
            ("x.bias", torch.ones(3)),
        ]
        asyncio.run(client.update_weights_from_distributed(tensors, sent.append, weight_version="6"))
        assert [t.shape for t in sent] == [torch.Size([4, 2]), torch.Size([3])]
        assert client.weight_version == "6"
        server.control_success = False
        with pytest.raises(EngineError, match="update_weights_from_disk failed: recorded"):
            asyncio.run(client.update_weights_from_disk("/ckpt/bad"))
    bodies: dict[str, dict] = {}
    for path, body in server.calls:
        bodies.setdefault(path, body)  # the first of each
    assert bodies["/update_weights_from_disk"] == {
        "model_path": tiny_model_dir,
        "flush_cache": True,
        "weight_version": "5",
    }
    assert bodies["/init_weights_update_group"] == {
        "master_address": "10.0.0.1",
        "master_port": 29600,
        "rank_offset": 1,
        "world_size": 2,
        "group_name": "weight_update_group",
        "backend": "nccl",
    }
    assert bodies["/update_weights_from_distributed"] == {
        "names": ["model.lm_head.weight", "x.bias"],
        "dtypes": ["bfloat16", "float32"],
        "shapes": [[4, 2], [3]],
        "group_name": "weight_update_group",
        "flush_cache": True,
        "weight_version": "6",
    }
    # control calls are never resent
    assert [p for p, _ in server.calls].count("/update_weights_from_disk") == 3
    assert server.weight_versions == ["5"]


def test_weight_update_group_rendezvous_failures(engine, tiny_model):
    with _ContractServer(engine, tiny_model.processor) as server:
        client = SGLangEngine(server.url)
        # the trainer never joins: the server side cannot complete, and the call says so in time
        with pytest.raises(EngineError, match=r"not complete after 0\.5 s \(still waiting: server\)"):
            asyncio.run(client.init_weights_update_group("h", 1, rank_offset=1, world_size=2, timeout_s=0.5))

        def broken_trainer():
            raise RuntimeError("NCCL init failed")

        with pytest.raises(EngineError, match="the trainer side failed.*NCCL init failed"):
            asyncio.run(
                client.init_weights_update_group(
                    "h", 1, rank_offset=1, world_size=2, trainer_join=broken_trainer, timeout_s=10
                )
            )


def test_payloads_pass_sglangs_own_schema_gate(engine, tiny_model, sglang_checker):
    verdict = (
        sglang_checker.generate_error
    )  # SGLang 0.5.23's api_types.GenerateRequest (tests/support/sglang_side.py)

    requests = [_image_request(tiny_model.processor, s, n) for s, n in [(6, 0), (7, 2), (8, 1)]]
    for r in requests:
        r.sampling = SamplingParams(max_new_tokens=3, stop=("</answer>",), seed=3)
    with _ContractServer(engine, tiny_model.processor, mm_config=_launched_config()) as server:
        asyncio.run(
            SGLangEngine(server.url, processor=tiny_model.processor, deterministic_inference=True).generate(
                requests
            )
        )
    bodies = [b for p, b in server.calls if p == "/generate"]
    assert len(bodies) == 2 and [verdict(b) for b in bodies] == [None, None]
    # the gate is live: the old mixed shape (a null first, then a list of images) is refused by it
    old = {
        **bodies[0],
        "input_ids": [[1], [2]],
        "image_data": [None, ["data:image/png;base64,AA=="]],
        "rid": ["a", "b"],
    }
    assert verdict(old) == "invalid type: sequence, expected one of the MediaItem shapes"


def test_launch_command():
    cmd = launch_command(
        "/models/ParaVT-8B",
        port=31000,
        mem_fraction_static=0.8,
        max_pixels=50176,
        min_pixels=784,
        extra_args=["--log-level", "warning"],
    )
    assert cmd[1:3] == ["-m", "sglang.launch_server"]
    flags = dict(zip(cmd[3::2], cmd[4::2], strict=False))
    assert flags["--model-path"] == "/models/ParaVT-8B" and flags["--port"] == "31000"
    assert flags["--context-length"] == "32768" and flags["--mem-fraction-static"] == "0.8"
    assert json.loads(flags["--mm-process-config"]) == {
        "image": {"size": {"shortest_edge": 784, "longest_edge": 50176}}
    }
    assert cmd[-2:] == ["--log-level", "warning"]
    with pytest.raises(ValueError, match="both"):
        launch_command("/m", max_pixels=50176)


# A stand-in for the server process: serves GET /health on the port it is given, binding it with
# SO_REUSEPORT so the test can hold the port reserved while the child binds it too (no release-then-reuse
# window in which another process could take it).
_HEALTH_SERVER = """
import http.server, socket, sys
class Server(http.server.HTTPServer):
    def server_bind(self):
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
Server(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


def test_server_process_lifecycle(tmp_path):
    import socket

    from paravt_core.engines.sglang_engine import SGLangServer

    failing = SGLangServer([sys.executable, "-c", "raise SystemExit(3)"], "http://127.0.0.1:9")
    with pytest.raises(EngineError, match="exited with code 3"):
        failing.start(timeout_s=30, poll_s=0.05)

    with socket.socket() as reservation:  # bound (not listening) for the whole test: the port stays ours
        reservation.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        reservation.bind(("127.0.0.1", 0))
        port = reservation.getsockname()[1]
        cmd = [sys.executable, "-c", _HEALTH_SERVER, str(port)]
        server = SGLangServer(cmd, f"http://127.0.0.1:{port}", log_path=str(tmp_path / "server.log"))
        server.start(timeout_s=30, poll_s=0.05)
        try:
            assert server.process.poll() is None
            assert asyncio.run(SGLangEngine(server.base_url).health())
        finally:
            server.stop()
        assert server.process.poll() is not None


def test_each_event_loop_keeps_its_own_http_client():
    """With bounded staleness the rollout thread's loop generates while the learner's loop pushes weights:
    each loop keeps its own client, and closing one loop's client leaves the other's open."""
    engine = SGLangEngine("http://127.0.0.1:9")  # nothing is sent

    async def client_twice():
        return engine._http(), engine._http()

    rollout_loop = asyncio.new_event_loop()
    try:
        a1, a2 = rollout_loop.run_until_complete(client_twice())
        b1, _ = asyncio.run(client_twice())  # a weight push on its own short-lived loop, in between
        a3, _ = rollout_loop.run_until_complete(client_twice())
        assert a1 is a2 is a3
        assert b1 is not a1
        asyncio.run(engine.aclose())  # a third loop has no client: nothing else is closed
        assert not a1.is_closed
        rollout_loop.run_until_complete(engine.aclose())
        assert a1.is_closed
    finally:
        rollout_loop.close()
