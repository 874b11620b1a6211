"""Exact, append-only token accounting of an episode (docs/method.md §4.4).

A ``Trace`` is the list of ``Segment`` s one model saw and wrote, in order:

- ``prompt``: text the environment adds (the first system + user turn, the assistant header, the forced
  ``<think>\\n`` prefix, a forced-answer turn);
- ``generated``: the tokens the engine returned, kept **as returned** (never re-tokenized), with their
  behaviour log-probs;
- ``tool``: the user turn holding a turn's ``<tool_response>`` blocks.

Every segment carries its token ids (image pads expanded by the processor), a loss mask (1 only on the
trained model's generated tokens), per-token behaviour log-probs (0 where not generated) and the frames it
shows with the processor's ``pixel_values`` / ``image_grid_thw`` for them, so the learner gets exactly the
pixels the rollout saw. Segments are only ever appended; the whole conversation is never re-rendered and
sliced (the release does that and corrupts multi-call turns).

Segment texts start and end at special tokens (``<|im_start|>``, ``<|im_end|>``, image markers) or at the
forced ``<think>`` prefix, which byte-level BPE never merges across, so tokenizing the segments one by one
gives the same ids as tokenizing the rendered conversation; ``tests/unit/test_agent_segments.py`` checks this
against the real processor and chat template at every turn boundary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import torch

from paravt_core.engines.base import image_processor_kwargs


class SegmentKind(StrEnum):
    PROMPT = "prompt"
    GENERATED = "generated"
    TOOL = "tool"


@dataclass
class Segment:
    kind: SegmentKind
    text: str
    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    turn: int
    label: str = ""  # what this segment is: "system+question", "think_prefix", "tool_responses", ...
    images: list[torch.Tensor] = field(default_factory=list)  # uint8 C x H x W frames, in prompt order
    pixel_values: torch.Tensor | None = None
    image_grid_thw: torch.Tensor | None = None

    def __post_init__(self) -> None:
        n = len(self.token_ids)
        if len(self.loss_mask) != n or len(self.logprobs) != n:
            raise ValueError(
                f"segment {self.label!r}: {n} tokens but {len(self.loss_mask)} mask and "
                f"{len(self.logprobs)} log-prob entries"
            )
        grids = 0 if self.image_grid_thw is None else int(self.image_grid_thw.shape[0])
        if grids != len(self.images):
            raise ValueError(f"segment {self.label!r}: {len(self.images)} images but {grids} image grids")

    def __len__(self) -> int:
        return len(self.token_ids)


class Trace:
    """Append-only segments of one model's sequence (the main agent or one sub-agent)."""

    def __init__(self, role: str = "main"):
        self.role = role
        self.segments: list[Segment] = []

    def append(self, segment: Segment) -> Segment:
        self.segments.append(segment)
        return segment

    def __len__(self) -> int:
        return sum(len(s) for s in self.segments)

    @property
    def token_ids(self) -> list[int]:
        return [t for s in self.segments for t in s.token_ids]

    @property
    def loss_mask(self) -> list[int]:
        return [m for s in self.segments for m in s.loss_mask]

    @property
    def logprobs(self) -> list[float]:
        return [p for s in self.segments for p in s.logprobs]

    @property
    def images(self) -> list[torch.Tensor]:
        return [im for s in self.segments for im in s.images]

    @property
    def pixel_values(self) -> torch.Tensor | None:
        parts = [s.pixel_values for s in self.segments if s.pixel_values is not None]
        return torch.cat(parts) if parts else None

    @property
    def image_grid_thw(self) -> torch.Tensor | None:
        parts = [s.image_grid_thw for s in self.segments if s.image_grid_thw is not None]
        return torch.cat(parts) if parts else None

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.segments)

    def generated_text(self) -> str:
        return "".join(s.text for s in self.segments if s.kind == SegmentKind.GENERATED)

    def summary(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "tokens": len(self),
            "trained_tokens": sum(self.loss_mask),
            "images": len(self.images),
            "segments": [
                {
                    "kind": str(s.kind),
                    "label": s.label,
                    "turn": s.turn,
                    "tokens": len(s),
                    "images": len(s.images),
                }
                for s in self.segments
            ],
        }


class SegmentEncoder:
    """Turns segment text (with image placeholders) and frames into token ids with the model's processor.

    ``max_pixels`` / ``min_pixels`` are passed to the image processor on every call, so frames that the
    video module already fitted to this budget on the 32-px grid are not resized a second time.
    """

    def __init__(self, processor: Any, *, max_pixels: int | None, min_pixels: int | None):
        self.processor = processor
        self.tokenizer = processor.tokenizer
        # None: the processor's own settings (the release's server gets no mm_processor_kwargs)
        self.images_kwargs = (
            {}
            if max_pixels is None or min_pixels is None
            else image_processor_kwargs(max_pixels=max_pixels, min_pixels=min_pixels)
        )
        self.eos_token_id: int = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.image_token_id: int = self.tokenizer.convert_tokens_to_ids("<|image_pad|>")

    def render(self, messages: list[dict], *, add_generation_prompt: bool) -> str:
        """The chat template's text for ``messages`` (image parts become placeholders)."""
        return self.processor.apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt, tokenize=False
        )

    def encode(
        self, text: str, images: Sequence[torch.Tensor] = ()
    ) -> tuple[list[int], torch.Tensor | None, torch.Tensor | None]:
        """(token ids with image pads expanded, pixel_values, image_grid_thw) of ``text`` + ``images``."""
        if not images:
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            return list(ids), None, None
        out = self.processor(
            text=[text], images=list(images), return_tensors="pt", images_kwargs=self.images_kwargs
        )
        return out["input_ids"][0].tolist(), out["pixel_values"], out["image_grid_thw"]

    def segment(
        self, kind: SegmentKind, text: str, *, turn: int, label: str, images: Sequence[torch.Tensor] = ()
    ) -> Segment:
        """A prompt or tool segment (never trained)."""
        ids, pixels, grid = self.encode(text, images)
        return Segment(
            kind=kind,
            text=text,
            token_ids=ids,
            loss_mask=[0] * len(ids),
            logprobs=[0.0] * len(ids),
            turn=turn,
            label=label,
            images=list(images),
            pixel_values=pixels,
            image_grid_thw=grid,
        )

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=False)

    def count(self, text: str) -> list[int]:
        """Token ids of plain text (no special-token handling beyond the tokenizer's added tokens)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
