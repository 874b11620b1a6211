"""TransformersEngine on the tiny model: batching, log-probs, sampling, stops, weights."""

from __future__ import annotations

import asyncio

import pytest
import torch

from paravt_core.engines.base import EngineError, GenerationRequest
from paravt_core.engines.transformers_engine import TransformersEngine
from paravt_core.models import build_tiny_model, load
from tests.support.agent_support import image_request, random_frames


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load(tiny_model_dir)  # own copy: load_weights below changes it


@pytest.fixture(scope="module")
def engine(loaded) -> TransformersEngine:
    return TransformersEngine(loaded.model, loaded.processor)


def _request(processor, prompt_seed: int, n_images: int, **sampling) -> GenerationRequest:
    frames = random_frames(prompt_seed, n_images, 64, 96)
    return image_request(
        processor, frames, "describe " * (prompt_seed + 1), **{"max_new_tokens": 12, **sampling}
    )


def _forward_logprobs(
    model, request: GenerationRequest, generated: list[int], temperature: float
) -> list[float]:
    """Log-probs of ``generated`` by one teacher-forced forward pass (independent of generate)."""
    ids = torch.tensor([request.input_ids + generated])
    kwargs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    kwargs["mm_token_type_ids"] = (ids == model.config.image_token_id).long()
    if request.pixel_values is not None:
        kwargs.update(pixel_values=request.pixel_values, image_grid_thw=request.image_grid_thw)
    with torch.no_grad():
        logits = model(**kwargs).logits[0].float()
    n = len(request.input_ids)
    logprobs = torch.log_softmax(logits[n - 1 : n - 1 + len(generated)] / temperature, dim=-1)
    return logprobs.gather(-1, torch.tensor(generated)[:, None]).squeeze(-1).tolist()


def test_batch_equals_one_by_one_and_logprobs_match_a_forward_pass(engine, loaded):
    requests = [_request(loaded.processor, s, n) for s, n in [(0, 1), (1, 3), (2, 0), (3, 2)]]
    batch = asyncio.run(engine.generate(requests))
    for request, completion in zip(requests, batch, strict=True):
        (alone,) = engine.generate_sync([request])
        assert completion.token_ids == alone.token_ids
        assert completion.logprobs == pytest.approx(alone.logprobs, abs=1e-4)
        expected = _forward_logprobs(loaded.model, request, completion.token_ids, 1.0)
        assert completion.logprobs == pytest.approx(expected, abs=1e-4)
        assert completion.text == loaded.tokenizer.decode(completion.token_ids, skip_special_tokens=False)
        assert completion.prompt_tokens == len(request.input_ids)
        if completion.finish_reason == "length":
            assert len(completion.token_ids) == 12
        else:
            assert completion.token_ids[-1] in engine.eos_token_ids


def test_sampling_is_seeded_and_logprobs_are_at_the_sampling_temperature(engine, loaded):
    request = _request(loaded.processor, 4, 1, temperature=0.7, seed=11, max_new_tokens=16)
    first, second = engine.generate_sync([request]), engine.generate_sync([request])
    assert first[0].token_ids == second[0].token_ids
    other = _request(loaded.processor, 4, 1, temperature=0.7, seed=12, max_new_tokens=16)
    assert engine.generate_sync([other])[0].token_ids != first[0].token_ids
    expected = _forward_logprobs(loaded.model, request, first[0].token_ids, 0.7)
    assert first[0].logprobs == pytest.approx(expected, abs=1e-4)


def test_stop_strings_end_generation_on_the_completing_token(engine, loaded):
    request = _request(loaded.processor, 5, 0, max_new_tokens=20)
    (free,) = engine.generate_sync([request])
    tok = loaded.tokenizer
    texts = [tok.decode(free.token_ids[: k + 1]) for k in range(len(free.token_ids))]
    k = next(k for k in range(3, len(texts)) if texts[k].strip() and texts[k] != texts[k - 1])
    stop = texts[k][len(texts[k - 1]) :]  # the text the (k+1)-th token adds
    assert stop not in texts[k - 1]
    stopped_request = _request(loaded.processor, 5, 0, max_new_tokens=20, stop=(stop,))
    (stopped,) = engine.generate_sync([stopped_request])
    assert stopped.token_ids == free.token_ids[: k + 1]
    assert stopped.finish_reason == "stop" and stopped.stop_reason == stop


def test_load_weights_from_state_dict_and_uri(tmp_path, tiny_model_dir):
    mine = load(tiny_model_dir)
    engine = TransformersEngine(mine.model, mine.processor)
    other_dir = build_tiny_model(str(tmp_path / "seed1"), seed=1)
    other = load(other_dir)
    request = _request(mine.processor, 6, 1)
    before = engine.generate_sync([request])[0].token_ids
    target = TransformersEngine(other.model, other.processor).generate_sync([request])[0].token_ids
    assert before != target
    engine.load_weights(other.model.state_dict())
    assert engine.generate_sync([request])[0].token_ids == target and engine.weight_version == 1
    engine.load_weights(tiny_model_dir)  # back to the original, from a checkpoint URI
    assert engine.generate_sync([request])[0].token_ids == before and engine.weight_version == 2
    with pytest.raises(EngineError, match="missing"):
        engine.load_weights({"not.a.weight": torch.zeros(1)})


def test_bad_requests(engine, loaded):
    request = _request(loaded.processor, 7, 1)
    request.pixel_values = None
    with pytest.raises(EngineError, match="no pixel_values"):
        engine.generate_sync([request])
    with pytest.raises(EngineError, match="no input_ids"):
        engine.generate_sync([GenerationRequest(messages=[{"role": "user", "content": "hi"}])])
    short = _request(loaded.processor, 7, 1)
    short.image_grid_thw = torch.tensor([[1, 2, 2]])
    with pytest.raises(EngineError, match="image pad tokens"):
        engine.generate_sync([short])
