"""The one generation interface every backend implements: ``await engine.generate(requests)``.

A request carries the prompt twice, because backends consume different things:

- token level (transformers, SGLang): ``input_ids`` — the exact prompt tokens with image pads already
  expanded — plus the images (raw uint8 frames, and for in-process engines the processor's
  ``pixel_values`` / ``image_grid_thw``). These engines return the exact generated token ids and their
  behaviour log-probs, which the episode appends as they are.
- chat level (OpenAI-compatible servers): ``messages`` in the tiny/Qwen message format of
  ``paravt_core.models`` with ``{"type": "image", "image": frame}`` parts; the server renders the template.
  When ``continue_final_message`` is set the last message is a partial assistant turn (e.g. the forced
  ``<think>\\n``) that the server must continue rather than close.

All requests of one call are served together (one batch where the backend can batch); the completions come
back in request order. Backend failures raise ``EngineError``.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from paravt_core.user_errors import ParavtUserError

# "stop" (eos or a stop string) and "length" (the token limit) from every engine; chat servers may also
# answer e.g. "abort", "content_filter" or "tool_calls", which are kept as they are (never mapped to "stop":
# the episode must not append an <|im_end|> the model never wrote).
FinishReason = str


def image_processor_kwargs(*, max_pixels: int, min_pixels: int) -> dict[str, Any]:
    """The Qwen image-processor settings of a pixel budget: what our encoder passes, what an SGLang server
    is launched with (``--mm-process-config``) and what chat requests send (``mm_processor_kwargs``), so
    every backend turns a frame into the same pixels and the same number of tokens (docs/method.md §3)."""
    return {"size": {"shortest_edge": min_pixels, "longest_edge": max_pixels}}


class EngineError(ParavtUserError, RuntimeError):
    """The backend could not produce completions (server down, bad response, out of memory, ...)."""


class EngineRefused(EngineError):
    """The server refused the request as it stands (an HTTP 4xx that is not a rate limit or a timeout): the
    same request would be refused again, so nothing retries it (finish reason ``engine_refused``)."""


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling. ``temperature == 0`` means greedy decoding."""

    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()
    seed: int | None = None

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class GenerationRequest:
    """One prompt to continue. See the module docstring for which fields each backend reads."""

    input_ids: list[int] = field(default_factory=list)
    images: list[Any] = field(default_factory=list)  # uint8 frames (C x H x W tensors or H x W x C arrays)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    pixel_values: Any = None  # torch.Tensor from the processor, for in-process engines
    image_grid_thw: Any = None  # torch.Tensor (n_images x 3)
    messages: list[dict] | None = None
    continue_final_message: bool = False
    # the image-processor settings the frames were encoded with (``segments.image_processor_kwargs``);
    # chat engines send them as ``mm_processor_kwargs`` so the server makes the same pixels
    images_kwargs: dict[str, Any] | None = None
    tag: str = "main"  # who asks: "main" or "subagent" (logs, scripted engines)
    # the messages carry media the server decodes itself (a file:// video_url): its prompt ids are its own
    # (``input_ids`` hold one placeholder for them), so they are not compared with ours
    server_media: bool = False
    # requests with one key share a prompt prefix (a GRPO group): a router keeps them on one server's cache
    routing_key: str | None = None
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)


@dataclass
class Completion:
    """The continuation of one request."""

    token_ids: list[int]  # generated ids, including the eos token when generation stopped on it
    text: str  # decoded ``token_ids`` with special tokens kept (chat engines: the server's text)
    logprobs: list[float] | None  # behaviour log-prob of each generated token (None: not available)
    finish_reason: FinishReason
    stop_reason: str | int | None = None  # the stop string or token id that ended generation
    prompt_tokens: int = 0
    latency_s: float = 0.0
    request_id: str = ""
    exact_tokens: bool = True  # False for chat engines: token_ids are a re-tokenization of ``text``
    # None: no seed requested; False: the backend ignores seeds (SGLang without deterministic inference)
    seed_applied: bool | None = None


class Engine(ABC):
    """A generation backend. ``token_level`` engines consume ``input_ids``; others consume ``messages``."""

    name: str = "engine"
    token_level: bool = True
    processor: Any = None  # the HF processor matching the served model, when the engine has one

    @abstractmethod
    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Completions for ``requests``, in order. Raises ``EngineError`` on backend failure."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections or processes."""


# What RL needs from a server's engine beyond ``generate``, by the push it takes (``rl/weight_sync.py``). The
# method names are SGLang's routes; another server maps them to its own (``vllm_engine.VllmEngine``).


@runtime_checkable
class ReloadsFromDisk(Protocol):
    """A server that loads new weights from a Hugging Face directory it can read (``DiskSync``)."""

    async def pause_generation(self, mode: str) -> None:
        """Hold generation (``mode``: what happens to requests in flight, the engine's own names)."""

    async def update_weights_from_disk(self, model_path: str, *, weight_version: str | None = None) -> Any:
        """Load every weight from ``model_path`` and serve it as ``weight_version``; stale caches dropped."""

    async def continue_generation(self) -> None:
        """Resume generation after ``pause_generation``."""

    async def aclose(self) -> None:
        """Close this event loop's HTTP client."""


@runtime_checkable
class UpdatesOverGroup(ReloadsFromDisk, Protocol):
    """A server that joins a process group with the learner's rank 0 and receives tensors over it
    (``NcclSync``: NCCL on GPUs, gloo in the tests)."""

    async def init_weights_update_group(
        self,
        master_address: str,
        master_port: int,
        *,
        rank_offset: int,
        world_size: int,
        group_name: str,
        backend: str,
        trainer_join: Callable[[], Any] | None,
    ) -> Any:
        """Join the group while ``trainer_join`` joins the learner's side."""

    async def destroy_weights_update_group(self, group_name: str) -> Any:
        """Leave and destroy the group."""

    async def begin_weight_update(self) -> Any:
        """Open an update session (buckets are refused outside one)."""

    async def update_weights_from_distributed(
        self,
        named_tensors: Sequence[tuple[str, Any]],
        broadcast: Any,
        *,
        group_name: str,
        weight_version: str | None,
        flush_cache: bool,
    ) -> Any:
        """Receive one bucket while ``broadcast(tensor)`` sends each of its tensors, in order."""

    async def end_weight_update(self) -> Any:
        """Close the update session."""


@runtime_checkable
class ServerProcess(Protocol):
    """A server process an engine owns (it launched it): stopped with the stage, restarted after a cut push."""

    base_url: str

    def start(self) -> Any:
        """Start it and wait until it is healthy."""

    def stop(self, timeout_s: float = 30.0) -> None:
        """End it: SIGTERM, then SIGKILL after ``timeout_s``."""


async def generate_with_retries(
    engine: Engine,
    requests: Sequence[GenerationRequest],
    *,
    max_retries: int,
    on_retry: Callable[[EngineError], None] | None = None,
) -> list[Completion]:
    """``engine.generate(requests)``, sent again up to ``max_retries`` times after an ``EngineError`` (the
    last one propagates); ``on_retry(err)`` runs before each new attempt, so callers count retries their way.
    An :class:`EngineRefused` propagates at once: the same requests would be refused again."""
    for attempt in range(max_retries + 1):
        try:
            return await engine.generate(requests)
        except EngineError as err:
            if attempt == max_retries or isinstance(err, EngineRefused):
                raise
            if on_retry is not None:
                on_retry(err)
    raise AssertionError("unreachable")


def v1_url(base_url: str) -> str:
    """``http://host:port`` or ``http://host:port/v1`` -> the ``/v1`` URL the OpenAI routes live under."""
    base = base_url.rstrip("/")
    return base if base.endswith("/v1") else base + "/v1"
