"""Chat completions against any OpenAI-compatible server (vLLM, SGLang, a hosted judge), with retries.

Requests of one ``generate`` call are sent concurrently (bounded by ``max_concurrency``). Each HTTP call
has a timeout; connection errors, timeouts, 429 and 5xx responses are retried with exponential backoff and
jitter up to ``max_retries`` times (a ``Retry-After`` on 429/503 is honoured, up to ``max_retry_after_s``);
other 4xx responses fail at once as :class:`EngineRefused`, which nothing retries (the eval runner records
``engine_refused``); a refusal of ``mm_processor_kwargs`` names the server flag that allows them. Errors never
include the API key.

Frames travel as lossless PNG data URLs together with ``mm_processor_kwargs`` (the image-processor settings
our encoder used, which vLLM passes to the HF processor), so the server makes the same pixels and image
tokens as the local processor. Frames of the release's frame path (``agent.frame_path=qwen-vl-utils``) travel
as the JPEG-85 bytes their pixels were decoded from, as the release sends them (2-8x smaller than the same
pixels as PNG), without ``mm_processor_kwargs``. SGLang's OpenAI endpoint (0.5.23) ignores that field: launch it with
``--mm-process-config`` (``sglang_engine.mm_process_config``) instead. The server's ``usage.prompt_tokens`` is compared with our exact count:
a mismatch is logged and counted (``prompt_token_mismatches``) and the episode budgets its context with the
larger number. A request whose last message is a partial assistant turn (the forced ``<think>\\n``) is
sent with the ``continue_final_message`` / ``add_generation_prompt`` extensions that vLLM and SGLang
understand. ``finish_reason`` is kept as the server says it (``abort``, ``content_filter``, ``tool_calls``
are not ``stop``). The server returns text, so completions carry ``exact_tokens=False``: the episode
re-tokenizes them, and these engines are meant for evaluation and judging, not for RL training tokens.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import io
import logging
import math
import os
import random
import time
from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np

from .base import Completion, Engine, EngineError, EngineRefused, GenerationRequest, SamplingParams

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
RETRY_AFTER_STATUS = {429, 503}

log = logging.getLogger(__name__)


def refusal_hint(body: str) -> str:
    """What to change on the server for a refusal we know (empty for the others)."""
    if "mm_processor_kwargs" in body:  # vLLM >= 0.32's validate_request_mm_kwargs
        return (": the requests carry the pixel budget as mm_processor_kwargs; launch vLLM with "
                "--trust-request-mm-kwargs")  # fmt: skip
    if "--allowed-local-media-path" in body:  # vLLM's MediaConnector._load_file_url: a file:// video_url
        return (": the requests send the video as a file:// URL; launch vLLM with --allowed-local-media-path "
                "over the videos (engine.allowed_media_path when the stage launches it)")  # fmt: skip
    return ""


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date); None if absent/bad."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value).timestamp()
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when - (time.time() if now is None else now)
    return max(0.0, seconds) if math.isfinite(seconds) else None


def frame_to_data_url(frame: Any) -> str:
    """Data URL of a uint8 frame (C x H x W tensor, H x W x C array or PIL image): the JPEG bytes the frame was
    decoded from where it has them (the release's frame path, ``release_frames.encoded_jpeg``: the server decodes
    the very pixels we hold, from the bytes the release sends), else lossless PNG of its pixels."""
    jpeg = _encoded_jpeg(frame)
    if jpeg is not None:
        return _data_url("image/jpeg", jpeg)
    return _data_url("image/png", _png(frame))


def _data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64," + base64.b64encode(data).decode()


def _encoded_jpeg(frame: Any) -> bytes | None:
    """The frame's own JPEG bytes (a frame of ``release_frames.jpeg_round_trip``), None for any other frame."""
    if not hasattr(frame, "_base"):  # not a torch tensor: no JPEG kept with it
        return None
    from paravt_core.video.release_frames import encoded_jpeg  # lazily: text-only clients need no video stack

    return encoded_jpeg(frame)


def _png(frame: Any) -> bytes:
    from PIL import Image

    if isinstance(frame, Image.Image):
        image = frame
    else:
        array = frame.numpy() if hasattr(frame, "numpy") else np.asarray(frame)
        if array.ndim == 3 and array.shape[0] in (1, 3) and array.shape[-1] not in (1, 3):
            array = np.transpose(array, (1, 2, 0))
        image = Image.fromarray(np.ascontiguousarray(array.astype(np.uint8)))
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def to_openai_messages(messages: Sequence[dict]) -> list[dict]:
    """Our messages (``image`` parts holding frames, ``tool`` turns) -> OpenAI chat messages.

    ``tool`` messages become user turns of ``<tool_response>`` text blocks, as the Qwen template renders
    them (ParaVT's calls are plain text, so there are no OpenAI ``tool_call_id`` s to refer to)."""
    out: list[dict] = []
    for message in messages:
        role, content = message["role"], message["content"]
        if isinstance(content, str):
            parts: list[dict] = [{"type": "text", "text": content}]
        else:
            parts = []
            for part in content:
                if part["type"] == "text":
                    parts.append({"type": "text", "text": part["text"]})
                elif part["type"] == "image":
                    parts.append(
                        {"type": "image_url", "image_url": {"url": frame_to_data_url(part["image"])}}
                    )
                elif part["type"] in ("image_url", "video_url"):  # already on the wire's form
                    parts.append(part)
                else:
                    raise ValueError(f"unsupported message part {part['type']!r}")
        if role == "tool":
            parts = [
                {"type": "text", "text": "<tool_response>\n"},
                *parts,
                {"type": "text", "text": "\n</tool_response>"},
            ]
            if out and out[-1].get("_tool_turn"):
                out[-1]["content"] += [{"type": "text", "text": "\n"}, *parts]
                continue
            out.append({"role": "user", "content": parts, "_tool_turn": True})
            continue
        if role == "assistant" and all(p["type"] == "text" for p in parts):
            out.append({"role": role, "content": "".join(p["text"] for p in parts)})
        else:
            out.append({"role": role, "content": parts})
    for message in out:
        message.pop("_tool_turn", None)
    return out


def _has_images(messages: Sequence[dict] | None) -> bool:
    return any(
        isinstance(m.get("content"), list)
        and any(p.get("type") in ("image", "image_url") for p in m["content"])
        for m in messages or []
    )


class OpenAIEngine(Engine):
    name = "openai"
    token_level = False

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 600.0,
        max_retries: int = 3,
        backoff_s: float = 1.0,
        max_concurrency: int = 16,
        max_retry_after_s: float = 120.0,
        processor: Any = None,
        extra_body: dict[str, Any] | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._api_key = api_key if api_key is not None else os.environ.get(api_key_env, "")
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.processor = processor
        self.extra_body = dict(extra_body or {})
        self.max_concurrency = max_concurrency
        # Client and semaphore belong to one event loop; they are rebuilt when used from another one.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._client: httpx.AsyncClient | None = None
        self.max_retry_after_s = max_retry_after_s
        self.attempts = 0  # HTTP calls made (retries included), for logs and tests
        self.waits: list[float] = []  # seconds slept before each retry, for logs and tests
        self.prompt_token_mismatches = 0  # completions whose usage.prompt_tokens differed from our count
        # vLLM returns the prompt's token ids when asked (``extra_body={"return_token_ids": True}``): compared
        # id by id with ours, the check that the server saw the pixels and template we think we send
        self.prompt_ids_checked = 0
        self.prompt_id_mismatches = 0

    def _bind(self) -> tuple[httpx.AsyncClient, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._client is None or self._semaphore is None:
            headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
            self._client = httpx.AsyncClient(timeout=self.timeout_s, headers=headers)
            self._semaphore = asyncio.Semaphore(self.max_concurrency)
            self._loop = loop
        return self._client, self._semaphore

    def _redact(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text

    async def aclose(self) -> None:
        if self._client is not None and self._loop is asyncio.get_running_loop():
            await self._client.aclose()
        self._client = None

    def payload(self, request: GenerationRequest) -> dict[str, Any]:
        """The chat-completions body of one request (pure; also used by tests)."""
        if request.messages is None:
            raise EngineError(f"request {request.request_id} has no messages (chat engines need them)")
        s: SamplingParams = request.sampling
        body: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(request.messages),
            "max_tokens": s.max_new_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
        }
        if s.stop:
            body["stop"] = list(s.stop)
        if s.seed is not None:
            body["seed"] = s.seed
        if request.continue_final_message:
            body["continue_final_message"] = True
            body["add_generation_prompt"] = False
        if request.images_kwargs and _has_images(request.messages):
            body["mm_processor_kwargs"] = request.images_kwargs
        body.update(self.extra_body)
        return body

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        return list(await asyncio.gather(*(self._one(r) for r in requests)))

    async def chat(self, messages: list[dict], **sampling: Any) -> str:
        """Text of one chat completion (the LLM judge's entry point)."""
        request = GenerationRequest(messages=messages, sampling=SamplingParams(**sampling))
        return (await self._one(request)).text

    async def _one(self, request: GenerationRequest) -> Completion:
        body = self.payload(request)
        _, semaphore = self._bind()
        async with semaphore:
            started = time.perf_counter()
            data = await self._post("/chat/completions", body)
        try:
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
            reason = str(choice.get("finish_reason") or "unknown")
            logprobs = None
            content_lp = (choice.get("logprobs") or {}).get("content")
            if content_lp:
                logprobs = [float(item["logprob"]) for item in content_lp]
            usage = data.get("usage") or {}
        except (KeyError, IndexError, TypeError, ValueError) as err:
            raise EngineError(
                f"{self.base_url}: malformed chat completion ({type(err).__name__}: {err})"
            ) from err
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
        self._check_prompt_ids(request, data.get("prompt_token_ids"))
        if (
            request.input_ids and prompt_tokens and prompt_tokens != len(request.input_ids)
            and not request.server_media  # the server's own video tokens: not ours to count
        ):  # fmt: skip
            self.prompt_token_mismatches += 1
            log.warning(
                "%s counted %d prompt tokens for request %s, we have %d (template or image processing "
                "differs from ours)",
                self.base_url,
                prompt_tokens,
                request.request_id,
                len(request.input_ids),
            )
        token_ids, exact = self._generated_ids(choice)
        if exact and self.processor is not None:  # the ids' own text, special tokens kept, as in process
            text = self.processor.tokenizer.decode(token_ids, skip_special_tokens=False)
        return Completion(
            token_ids=token_ids,
            text=text,
            logprobs=logprobs,
            finish_reason=reason,  # type: ignore[arg-type]
            stop_reason=choice.get("stop_reason"),
            prompt_tokens=prompt_tokens,
            latency_s=time.perf_counter() - started,
            request_id=request.request_id,
            exact_tokens=exact,
        )

    def _generated_ids(self, choice: dict[str, Any]) -> tuple[list[int], bool]:
        """(generated token ids, whether they are the server's own): a plain OpenAI server returns text only."""
        return [], False

    def _check_prompt_ids(self, request: GenerationRequest, served: Any) -> None:
        if not request.input_ids or not isinstance(served, list) or request.server_media:
            return
        self.prompt_ids_checked += 1
        if served != list(request.input_ids):
            self.prompt_id_mismatches += 1
            at = next(
                (i for i, (a, b) in enumerate(zip(served, request.input_ids, strict=False)) if a != b), None
            )
            at = min(len(served), len(request.input_ids)) if at is None else at
            log.warning("%s built other prompt token ids for request %s: %d ids against our %d, first "
                        "difference at position %d", self.base_url, request.request_id, len(served),
                        len(request.input_ids), at)  # fmt: skip

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = self.base_url + path
        last = "no attempt made"
        retry_after: float | None = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                # exponential backoff with full jitter, so retries of concurrent requests spread out; the
                # server's Retry-After wins when it asks for longer (bounded: a huge value is a bad header)
                wait = random.uniform(0, self.backoff_s * 2 ** (attempt - 1))
                if retry_after is not None:
                    wait = max(wait, min(retry_after, self.max_retry_after_s))
                self.waits.append(wait)
                await asyncio.sleep(wait)
            retry_after = None
            self.attempts += 1
            try:
                client, _ = self._bind()
                response = await client.post(url, json=body)
            except httpx.TimeoutException:
                last = f"timed out after {self.timeout_s:g} s"
                continue
            except httpx.HTTPError as err:
                last = self._redact(f"{type(err).__name__}: {err}")
                continue
            if response.status_code == 200:
                try:
                    return response.json()
                except ValueError as err:
                    raise EngineError(f"{url}: response is not JSON ({err})") from err
            last = f"HTTP {response.status_code}: {self._redact(response.text[:300])}"
            if response.status_code not in RETRY_STATUS:
                raise EngineRefused(
                    f"{url}: {last} (after {attempt + 1} attempt(s)){refusal_hint(response.text)}"
                )
            if response.status_code in RETRY_AFTER_STATUS:
                retry_after = retry_after_seconds(response.headers.get("Retry-After"))
        raise EngineError(f"{url}: {last} (after {attempt + 1} attempt(s))")
