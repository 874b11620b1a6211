"""A real OpenAI-compatible HTTP server on loopback that serves the tiny model through ``TransformersEngine``.

``POST /v1/chat/completions`` renders the messages with the model's chat template (honouring vLLM's
``add_generation_prompt`` / ``continue_final_message`` extensions), decodes ``image_url`` data URLs into
frames, runs the processor with the checkpoint's image settings (``checkpoint_images_kwargs``) updated by
the request's ``mm_processor_kwargs`` (as vLLM does) and generates; ``usage.prompt_tokens`` is the processed
prompt's length. ``GET /v1/models`` lists the model. The engine is a ``TransformersEngine`` or any engine
(e.g. a ``ScriptedEngine``: requests with a system message are tagged "main", others "subagent"). Faults
for the client's tests: the first ``fail_first`` completions answer ``fail_status`` (with ``Retry-After:
retry_after`` when set), every completion can be delayed by ``delay_s``, ``finish_reason`` can be forced,
and a configured ``api_key`` is required as a bearer token. ``stop()`` joins every handler thread.

Usage::

    with TinyChatServer(engine) as server:
        OpenAIEngine(server.base_url, "tiny")
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import torch

from paravt_core.engines.base import Engine, GenerationRequest, SamplingParams


def _decode_data_url(url: str) -> torch.Tensor:
    from PIL import Image

    if not url.startswith("data:") or "," not in url:
        raise ValueError("only data: URLs are served by the test server")
    raw = base64.b64decode(url.split(",", 1)[1])
    array = np.asarray(Image.open(io.BytesIO(raw)).convert("RGB"))
    return torch.from_numpy(array.copy()).permute(2, 0, 1).contiguous()


def _to_template_messages(messages: list[dict]) -> tuple[list[dict], list[torch.Tensor]]:
    out, images = [], []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                if part.get("type") == "image_url":
                    frame = _decode_data_url(part["image_url"]["url"])
                    images.append(frame)
                    parts.append({"type": "image", "image": frame})
                else:
                    parts.append({"type": "text", "text": part.get("text", "")})
            content = parts
        out.append({"role": message["role"], "content": content})
    return out, images


class TinyChatServer:
    def __init__(
        self,
        engine: Engine,
        *,
        model_name: str = "tiny",
        api_key: str | None = None,
        fail_first: int = 0,
        fail_status: int = 503,
        retry_after: str | None = None,
        delay_s: float = 0.0,
        finish_reason: str | None = None,
        checkpoint_images_kwargs: dict | None = None,
        honour_mm_processor_kwargs: bool = True,
    ):
        self.engine = engine
        self.model_name = model_name
        self.api_key = api_key
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.retry_after = retry_after
        self.delay_s = delay_s
        self.finish_reason = finish_reason
        self.checkpoint_images_kwargs = dict(checkpoint_images_kwargs or {})
        self.honour_mm_processor_kwargs = honour_mm_processor_kwargs  # False: like SGLang's chat endpoint
        self._stopping = threading.Event()
        self.attempts = 0  # completion requests received (failed ones included)
        self.bodies: list[dict] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = False
        self._httpd.block_on_close = True  # stop() joins the handlers (delayed ones wake on _stopping)
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> TinyChatServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> TinyChatServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- serving ------------------------------------------------------------------------------------------

    def complete(self, body: dict) -> dict:
        processor = self.engine.processor
        messages, images = _to_template_messages(body["messages"])
        cont = bool(body.get("continue_final_message", False))
        text = processor.apply_chat_template(
            messages,
            add_generation_prompt=bool(body.get("add_generation_prompt", not cont)),
            continue_final_message=cont,
            tokenize=False,
        )
        requested = body.get("mm_processor_kwargs") if self.honour_mm_processor_kwargs else None
        images_kwargs = {**self.checkpoint_images_kwargs, **(requested or {})}
        inputs = processor(
            text=[text], images=images or None, return_tensors="pt", images_kwargs=images_kwargs
        )
        sampling = SamplingParams(
            temperature=float(body.get("temperature", 1.0)),
            top_p=float(body.get("top_p", 1.0)),
            max_new_tokens=int(body.get("max_tokens") or 256),
            stop=tuple(body.get("stop") or ()),
            seed=body.get("seed"),
        )
        request = GenerationRequest(
            input_ids=inputs["input_ids"][0].tolist(),
            pixel_values=inputs.get("pixel_values"),
            image_grid_thw=inputs.get("image_grid_thw"),
            sampling=sampling,
            tag="main" if any(m["role"] == "system" for m in messages) else "subagent",
        )
        (completion,) = asyncio.run(self.engine.generate([request]))
        ids = completion.token_ids
        eos = self.engine.processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if completion.finish_reason == "stop" and ids and ids[-1] == eos:
            ids = ids[:-1]
        content = self.engine.tokenizer.decode(ids, skip_special_tokens=True)
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": self.finish_reason or completion.finish_reason,
            "logprobs": None,
        }
        if body.get("logprobs"):
            tokens = self.engine.tokenizer.convert_ids_to_tokens(completion.token_ids)
            choice["logprobs"] = {
                "content": [
                    {"token": t, "logprob": lp, "bytes": None, "top_logprobs": []}
                    for t, lp in zip(tokens, completion.logprobs or [], strict=False)
                ]
            }
        return {
            "id": "chatcmpl-" + uuid.uuid4().hex,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(request.input_ids),
                "completion_tokens": len(completion.token_ids),
                "total_tokens": len(request.input_ids) + len(completion.token_ids),
            },
        }

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                pass

            def _send(self, status: int, payload: dict, headers: dict | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self) -> bool:
                if server.api_key is None:
                    return True
                return self.headers.get("Authorization") == f"Bearer {server.api_key}"

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._send(
                        200, {"object": "list", "data": [{"id": server.model_name, "object": "model"}]}
                    )
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length))
                except ValueError:
                    self._send(400, {"error": {"message": "body is not JSON"}})
                    return
                with server._lock:
                    server.attempts += 1
                    attempt = server.attempts
                    server.bodies.append(body)
                if not self._authorized():
                    self._send(401, {"error": {"message": "invalid api key"}})
                    return
                if body.get("model") != server.model_name:
                    self._send(400, {"error": {"message": f"unknown model {body.get('model')!r}"}})
                    return
                if attempt <= server.fail_first:
                    headers = {"Retry-After": server.retry_after} if server.retry_after else None
                    self._send(server.fail_status, {"error": {"message": "injected failure"}}, headers)
                    return
                if server.delay_s and server._stopping.wait(server.delay_s):
                    return  # stopping: the client gave up long ago
                try:
                    payload = server.complete(body)
                except Exception as err:  # report, do not kill the server thread
                    self._send(500, {"error": {"message": f"{type(err).__name__}: {err}"}})
                    return
                # the client may have given up already (timeout tests)
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self._send(200, payload)

        return Handler
