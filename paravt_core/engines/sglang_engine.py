"""Token-level generation on an SGLang server (GPU), weight updates, and launching the server.

The request contract is SGLang 0.5.23's (``io_struct.GenerateReqInput``, the ``/generate`` JSON schema gate
``entrypoints/api_contract.py``, the Qwen-VL processor in ``multimodal/processors/qwen_vl.py`` and
``base_processor.py``); ``tests/contract/test_engines_sglang.py`` checks our payloads against it. Native ``/generate``
request (the requests of a call go in one batched body)::

    {"input_ids": [[int, ...], ...],                # prompt tokens, ONE <|image_pad|> per image
     "image_data": [[data-url, ...], ...],           # frames of each request, lossless PNG data URLs
     "sampling_params": [{"temperature", "top_p", "max_new_tokens", "stop", "sampling_seed",
                          "skip_special_tokens": false, "no_stop_trim": true}, ...],
     "return_logprob": true, "logprob_start_len": -1, "rid": [str, ...]}

- **Image pads**: the server expands each ``<|vision_start|><|image_pad|><|vision_end|>`` itself from the
  image grid its processor computes, so we send the collapsed form, and check that the server's
  ``meta_info.prompt_tokens`` equals our exact (expanded) count: a mismatch means the server made other
  pixels than the learner sees, and is an ``EngineError`` (counted in ``prompt_token_mismatches``).
- **Pixels**: the server re-processes frames with its image-processor settings; ``launch_command`` passes
  ``--mm-process-config`` with our pixel budget (``base.image_processor_kwargs``), under which our frames,
  already sized on the 32-px grid, come out unchanged.
- **Batches** hold either only requests with images or only text requests: ``image_data`` mixing ``null``
  and lists fails the schema when a ``null`` comes first, so ``generate`` sends the two kinds separately.
- **Retries** (timeouts, connection errors, 5xx) go out under new request ids (the server rejects an id it
  still tracks as "Duplicate request ID"), after a best-effort ``/abort_request`` of a timed-out id, and
  within ``max_total_s`` in all.
- **Seeds**: ``sampling_seed`` only takes effect on a server started with
  ``--enable-deterministic-inference``; without it we do not send seeds and mark completions
  ``seed_applied=False``.

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
"group_name", "backend"}``; it returns only once the trainer has joined the group too, so both sides start
together) once, then per push ``/pause_generation`` -> ``/begin_weight_update`` -> per bucket
``/update_weights_from_distributed`` (``{"names", "dtypes", "shapes", "group_name", "flush_cache",
"weight_version"}``) while the trainer broadcasts the bucket's tensors in that group -> ``/end_weight_update``
-> ``/continue_generation`` (see ``rl.weight_sync.NcclSync``). Every control endpoint answers
``{"success": bool, "message": str}``. A run against a real server needs a GPU; see the GPU checklist in
``tests/contract/test_engines_sglang.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from .base import Completion, Engine, EngineError, GenerationRequest, image_processor_kwargs
from .group_push import join_group, send_bucket
from .openai_engine import frame_to_data_url
from .server_process import ServerProcess

IMAGE_PAD = "<|image_pad|>"


class PromptTokenMismatch(EngineError):
    """The server counted a different prompt length than we sent: it expanded the images differently."""

    def __init__(self, request_id: str, sent: int, counted: int):
        super().__init__(
            f"SGLang counted {counted} prompt tokens for request {request_id}, we have {sent}: the server "
            "made other image tokens than our processor (launch it with --mm-process-config for our pixel "
            "budget, see sglang_engine.mm_process_config)"
        )
        self.sent, self.counted = sent, counted


def mm_process_config(*, max_pixels: int, min_pixels: int) -> dict[str, Any]:
    """SGLang's ``--mm-process-config`` for our pixel budget: its processors pass ``image`` as keyword
    arguments to the image processor, as our encoder does."""
    return {"image": image_processor_kwargs(max_pixels=max_pixels, min_pixels=min_pixels)}


def collapse_image_pads(input_ids: Sequence[int], image_token_id: int) -> list[int]:
    """``input_ids`` with every run of image pads cut to one pad (SGLang expands it again per image)."""
    out: list[int] = []
    for token in input_ids:
        if token == image_token_id and out and out[-1] == image_token_id:
            continue
        out.append(token)
    return out


def sampling_payload(request: GenerationRequest, *, seeds: bool = True) -> dict[str, Any]:
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
    if seeds and s.seed is not None:
        params["sampling_seed"] = s.seed
    return params


def generate_payload(
    requests: Sequence[GenerationRequest],
    *,
    image_token_id: int | None = None,
    rids: Sequence[str] | None = None,
    seeds: bool = True,
    single: bool = False,
) -> dict[str, Any]:
    """One batched ``/generate`` body (pure function). The requests all carry images or all carry none;
    ``rids`` default to the requests' ids (retries pass new ones). ``single``: exactly one request in SGLang's
    un-batched form (``input_ids`` a list of ints, ``sampling_params`` an object, ``rid`` a string,
    ``image_data`` that request's list), the only form ``sglang-router`` 0.3.2 forwards: its ``/generate``
    type holds one ``sampling_params`` object and answers 422 to a batch's list."""
    if not requests:
        raise ValueError("no requests")
    with_images = [bool(r.images) for r in requests]
    if any(with_images) and not all(with_images):
        raise ValueError("a /generate body holds either only image requests or only text requests")
    input_ids = []
    for r in requests:
        if not r.input_ids:
            raise EngineError(f"request {r.request_id} has no input_ids (SGLangEngine needs tokens)")
        ids = list(r.input_ids)
        if r.images:
            if image_token_id is None:
                raise EngineError("image requests need the processor's image token (pass processor=)")
            ids = collapse_image_pads(ids, image_token_id)
            pads = ids.count(image_token_id)
            if pads != len(r.images):
                raise EngineError(
                    f"request {r.request_id}: {pads} image placeholders for {len(r.images)} images"
                )
        input_ids.append(ids)
    body: dict[str, Any] = {
        "input_ids": input_ids,
        "sampling_params": [sampling_payload(r, seeds=seeds) for r in requests],
        "return_logprob": True,
        "logprob_start_len": -1,  # log-probs of the generated tokens only
        "rid": list(rids) if rids is not None else [r.request_id for r in requests],
    }
    if all(with_images):
        body["image_data"] = [[frame_to_data_url(f) for f in r.images] for r in requests]
    if single:
        if len(requests) != 1:
            raise ValueError(f"a single-request body holds one request, not {len(requests)}")
        body = {
            k: v[0] if k in ("input_ids", "sampling_params", "rid", "image_data") else v
            for k, v in body.items()
        }
    return body


def parse_generate_response(
    data: Any, requests: Sequence[GenerationRequest], tokenizer: Any = None
) -> list[Completion]:
    """Completions from a ``/generate`` response (a list for a batch, an object for one request). Raises
    ``PromptTokenMismatch`` when the server's prompt length differs from the request's exact count."""
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
            prompt_tokens = int(meta["prompt_tokens"])
        except (KeyError, IndexError, TypeError, ValueError) as err:
            raise EngineError(f"malformed SGLang output ({type(err).__name__}: {err})") from err
        if kind == "abort":
            raise EngineError(f"SGLang aborted request {request.request_id}: {finish.get('message', '')}")
        if kind not in ("stop", "length"):
            raise EngineError(f"unknown SGLang finish reason {finish!r}")
        if prompt_tokens != len(request.input_ids):
            raise PromptTokenMismatch(request.request_id, len(request.input_ids), prompt_tokens)
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
                finish_reason=kind,
                stop_reason=finish.get("matched") if isinstance(finish, dict) else None,
                prompt_tokens=prompt_tokens,
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
    dp_size: int = 1,
    base_gpu_id: int | None = None,
    max_pixels: int | None = None,
    min_pixels: int | None = None,
    deterministic_inference: bool = False,
    dtype: str | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """``python -m sglang.launch_server ...`` for one server (pure function). ``max_pixels`` /
    ``min_pixels``: our frame budget, so the server's image processor leaves our frames as they are;
    ``deterministic_inference``: needed for ``sampling_seed`` to take effect; ``dtype``: the served weights'
    dtype (``--dtype``; None: SGLang's ``auto``, which serves a float32 checkpoint as float16)."""
    cmd = [
        sys.executable, "-m", "sglang.launch_server",
        "--model-path", model_path,
        "--host", host,
        "--port", str(port),
        "--context-length", str(context_length),
        "--tp-size", str(tp_size),
    ]  # fmt: skip
    if dp_size != 1:  # data-parallel replicas behind the server's own router (disk weight push only)
        cmd += ["--dp-size", str(dp_size)]
    if base_gpu_id is not None:  # the first of the GPUs this server may use (its TP ranks count up from it)
        cmd += ["--base-gpu-id", str(base_gpu_id)]
    if mem_fraction_static is not None:
        cmd += ["--mem-fraction-static", str(mem_fraction_static)]
    if (max_pixels is None) != (min_pixels is None):
        raise ValueError("pass both max_pixels and min_pixels (or neither)")
    if max_pixels is not None and min_pixels is not None:
        config = mm_process_config(max_pixels=max_pixels, min_pixels=min_pixels)
        cmd += ["--mm-process-config", json.dumps(config, separators=(",", ":"))]
    if deterministic_inference:
        cmd.append("--enable-deterministic-inference")
    if dtype is not None:
        cmd += ["--dtype", dtype]
    return cmd + list(extra_args)


class SGLangServer(ServerProcess):
    """An SGLang server this program started (GPU machines, ``launch_command``)."""

    label = "SGLang server"

    @classmethod
    def for_model(
        cls, model_path: str, *, host: str = "127.0.0.1", port: int = 30000, **kwargs: Any
    ) -> SGLangServer:
        log_path = kwargs.pop("log_path", None)
        env = kwargs.pop("env", None)  # e.g. CUDA_VISIBLE_DEVICES pinning it (rl/stage.py:server_placement)
        return cls(
            launch_command(model_path, host=host, port=port, **kwargs),
            f"http://{host}:{port}",
            log_path=log_path,
            env=env,
        )


class SGLangEngine(Engine):
    name = "sglang"
    server_label = "SGLang server"  # what messages call its server
    token_level = True

    def __init__(
        self,
        base_url: str,
        *,
        processor: Any = None,
        timeout_s: float = 3600.0,
        max_retries: int = 2,
        backoff_s: float = 1.0,
        max_total_s: float | None = None,
        max_batch_size: int = 64,
        deterministic_inference: bool = False,
        one_request_per_body: bool = False,
        routing_header: str | None = None,
        control_timeout_s: float = 120.0,
    ):
        """``control_timeout_s``: one weight-update control call (pause, begin, a bucket, end, continue,
        destroy; not a load from disk), so a wedged server is noticed in minutes, not ``timeout_s``.
        ``deterministic_inference``: the server runs with ``--enable-deterministic-inference`` (only then
        are seeds sent). ``max_total_s`` bounds one call with its retries (default: ``timeout_s`` per
        attempt). ``one_request_per_body``: every request in its own un-batched body (behind a router);
        ``routing_header``: the header that carries a request's ``routing_key`` (a router's sticky key)."""
        self.base_url = base_url.rstrip("/")
        self.processor = processor
        self.tokenizer = getattr(processor, "tokenizer", None)
        self.image_token_id: int | None = (
            self.tokenizer.convert_tokens_to_ids(IMAGE_PAD) if self.tokenizer is not None else None
        )
        self.timeout_s, self.control_timeout_s = timeout_s, control_timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_total_s = max_total_s if max_total_s is not None else timeout_s * (max_retries + 1)
        self.max_batch_size = max_batch_size
        self.deterministic_inference = deterministic_inference
        self.one_request_per_body, self.routing_header = one_request_per_body, routing_header
        self.weight_version: str | None = None
        self.server: SGLangServer | None = None  # set by launch(): the process this engine owns
        # One client per event loop: with bounded staleness the rollout thread's loop generates while the
        # learner's loop pushes weights, and an httpx client must stay on the loop that made it.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )
        self._clients_lock = threading.Lock()
        self.http_calls: list[str] = []  # paths called, for logs and tests
        self.prompt_token_mismatches = 0  # responses whose prompt length differed from ours
        self.retried_posts = 0  # POSTs sent again after a timeout, connection error or 5xx

    @classmethod
    def launch(
        cls,
        model_path: str,
        *,
        port: int = 30000,
        processor: Any = None,
        max_pixels: int | None = None,
        min_pixels: int | None = None,
        deterministic_inference: bool = False,
        start_timeout_s: float = 900.0,
        **server_kwargs: Any,
    ) -> SGLangEngine:
        """Start ``python -m sglang.launch_server`` for ``model_path`` (GPU machine) and connect to it;
        ``engine.server.stop()`` ends it. Pass the agent's pixel budget so the server makes our pixels."""
        server = SGLangServer.for_model(
            model_path,
            port=port,
            max_pixels=max_pixels,
            min_pixels=min_pixels,
            deterministic_inference=deterministic_inference,
            **server_kwargs,
        ).start(timeout_s=start_timeout_s)
        engine = cls(server.base_url, processor=processor, deterministic_inference=deterministic_inference)
        engine.server = server
        return engine

    def _http(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        with self._clients_lock:
            client = self._clients.get(loop)
            if client is None:
                client = self._clients[loop] = httpx.AsyncClient(timeout=self.timeout_s)
        return client

    async def aclose(self) -> None:
        """Close the running loop's client; other loops' clients (other threads) stay open."""
        with self._clients_lock:
            client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    async def _post(
        self,
        path: str,
        make_body: Callable[[int], dict[str, Any]],
        *,
        retry: bool = True,
        timeout_s: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """POST ``make_body(attempt)``; timeouts, connection errors and 5xx are retried (with a new body,
        hence new request ids) with exponential backoff, all within ``max_total_s``."""
        url = self.base_url + path
        started = time.monotonic()
        deadline = started + self.max_total_s
        last = "no attempt made"
        attempts = self.max_retries + 1 if retry else 1
        made = 0
        for attempt in range(attempts):
            if attempt:
                self.retried_posts += 1
                await asyncio.sleep(
                    min(self.backoff_s * 2 ** (attempt - 1), max(0.0, deadline - time.monotonic()))
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                last += f"; no time left of max_total_s={self.max_total_s:g}"
                break
            body = make_body(attempt)
            self.http_calls.append(path)
            made += 1
            limit = min(timeout_s if timeout_s is not None else self.timeout_s, remaining)
            try:
                response = await self._http().post(url, json=body, timeout=limit, headers=headers)
            except httpx.TimeoutException:
                last = f"timed out after {limit:g} s"
                await self._abort(body.get("rid"))
                continue
            except httpx.HTTPError as err:
                last = f"{type(err).__name__}: {err}"
                continue
            if response.status_code == 200:
                return response.json()
            last = f"HTTP {response.status_code}: {response.text[:300]}"
            if response.status_code < 500:
                break
        raise EngineError(f"{url}: {last} (after {made} attempt(s), {time.monotonic() - started:.1f} s)")

    async def _abort(self, rids: Any) -> None:
        """Best effort: ask the server to drop requests we gave up waiting for (frees their KV cache)."""
        for rid in rids if isinstance(rids, list) else [rids] if rids else []:
            self.http_calls.append("/abort_request")
            with contextlib.suppress(httpx.HTTPError):
                await self._http().post(self.base_url + "/abort_request", json={"rid": rid}, timeout=5.0)

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        # image and text-only requests go in separate bodies (see the module docstring), each in chunks
        groups = [
            [i for i, r in enumerate(requests) if r.images],
            [i for i, r in enumerate(requests) if not r.images],
        ]
        size = 1 if self.one_request_per_body else self.max_batch_size
        chunks = [g[lo : lo + size] for g in groups for lo in range(0, len(g), size)]
        results = await asyncio.gather(*(self._generate_chunk([requests[i] for i in c]) for c in chunks))
        out: list[Completion | None] = [None] * len(requests)
        for chunk, completions in zip(chunks, results, strict=True):
            for i, completion in zip(chunk, completions, strict=True):
                out[i] = completion
        return out  # type: ignore[return-value]

    async def _generate_chunk(self, chunk: list[GenerationRequest]) -> list[Completion]:
        def body(attempt: int) -> dict[str, Any]:
            rids = [
                r.request_id if attempt == 0 else f"{r.request_id}-retry{attempt}-{uuid.uuid4().hex[:8]}"
                for r in chunk
            ]
            return generate_payload(
                chunk,
                image_token_id=self.image_token_id,
                rids=rids,
                seeds=self.deterministic_inference,
                single=self.one_request_per_body,
            )

        key = chunk[0].routing_key if len(chunk) == 1 else None
        headers = {self.routing_header: key} if self.routing_header and key else None
        data = await self._post("/generate", body, headers=headers)
        try:
            completions = parse_generate_response(data, chunk, self.tokenizer)
        except PromptTokenMismatch:
            self.prompt_token_mismatches += 1
            raise
        for request, completion in zip(chunk, completions, strict=True):
            if request.sampling.seed is not None:
                completion.seed_applied = self.deterministic_inference
        return completions

    async def _control(
        self, path: str, body: dict[str, Any], *, timeout_s: float | None = None
    ) -> dict[str, Any]:
        limit = timeout_s if timeout_s is not None else self.control_timeout_s
        data = await self._post(path, lambda _: body, retry=False, timeout_s=limit)  # never resent
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
        data = await self._control(
            "/update_weights_from_disk", body, timeout_s=self.timeout_s
        )  # a whole load
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
        trainer_join: Callable[[], Any] | None = None,
        timeout_s: float = 300.0,
    ) -> dict[str, Any]:
        """Create the trainer->server weight-update group. The server's call returns only once every rank
        has joined, so the trainer's side (``trainer_join``: e.g. its process-group init as rank 0, run in
        a thread) starts at the same time; both must finish within ``timeout_s`` or this raises
        ``EngineError`` saying which side did not join (give ``trainer_join`` its own timeout too: a
        thread cannot be cancelled)."""
        body = {
            "master_address": master_address,
            "master_port": master_port,
            "rank_offset": rank_offset,
            "world_size": world_size,
            "group_name": group_name,
            "backend": backend,
        }
        return await join_group(
            self._control("/init_weights_update_group", body, timeout_s=timeout_s),
            trainer_join,
            group_name=group_name,
            where=f"{master_address}:{master_port}",
            timeout_s=timeout_s,
        )

    async def destroy_weights_update_group(self, group_name: str) -> dict[str, Any]:
        """The server leaves (and destroys) the weight-update group ``group_name``."""
        return await self._control("/destroy_weights_update_group", {"group_name": group_name})

    async def update_weights_from_distributed(
        self,
        named_tensors: Sequence[tuple[str, Any]],
        broadcast: Any = None,
        *,
        group_name: str = "weight_update_group",
        weight_version: str | None = None,
        flush_cache: bool = True,
    ) -> dict[str, Any]:
        """Announce the tensors (one bucket), then let ``broadcast(tensor)`` send each one in that order (rank 0
        of the group) while the server receives; the request completes when every tensor has arrived. Must run
        inside ``begin_weight_update`` / ``end_weight_update``. A refusal that comes before the broadcasts
        finish raises at once (the server will not receive them)."""
        body: dict[str, Any] = {
            "names": [n for n, _ in named_tensors],
            "dtypes": [str(t.dtype).removeprefix("torch.") for _, t in named_tensors],
            "shapes": [list(t.shape) for _, t in named_tensors],
            "group_name": group_name,
            "flush_cache": flush_cache,
        }
        if weight_version is not None:
            body["weight_version"] = weight_version
        data = await send_bucket(
            self._control("/update_weights_from_distributed", body), named_tensors, broadcast
        )
        if weight_version is not None:
            self.weight_version = weight_version
        return data

    async def begin_weight_update(self) -> dict[str, Any]:
        """Open SGLang's weight-update session (required around ``update_weights_from_distributed``)."""
        return await self._control("/begin_weight_update", {})

    async def end_weight_update(self) -> dict[str, Any]:
        return await self._control("/end_weight_update", {})

    async def pause_generation(self, mode: str = "retract") -> None:
        """``retract``: running requests go back to the queue (their KV cache is recomputed after
        ``continue_generation``), so a weight update runs at once; ``abort``: they end with finish reason
        abort; ``in_place``: they keep their cache (the cache flush then fails while any runs)."""
        await self._post(
            "/pause_generation", lambda _: {"mode": mode}, retry=False, timeout_s=self.control_timeout_s
        )

    async def continue_generation(self) -> None:
        await self._post("/continue_generation", lambda _: {}, retry=False, timeout_s=self.control_timeout_s)

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
