"""Shared by several test modules (from tests/contract/test_vllm_engine.py, where it was first written)."""

from __future__ import annotations

import httpx
import numpy as np
import torch

from paravt_core.engines.base import GenerationRequest, SamplingParams, image_processor_kwargs
from paravt_core.engines.openai_engine import OpenAIEngine
from paravt_core.models import load
from paravt_core.rl.learner import PolicyLogprobs, TrainSequence, pack_sample
from paravt_core.sft.packing import pack


def _frame(seed: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.integers(0, 256, (3, 64, 64), dtype=np.uint8))


def _conversation() -> tuple[list[dict], list[torch.Tensor]]:
    frames = [_frame(i) for i in range(3)]
    messages = [
        {"role": "system", "content": "You describe frames."},
        {
            "role": "user",
            "content": [
                {"type": "image", "image": frames[0]},
                {"type": "image", "image": frames[1]},
                {"type": "text", "text": "What changed?"},
            ],
        },  # fmt: skip
        {"role": "assistant", "content": "The colours moved."},
        {
            "role": "user",
            "content": [{"type": "image", "image": frames[2]}, {"type": "text", "text": "And now?"}],
        },
    ]
    return messages, frames


TEMPERATURE = 0.7


def _sample(engine: OpenAIEngine, processor, seed: int = 7) -> tuple[TrainSequence, list[float]]:
    """One sampled reply from vLLM to the 3-image conversation: (the learner's sequence of the same prompt ids,
    pixels and drawn tokens, the log-prob vLLM reports for each drawn token)."""
    messages, frames = _conversation()
    ours = image_processor_kwargs(max_pixels=64 * 64, min_pixels=32 * 32)
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    encoded = processor(text=[text], images=frames, images_kwargs=ours, return_tensors="pt")
    request = GenerationRequest(
        messages=messages, input_ids=encoded["input_ids"][0].tolist(), images_kwargs=ours,
        sampling=SamplingParams(temperature=TEMPERATURE, top_p=1.0, max_new_tokens=16, seed=seed),
    )  # fmt: skip
    body = {**engine.payload(request), "logprobs": True, "top_k": -1, "return_token_ids": True}
    response = httpx.post(engine.base_url + "/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text[-500:]  # a dead engine core answers 500
    answer = response.json()
    choice = answer["choices"][0]
    assert answer["prompt_token_ids"] == request.input_ids  # the same prompt, pixels included
    drawn = choice["token_ids"]
    served = [item["logprob"] for item in choice["logprobs"]["content"]]
    assert len(drawn) == len(served) >= 2
    ids = torch.tensor(request.input_ids + drawn)
    seq = TrainSequence(
        input_ids=ids, loss_mask=torch.tensor([0.0] * len(request.input_ids) + [1.0] * len(drawn)),
        behav_logp=torch.zeros(len(ids)), mm_token_type_ids=(ids == processor.image_token_id).long(),
        pixel_values=encoded["pixel_values"], image_grid_thw=encoded["image_grid_thw"],
    )  # fmt: skip
    return seq, served


def _learner_logprobs(model, seq: TrainSequence, temperature: float = TEMPERATURE) -> list[float]:
    """The RL learner's log-probs of the sequence's trained (drawn) tokens."""
    with torch.no_grad():
        full = PolicyLogprobs(model)(pack([pack_sample(model.config, seq)]), temperature)
    return full[seq.loss_mask > 0].tolist()


def _gap(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def _moved(model_dir: str, seed: int = 0):
    """The tiny model with every weight moved (the vision tower's included)."""
    moved = load(model_dir)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(seed)
        for p in moved.model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    return moved


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
