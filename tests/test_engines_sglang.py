"""SGLangEngine: request/response mapping against SGLang's documented shapes, over a loopback stub.

The stub implements the documented ``/generate`` contract (batched ``input_ids`` + ``image_data`` data URLs +
``sampling_params`` + ``return_logprob``) by serving the tiny model through TransformersEngine, and the
weight-update endpoints by recording their bodies. A real SGLang server needs a GPU.

GPU checklist (run on a GPU machine with ``sglang==0.5.23`` installed; not run here):
1. ``SGLangEngine.launch(<Qwen3-VL-8B dir>, port=30000)`` starts ``python -m sglang.launch_server`` and comes
   up healthy; ``engine.server.stop()`` ends it.
2. ``SGLangEngine`` on the same prompt as ``TransformersEngine`` (greedy, bf16): same first tokens, log-probs
   within ~1e-2; ``output_token_logprobs`` includes the stop token (``<|im_end|>``) as the last entry.
3. ``input_ids`` with image pads already expanded + ``image_data`` are accepted (not re-expanded): the reply's
   ``prompt_tokens`` equals ``len(input_ids)``.
4. ``update_weights_from_disk(<checkpoint dir>)`` returns success and changes greedy outputs;
   ``init_weights_update_group`` + ``update_weights_from_distributed`` with an NCCL group of trainer rank 0 +
   the server gives the same outputs as the disk path for the same weights.
5. ``paravt agent run --engine sglang --model <dir> --video v.mp4 --question ...`` (launches the server; or
   ``--base-url http://127.0.0.1:30000`` for a running one) prints a full trajectory.
"""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from paravt_core.agent.episode import FINISH_REASONS, arun_episode
from paravt_core.engines.base import EngineError, GenerationRequest, SamplingParams
from paravt_core.engines.sglang_engine import (
    SGLangEngine,
    generate_payload,
    launch_command,
    parse_generate_response,
)
from paravt_core.engines.transformers_engine import TransformersEngine
from tests.agent_support import image_request, random_frames, tiny_agent_config, video  # noqa: F401
from tests.openai_test_server import _decode_data_url


class _Stub:
    """Loopback SGLang stand-in: /generate on the tiny model, control endpoints recorded."""

    def __init__(self, engine: TransformersEngine, control_success: bool = True):
        self.engine, self.control_success = engine, control_success
        self.calls: list[tuple[str, dict]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                stub.calls.append((self.path, body))
                if self.path == "/generate":
                    status, payload = 200, stub.generate(body)
                elif self.path == "/flush_cache":
                    status, payload = 200, {}
                else:
                    status, payload = 200, {"success": stub.control_success, "message": "recorded"}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def generate(self, body: dict) -> list[dict]:
        n = len(body["input_ids"])
        assert isinstance(body["input_ids"][0], list) and len(body["sampling_params"]) == n
        assert body["return_logprob"] is True and body["logprob_start_len"] == -1
        images = body.get("image_data") or [None] * n
        requests = []
        for ids, params, urls in zip(body["input_ids"], body["sampling_params"], images, strict=True):
            pixels = grid = None
            if urls:
                frames = [_decode_data_url(u) for u in urls]
                out = self.engine.processor.image_processor(images=frames, return_tensors="pt")
                pixels, grid = out["pixel_values"], out["image_grid_thw"]
            sampling = SamplingParams(
                temperature=params["temperature"],
                top_p=params["top_p"],
                max_new_tokens=params["max_new_tokens"],
                seed=params.get("sampling_seed"),
            )
            requests.append(
                GenerationRequest(input_ids=ids, pixel_values=pixels, image_grid_thw=grid, sampling=sampling)
            )
        outputs = []
        for c in self.engine.generate_sync(requests):
            finish = (
                {"type": "stop", "matched": c.stop_reason}
                if c.finish_reason == "stop"
                else {
                    "type": "length",
                    "length": len(c.token_ids),
                }
            )
            outputs.append(
                {
                    "text": self.engine.tokenizer.decode(c.token_ids, skip_special_tokens=True),
                    "output_ids": c.token_ids,
                    "meta_info": {
                        "id": "x",
                        "finish_reason": finish,
                        "prompt_tokens": c.prompt_tokens,
                        "completion_tokens": len(c.token_ids),
                        "output_token_logprobs": [
                            [lp, t, None] for lp, t in zip(c.logprobs, c.token_ids, strict=True)
                        ],
                        "e2e_latency": c.latency_s,
                    },
                }
            )
        return outputs

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def engine(tiny_model) -> TransformersEngine:
    return TransformersEngine(tiny_model.model, tiny_model.processor)


def _image_request(processor, seed: int, n_images: int, max_new_tokens: int = 10) -> GenerationRequest:
    frames = random_frames(seed, n_images, 64, 64)
    return image_request(
        processor, frames, f"frame set {seed}", temperature=0.0, max_new_tokens=max_new_tokens
    )


def test_generate_payload_has_the_documented_batch_shape(tiny_model):
    with_images = _image_request(tiny_model.processor, 0, 2)
    text_only = GenerationRequest(
        input_ids=[1, 2, 3],
        sampling=SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=7, stop=("</answer>",), seed=5),
    )
    body = generate_payload([with_images, text_only])
    assert set(body) == {
        "input_ids",
        "sampling_params",
        "return_logprob",
        "logprob_start_len",
        "rid",
        "image_data",
    }
    assert body["input_ids"] == [with_images.input_ids, [1, 2, 3]]
    assert body["rid"] == [with_images.request_id, text_only.request_id]
    assert body["return_logprob"] is True and body["logprob_start_len"] == -1
    assert body["sampling_params"][1] == {
        "temperature": 0.7,
        "top_p": 0.9,
        "max_new_tokens": 7,
        "stop": ["</answer>"],
        "sampling_seed": 5,
        "skip_special_tokens": False,
        "no_stop_trim": True,
    }
    urls, none = body["image_data"]
    assert none is None and len(urls) == 2 and all(u.startswith("data:image/png;base64,") for u in urls)
    assert all(torch.equal(_decode_data_url(u), f) for u, f in zip(urls, with_images.images, strict=True))
    assert "image_data" not in generate_payload([text_only])
    json.dumps(body)  # the body is plain JSON
    with pytest.raises(EngineError, match="input_ids"):
        generate_payload([GenerationRequest(messages=[])])


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


def test_batched_generation_over_http_equals_in_process(engine, tiny_model):
    requests = [_image_request(tiny_model.processor, s, n) for s, n in [(1, 1), (2, 2), (3, 0)]]
    stub = _Stub(engine)
    try:
        client = SGLangEngine(stub.url, processor=tiny_model.processor)
        remote = asyncio.run(client.generate(requests))
    finally:
        stub.close()
    assert [path for path, _ in stub.calls] == ["/generate"]  # one HTTP call for the batch
    local = engine.generate_sync(requests)
    for got, want in zip(remote, local, strict=True):
        assert (
            got.token_ids == want.token_ids and got.finish_reason == want.finish_reason and got.exact_tokens
        )
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-6)
        assert got.text == tiny_model.tokenizer.decode(want.token_ids, skip_special_tokens=False)


def test_episode_over_the_sglang_protocol(engine, tiny_model, video):  # noqa: F811
    stub = _Stub(engine)
    try:
        client = SGLangEngine(stub.url, processor=tiny_model.processor)
        cfg = tiny_agent_config(max_new_tokens=12, think_prefix=True)
        result = asyncio.run(arun_episode({"video": str(video), "question": "What is shown?"}, client, cfg))
    finally:
        stub.close()
    assert result.finish_reason in FINISH_REASONS
    body = stub.calls[0][1]
    assert body["input_ids"][0] == result.main.token_ids[: len(body["input_ids"][0])]
    assert len(body["image_data"][0]) == 8
    generated = [s for s in result.main.segments if s.kind == "generated"][0]
    assert all(lp <= 0 for lp in generated.logprobs) and any(lp < 0 for lp in generated.logprobs)


def test_weight_update_requests(engine):
    stub = _Stub(engine)
    try:
        client = SGLangEngine(stub.url)
        asyncio.run(client.update_weights_from_disk("/ckpt/step-5", weight_version="5"))
        asyncio.run(client.init_weights_update_group("10.0.0.1", 29600, rank_offset=1, world_size=2))
        sent = []
        tensors = [
            ("model.lm_head.weight", torch.zeros(4, 2, dtype=torch.bfloat16)),
            ("x.bias", torch.ones(3)),
        ]
        asyncio.run(client.update_weights_from_distributed(tensors, sent.append, weight_version="6"))
        assert [t.shape for t in sent] == [torch.Size([4, 2]), torch.Size([3])]
        assert client.weight_version == "6"
        stub.control_success = False
        with pytest.raises(EngineError, match="update_weights_from_disk failed: recorded"):
            asyncio.run(client.update_weights_from_disk("/ckpt/bad"))
    finally:
        stub.close()
    bodies = dict((path, body) for path, body in stub.calls[:3])
    assert bodies["/update_weights_from_disk"] == {
        "model_path": "/ckpt/step-5",
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
    assert [p for p, _ in stub.calls].count("/update_weights_from_disk") == 2


def test_launch_command():
    cmd = launch_command(
        "/models/ParaVT-8B", port=31000, mem_fraction_static=0.8, extra_args=["--log-level", "warning"]
    )
    assert cmd[1:3] == ["-m", "sglang.launch_server"]
    flags = dict(zip(cmd[3::2], cmd[4::2], strict=False))
    assert flags["--model-path"] == "/models/ParaVT-8B" and flags["--port"] == "31000"
    assert flags["--context-length"] == "32768" and flags["--mem-fraction-static"] == "0.8"
    assert cmd[-2:] == ["--log-level", "warning"]


def test_server_process_lifecycle(tmp_path):
    import socket
    import sys

    from paravt_core.engines.sglang_engine import SGLangServer

    failing = SGLangServer([sys.executable, "-c", "raise SystemExit(3)"], "http://127.0.0.1:9")
    with pytest.raises(EngineError, match="exited with code 3"):
        failing.start(timeout_s=30, poll_s=0.05)

    # a stand-in process that serves GET /health (a file named "health") the way the real server does
    (tmp_path / "health").write_text("ok")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "http.server",
        str(port),
        "--bind",
        "127.0.0.1",
        "--directory",
        str(tmp_path),
    ]
    server = SGLangServer(cmd, f"http://127.0.0.1:{port}", log_path=str(tmp_path / "server.log"))
    server.start(timeout_s=30, poll_s=0.05)
    try:
        assert server.process.poll() is None
        assert asyncio.run(SGLangEngine(server.base_url).health())
    finally:
        server.stop()
    assert server.process.poll() is not None
