"""Shared pieces of the agent and engine tests: a small synthetic video and a tiny-model agent config."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from paravt_core.agent.config import AgentConfig
from paravt_core.engines.base import GenerationRequest, SamplingParams
from paravt_core.synth import Event, write_video

# 12 s at 4 fps, 128x96: a red circle during [2, 5) s and a blue square during [7, 10) s.
VIDEO_SECONDS = 12.0
VIDEO_FPS = 4.0
VIDEO_SIZE = (128, 96)
VIDEO_EVENTS = [
    Event("circle", "red", 2.0, 5.0, (10, 10, 60, 60)),
    Event("square", "blue", 7.0, 10.0, (40, 20, 100, 80)),
]
# Pixel budget small enough for the tiny processor (<= 128*128 px): frames come out 64x64 -> 4 tokens each.
MAX_PIXELS = 64 * 96
MIN_PIXELS = 32 * 32


def make_video(path: Path) -> Path:
    write_video(path, VIDEO_EVENTS, VIDEO_SECONDS, VIDEO_FPS, VIDEO_SIZE)
    return path


def tiny_agent_config(**overrides) -> AgentConfig:
    """8 overview frames, 4 crop frames, greedy, short generations: fast on the tiny model."""
    base = {
        "overview_frames": 8,
        "max_pixels": MAX_PIXELS,
        "min_pixels": MIN_PIXELS,
        "max_new_tokens": 256,
        "temperature": 0.0,
        "subagent": {"temperature": 0.0, "max_new_tokens": 16},
        "crop": {"max_frames": 4},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return AgentConfig.model_validate(base)


def image_request(processor, frames: list, text: str, **sampling) -> GenerationRequest:
    """A user turn of ``frames`` (C×H×W uint8) then ``text``, rendered and encoded by the real processor."""
    parts = [{"type": "image", "image": f} for f in frames] + [{"type": "text", "text": text}]
    rendered = processor.apply_chat_template(
        [{"role": "user", "content": parts}], add_generation_prompt=True, tokenize=False
    )
    out = processor(text=[rendered], images=frames or None, return_tensors="pt")
    return GenerationRequest(
        input_ids=out["input_ids"][0].tolist(),
        images=frames,
        pixel_values=out.get("pixel_values"),
        image_grid_thw=out.get("image_grid_thw"),
        sampling=SamplingParams(**sampling),
    )


def random_frames(seed: int, n: int, height: int, width: int) -> list[torch.Tensor]:
    rng = np.random.default_rng(seed)
    return [torch.from_numpy(rng.integers(0, 256, (3, height, width), dtype=np.uint8)) for _ in range(n)]
