"""Shared by several test modules (from tests/unit/test_engines_openai.py, where it was first written)."""

from __future__ import annotations

import numpy as np
import torch

from paravt_core.engines.base import GenerationRequest, SamplingParams
from paravt_core.engines.transformers_engine import TransformersEngine


def _frame(seed: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.integers(0, 256, (3, 64, 64), dtype=np.uint8))


def _request(question: str, frame: torch.Tensor, max_new_tokens: int = 12) -> GenerationRequest:
    messages = [
        {"role": "system", "content": "You describe frames."},
        {"role": "user", "content": [{"type": "image", "image": frame}, {"type": "text", "text": question}]},
    ]
    return GenerationRequest(messages=messages, sampling=SamplingParams(max_new_tokens=max_new_tokens))


def _direct(engine: TransformersEngine, request: GenerationRequest) -> str:
    """What the served model writes for this request, computed in-process without HTTP."""
    processor = engine.processor
    text = processor.apply_chat_template(request.messages, add_generation_prompt=True, tokenize=False)
    images = [
        p["image"]
        for m in request.messages
        if isinstance(m["content"], list)
        for p in m["content"]
        if p["type"] == "image"
    ]
    inputs = processor(text=[text], images=images or None, return_tensors="pt")
    local = GenerationRequest(
        input_ids=inputs["input_ids"][0].tolist(),
        pixel_values=inputs.get("pixel_values"),
        image_grid_thw=inputs.get("image_grid_thw"),
        sampling=request.sampling,
    )
    (completion,) = engine.generate_sync([local])
    ids = completion.token_ids
    if completion.finish_reason == "stop":
        ids = ids[:-1]
    return engine.tokenizer.decode(ids, skip_special_tokens=True)
