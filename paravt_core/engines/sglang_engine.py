"""Token-level generation on an SGLang server (GPU), weight updates, and launching the server.

Native ``/generate`` request (SGLang ``GenerateReqInput``; all requests of a call go in one batched body)::

    {"input_ids": [[int, ...], ...],                # prompt tokens, image pads already expanded
     "image_data": [[data-url, ...] | None, ...],    # frames of each request, lossless PNG data URLs
     "sampling_params": [{"temperature", "top_p", "max_new_tokens", "stop", "sampling_seed",
                          "skip_special_tokens": false, "no_stop_trim": true}, ...],
     "return_logprob": true, "logprob_start_len": -1, "rid": [str, ...]}

Response: one object per request (a list for a batch)::

    {"text": str, "output_ids": [int, ...],
     "meta_info": {"id": str, "finish_reason": {"type": "stop", "matched": int | str} | {"type": "length",
                   "length": int} | {"type": "abort", "message": str},
                   "prompt_tokens": int, "completion_tokens": int,
                   "output_token_logprobs": [[logprob, token_id, text | null], ...], "e2e_latency": float}}

Token ids and log-probs come from ``output_token_logprobs`` (one entry per generated token, the stop token
included), so the episode appends exactly what was sampled. Weight updates: ``/update_weights_from_disk``
(``{"model_path", "load_format", "flush_cache", "weight_version"}``) after each checkpoint, or the NCCL path
``/init_weights_update_group`` (``{"master_address", "master_port", "rank_offset", "world_size",
"group_name", "backend"}``) once, then ``/update_weights_from_distributed`` (``{"names", "dtypes", "shapes",
"group_name", "flush_cache"}``) while the trainer broadcasts the tensors in that group. Every control
endpoint answers ``{"success": bool, "message": str}``.

Shapes follow SGLang's documentation and ``io_struct.py`` (v0.5.x). A run against a real server needs a GPU;
see the GPU checklist in ``tests/test_engines_sglang.py``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import httpx

from .base import Completion, Engine, EngineError, GenerationRequest
from .openai_engine import frame_to_data_url


def sampling_payload(request: GenerationRequest) -> dict[str, Any]:
    s = request.sampling
    params: dict[str, Any] = {
        "temperature": s.temperature,
        "top_p": s.top_p,
        "max_new_tokens": s.max_new_tokens,
        # keep tags and stop strings in the text: token accounting is exact
        "skip_special_tokens": False,
        "no_stop_trim": True,
    }
    if s.stop:
        params["stop"] = list(s.stop)
    if s.seed is not None:
        params["sampling_seed"] = s.seed
    return params


def generate_payload(requests: Sequence[GenerationRequest]) -> dict[str, Any]:
    """One batched ``/generate`` body for ``requests`` (pure function)."""
    if not requests:
        raise ValueError("no requests")
    for r in requests:
        if not r.input_ids:
            raise EngineError(f"request {r.request_id} has no input_ids (SGLangEngine needs tokens)")
    body: dict[str, Any] = {
        "input_ids": [list(r.input_ids) for r in requests],
        "sampling_params": [sampling_payload(r) for r in requests],
        "return_logprob": True,
        "logprob_start_len": -1,  # log-probs of the generated tokens only
        "rid": [r.request_id for r in requests],
    }
    if any(r.images for r in requests):
        body["image_data"] = [
            [frame_to_data_url(f) for f in r.images] if r.images else None for r in requests
        ]
    return body


def parse_generate_response(
    data: Any, requests: Sequence[GenerationRequest], tokenizer: Any = None
) -> list[Completion]:
    """Completions from a ``/generate`` response (a list for a batch, an object for one request)."""
    items = data if isinstance(data, list) else [data]
    if len(items) != len(requests):
        raise EngineError(f"SGLang returned {len(items)} outputs for {len(requests)} requests")
    out = []
    for item, request in zip(items, requests, strict=True):
        try:
            meta = item["meta_info"]
            finish = meta.get("finish_reason") or {}
            kind = finish.get("type") if isinstance(finish, dict) else str(finish)
            entries = meta.get("output_token_logprobs")
            if entries is None:
                raise EngineError("response has no output_token_logprobs (was return_logprob sent?)")
            ids = [int(e[1]) for e in entries]
            logprobs = [float(e[0]) if e[0] is not None else 0.0 for e in entries]
        except (KeyError, IndexError, TypeError, ValueError) as err:
            raise EngineError(f"malformed SGLang output ({type(err).__name__}: {err})") from err
        if kind == "abort":
            raise EngineError(f"SGLang aborted request {request.request_id}: {finish.get('message', '')}")
        if kind not in ("stop", "length"):
            raise EngineError(f"unknown SGLang finish reason {finish!r}")
        text = (
            tokenizer.decode(ids, skip_special_tokens=False)
            if tokenizer is not None
            else item.get("text", "")
        )
        out.append(
            Completion(
                token_ids=ids,
                text=text,
                logprobs=logprobs,
                finish_reason=kind,  # type: ignore[arg-type]
                stop_reason=finish.get("matched") if isinstance(finish, dict) else None,
                prompt_tokens=int(meta.get("prompt_tokens") or len(request.input_ids)),
                latency_s=float(meta.get("e2e_latency") or 0.0),
                request_id=request.request_id,
            )
        )
    return out


def launch_command(
    model_path: str,
    *,
    host: str = "127.0.0.1",
    port: int = 30000,
    context_length: int = 32768,
    mem_fraction_static: float | None = None,
    tp_size: int = 1,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """``python -m sglang.launch_server ...`` for one server (pure function)."""
    cmd = [
        sys.executable, "-m", "sglang.launch_server",
        "--model-path", model_path,
        "--host", host,
        "--port", str(port),
        "--context-length", str(context_length),
        "--tp-size", str(tp_size),
    ]  # fmt: skip
    if mem_fraction_static is not None:
        cmd += ["--mem-fraction-static", str(mem_fraction_static)]
    return cmd + list(extra_args)


class SGLangServer:
    """A server process this program started (GPU machines). ``stop`` ends exactly that process group."""

    def __init__(self, command: list[str], base_url: str, *, log_path: str | None = None):
        self.command, self.base_url, self.log_path = command, base_url, log_path
        self.process: subprocess.Popen | None = None
        self._log: Any = None

    @classmethod
    def for_model(
        cls, model_path: str, *, host: str = "127.0.0.1", port: int = 30000, **kwargs: Any
    ) -> SGLangServer:
        log_path = kwargs.pop("log_path", None)
        return cls(
            launch_command(model_path, host=host, port=port, **kwargs),
            f"http://{host}:{port}",
            log_path=log_path,
        )

    def start(self, *, timeout_s: float = 900.0, poll_s: float = 2.0) -> SGLangServer:
        self._log = open(self.log_path, "ab") if self.log_path else None  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            self.command,
            stdout=self._log or subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so stop() ends the workers it spawns too
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._close_log()
                raise EngineError(
                    f"SGLang server exited with code {self.process.returncode}: {' '.join(self.command)}"
                )
            try:
                if httpx.get(self.base_url + "/health", timeout=5.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(poll_s)
        self.stop()
        raise EngineError(f"SGLang server not healthy after {timeout_s:g} s")

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)  # the group we created: the server and its workers
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


class SGLangEngine(Engine):
    name = "sglang"
    token_level = True

    def __init__(
        self,
        base_url: str,
        *,
        processor: Any = None,
        timeout_s: float = 3600.0,
        max_retries: int = 2,
        backoff_s: float = 1.0,
        max_batch_size: int = 64,
    ):
        self.base_url = base_url.rstrip("/")
        self.processor = processor
        self.tokenizer = getattr(processor, "tokenizer", None)
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_batch_size = max_batch_size
        self.weight_version: str | None = None
        self.server: SGLangServer | None = None  # set by launch(): the process this engine owns
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: httpx.AsyncClient | None = None
        self.http_calls: list[str] = []  # paths called, for logs and tests

    @classmethod
    def launch(
        cls,
        model_path: str,
        *,
        port: int = 30000,
        processor: Any = None,
        start_timeout_s: float = 900.0,
        **server_kwargs: Any,
    ) -> SGLangEngine:
        """Start ``python -m sglang.launch_server`` for ``model_path`` (GPU machine) and connect to it;
        ``engine.server.stop()`` ends it."""
        server = SGLangServer.for_model(model_path, port=port, **server_kwargs).start(
            timeout_s=start_timeout_s
        )
        engine = cls(server.base_url, processor=processor)
        engine.server = server
        return engine

    def _http(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = httpx.AsyncClient(timeout=self.timeout_s)
            self._loop = loop
        return self._client

    async def aclose(self) -> None:
        if self._client is not None and self._loop is asyncio.get_running_loop():
            await self._client.aclose()
        self._client = None

    async def _post(self, path: str, body: dict[str, Any], *, retry: bool = True) -> Any:
        url = self.base_url + path
        last = ""
        attempts = self.max_retries + 1 if retry else 1
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            self.http_calls.append(path)
            try:
                response = await self._http().post(url, json=body)
            except httpx.TimeoutException:
                last = f"timed out after {self.timeout_s:g} s"
                continue
            except httpx.HTTPError as err:
                last = f"{type(err).__name__}: {err}"
                continue
            if response.status_code == 200:
                return response.json()
            last = f"HTTP {response.status_code}: {response.text[:300]}"
            if response.status_code < 500:
                break
        raise EngineError(f"{url}: {last}")

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        out: list[Completion] = []
        for lo in range(0, len(requests), self.max_batch_size):
            chunk = list(requests[lo : lo + self.max_batch_size])
            data = await self._post("/generate", generate_payload(chunk))
            out += parse_generate_response(data, chunk, self.tokenizer)
        return out

    async def _control(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        data = await self._post(path, body, retry=False)  # not idempotent: never resend
        if not isinstance(data, dict) or not data.get("success", False):
            message = data.get("message") if isinstance(data, dict) else data
            raise EngineError(f"{path} failed: {message}")
        return data

    async def update_weights_from_disk(
        self, model_path: str, *, load_format: str | None = None, weight_version: str | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model_path": model_path, "flush_cache": True}
        if load_format is not None:
            body["load_format"] = load_format
        if weight_version is not None:
            body["weight_version"] = weight_version
        data = await self._control("/update_weights_from_disk", body)
        self.weight_version = weight_version
        return data

    async def init_weights_update_group(
        self,
        master_address: str,
        master_port: int,
        *,
        rank_offset: int,
        world_size: int,
        group_name: str = "weight_update_group",
        backend: str = "nccl",
    ) -> dict[str, Any]:
        body = {
            "master_address": master_address,
            "master_port": master_port,
            "rank_offset": rank_offset,
            "world_size": world_size,
            "group_name": group_name,
            "backend": backend,
        }
        return await self._control("/init_weights_update_group", body)

    async def update_weights_from_distributed(
        self,
        named_tensors: Sequence[tuple[str, Any]],
        broadcast: Any = None,
        *,
        group_name: str = "weight_update_group",
        weight_version: str | None = None,
    ) -> dict[str, Any]:
        """Announce the tensors, then let ``broadcast(tensor)`` send each one (rank 0 of the group) while
        the server receives; the request completes when every tensor has arrived."""
        body: dict[str, Any] = {
            "names": [n for n, _ in named_tensors],
            "dtypes": [str(t.dtype).removeprefix("torch.") for _, t in named_tensors],
            "shapes": [list(t.shape) for _, t in named_tensors],
            "group_name": group_name,
            "flush_cache": True,
        }
        if weight_version is not None:
            body["weight_version"] = weight_version
        task = asyncio.create_task(self._control("/update_weights_from_distributed", body))
        if broadcast is not None:
            for _, tensor in named_tensors:
                await asyncio.to_thread(broadcast, tensor)
        data = await task
        self.weight_version = weight_version
        return data

    async def flush_cache(self) -> None:
        self.http_calls.append("/flush_cache")
        response = await self._http().post(self.base_url + "/flush_cache")
        if response.status_code != 200:
            raise EngineError(f"/flush_cache: HTTP {response.status_code}")

    async def health(self) -> bool:
        try:
            response = await self._http().get(self.base_url + "/health")
        except httpx.HTTPError:
            return False
        return response.status_code == 200
