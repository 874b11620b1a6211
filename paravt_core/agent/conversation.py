"""One model's conversation kept two ways in lockstep: chat messages (for chat-level engines, logs and the
template check) and the append-only token ``Trace`` (for token-level engines and the learner).

Only the first turn goes through the chat template (it decides how the system prompt and the images are
laid out). Later pieces are ChatML text written here, because rendering the grown conversation and slicing
it is exactly what must not happen; the tests render the full conversation with the real template and
check that it tokenizes to the same ids as these pieces.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from paravt_core.engines.base import Completion, GenerationRequest, SamplingParams

from .prompts import PromptSet, load_prompt_set
from .segments import Segment, SegmentEncoder, SegmentKind, Trace

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ASSISTANT_HEADER = f"{IM_START}assistant\n"
IMAGE_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"

Part = dict[str, Any]


def text_part(text: str) -> Part:
    return {"type": "text", "text": text}


def image_part(frame: torch.Tensor) -> Part:
    return {"type": "image", "image": frame}


def video_url_part(path: str) -> Part:
    """A whole local video for the server to decode (OpenAI's ``video_url`` part, a ``file://`` URL)."""
    return {"type": "video_url", "video_url": {"url": f"file://{path}"}}


def _server_media(messages: Sequence[dict]) -> bool:
    return any(
        isinstance(m["content"], list) and any(p["type"] == "video_url" for p in m["content"])
        for m in messages
    )


def render_parts(parts: Sequence[Part]) -> tuple[str, list[torch.Tensor]]:
    """(text with image placeholders, frames in order) of message parts, as the chat template lays them out."""
    pieces: list[str] = []
    images: list[torch.Tensor] = []
    for part in parts:
        if part["type"] == "text":
            pieces.append(part["text"])
        elif part["type"] == "image":
            pieces.append(IMAGE_PLACEHOLDER)
            images.append(part["image"])
        else:
            raise ValueError(f"unsupported part type {part['type']!r}")
    return "".join(pieces), images


@dataclass
class Conversation:
    """Messages + trace of one model. ``trained`` sets the loss mask of its generated tokens."""

    encoder: SegmentEncoder
    role: str = "main"
    trained: bool = True
    think_prefix: bool = False
    prompt_set: PromptSet = field(default_factory=load_prompt_set)
    messages: list[dict] = field(default_factory=list)
    trace: Trace = field(init=False)
    _closed: bool = field(default=True, init=False)  # the last generated turn ended with <|im_end|>

    def __post_init__(self) -> None:
        self.trace = Trace(self.role)

    # -- building ---------------------------------------------------------------------------------------

    def start(self, system: str | None, user_parts: Sequence[Part]) -> None:
        """The first turn: system + user through the chat template, then the assistant header."""
        if self.messages:
            raise RuntimeError("conversation already started")
        if system is not None:
            self.messages.append({"role": "system", "content": system})
        self.messages.append({"role": "user", "content": list(user_parts)})
        text = self.encoder.render(self.messages, add_generation_prompt=True)
        images = [p["image"] for p in user_parts if p["type"] == "image"]
        label = "system+user" if system is not None else "user"
        self.trace.append(self.encoder.segment(SegmentKind.PROMPT, text, turn=0, label=label, images=images))
        self._add_prefix(turn=0)

    def _add_prefix(self, turn: int) -> None:
        if self.think_prefix:
            seg = self.encoder.segment(
                SegmentKind.PROMPT, self.prompt_set.think_prefix, turn=turn, label="think_prefix"
            )
            self.trace.append(seg)

    @property
    def prefix(self) -> str:
        return self.prompt_set.think_prefix if self.think_prefix else ""

    def request(self, sampling: SamplingParams, *, tag: str) -> GenerationRequest:
        """The next generation request (tokens for token-level engines, messages for chat engines)."""
        messages = list(self.messages)
        if self.prefix:
            messages.append({"role": "assistant", "content": self.prefix})
        return GenerationRequest(
            input_ids=self.trace.token_ids,
            images=self.trace.images,
            pixel_values=self.trace.pixel_values,
            image_grid_thw=self.trace.image_grid_thw,
            messages=messages,
            continue_final_message=bool(self.prefix),
            images_kwargs=copy.deepcopy(self.encoder.images_kwargs),
            sampling=sampling,
            tag=tag,
            server_media=_server_media(messages),
        )

    def add_generation(self, completion: Completion, *, turn: int) -> str:
        """Append the engine's tokens as they are; returns the turn's text without the closing eos."""
        ids = list(completion.token_ids)
        logprobs = list(completion.logprobs) if completion.logprobs is not None else [0.0] * len(ids)
        text = completion.text
        if not completion.exact_tokens:
            # Chat engines return text only: re-tokenize it (flagged in the completion, no exact log-probs).
            text = text.removesuffix(IM_END)
            ids = self.encoder.count(text)
            if completion.finish_reason == "stop":  # only a real stop wrote <|im_end|>
                ids.append(self.encoder.eos_token_id)
                text += IM_END
            logprobs = [0.0] * len(ids)
        self._closed = bool(ids) and ids[-1] == self.encoder.eos_token_id
        body = self.encoder.decode(ids[:-1]) if self._closed else self.encoder.decode(ids)
        mask = [1 if self.trained else 0] * len(ids)
        self.trace.append(
            Segment(
                SegmentKind.GENERATED, self.encoder.decode(ids), ids, mask, logprobs, turn, label="generation"
            )
        )
        self.messages.append({"role": "assistant", "content": self.prefix + body})
        return body

    def add_tool_turn(
        self, responses: Sequence[Sequence[Part]], *, turn: int, forced_answer: str | None = None
    ) -> None:
        """One user turn with every ``<tool_response>`` block of the turn in call order, then (eval) the
        forced-answer instruction as its own user turn, then the next assistant header (+ prefix)."""
        blocks: list[str] = []
        images: list[torch.Tensor] = []
        for parts in responses:
            body, frames = render_parts(parts)
            blocks.append(self.prompt_set.tool_response_block(body))
            images.extend(frames)
            self.messages.append({"role": "tool", "content": list(parts)})
        text = f"{self._closing()}\n{IM_START}user\n{self.prompt_set.tool_response.separator.join(blocks)}{IM_END}\n"
        self.trace.append(
            self.encoder.segment(SegmentKind.TOOL, text, turn=turn, label="tool_responses", images=images)
        )
        self._next_turn(turn, forced_answer)

    def add_user_messages(
        self, contents: Sequence[Sequence[Part]], *, turn: int, forced_answer: str | None = None
    ) -> None:
        """One user message per entry (``crop_frames`` parity: each call's frames and its response text),
        then the forced-answer instruction (eval) and the next assistant header (+ prefix)."""
        pieces: list[str] = []
        images: list[torch.Tensor] = []
        for parts in contents:
            body, frames = render_parts(parts)
            pieces.append(f"{IM_START}user\n{body}{IM_END}\n")
            images.extend(frames)
            self.messages.append({"role": "user", "content": list(parts)})
        text = f"{self._closing()}\n" + "".join(pieces)
        self.trace.append(
            self.encoder.segment(SegmentKind.TOOL, text, turn=turn, label="tool_responses", images=images)
        )
        self._next_turn(turn, forced_answer)

    def _closing(self) -> str:
        return "" if self._closed else IM_END  # a turn cut by a stop string is closed here (not trained)

    def _next_turn(self, turn: int, forced_answer: str | None) -> None:
        if forced_answer is not None:
            self.messages.append({"role": "user", "content": forced_answer})
            forced = f"{IM_START}user\n{forced_answer}{IM_END}\n"
            self.trace.append(
                self.encoder.segment(SegmentKind.PROMPT, forced, turn=turn, label="forced_answer")
            )
        self.trace.append(
            self.encoder.segment(SegmentKind.PROMPT, ASSISTANT_HEADER, turn=turn, label="assistant_header")
        )
        self._add_prefix(turn=turn)
