"""In-process generation with Hugging Face ``generate`` (CPU for tests and the demo, GPU for small runs).

Requests that share sampling parameters run as one left-padded batch; the images of all requests go in as
one ``pixel_values`` tensor in request order (the model finds each request's images through its image pad
tokens). Behaviour log-probs are ``log_softmax(logits / T)`` of the sampled tokens, read from the raw
logits ``generate`` returns: the sampling distribution before top-p truncation, at the sampling temperature
(T = 1 for greedy), which is what the learner recomputes (docs/method.md §5).

One ``generate`` runs at a time (a lock); ``generate`` is called from a worker thread so the event loop
stays free while the model runs. A caller that stops waiting (``asyncio.wait_for`` timeout) does not stop
the running ``generate``: the thread finishes it and the next call waits for the lock.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch

from .base import Completion, Engine, EngineError, GenerationRequest, SamplingParams


class TransformersEngine(Engine):
    name = "transformers"
    token_level = True

    def __init__(self, model: Any, processor: Any, *, max_batch_size: int = 16):
        self.model = model
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.max_batch_size = max_batch_size
        self.device = next(model.parameters()).device
        self.pad_token_id = self.tokenizer.pad_token_id
        eos = model.generation_config.eos_token_id
        eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
        if self.tokenizer.eos_token_id is not None and self.tokenizer.eos_token_id not in eos_ids:
            eos_ids.append(self.tokenizer.eos_token_id)
        if not eos_ids or self.pad_token_id is None:
            raise EngineError("the model needs an eos token id and the tokenizer a pad token id")
        self.eos_token_ids: list[int] = eos_ids
        self.image_token_id = model.config.image_token_id
        self.video_token_id = getattr(model.config, "video_token_id", None)
        self.weight_version = 0
        self._lock = threading.Lock()

    @classmethod
    def from_uri(
        cls, uri: str, *, device: str = "cpu", dtype: Any = None, purpose: str | None = None, **kwargs: Any
    ) -> TransformersEngine:
        from paravt_core.models import load

        loaded = load(uri, device=device, dtype=dtype, purpose=purpose)
        return cls(loaded.model, loaded.processor, **kwargs)

    # -- weights ----------------------------------------------------------------------------------------

    def load_weights(self, weights: dict[str, torch.Tensor] | str) -> None:
        """Replace the weights: a state dict (keys of ``model.state_dict()``) or a checkpoint URI."""
        if isinstance(weights, str):
            from transformers import AutoModelForImageTextToText

            from paravt_core.models import hf_bars_off, resolve_model_dir

            path = resolve_model_dir(weights)
            with hf_bars_off():
                donor = AutoModelForImageTextToText.from_pretrained(path, local_files_only=True, dtype="auto")
            weights = donor.state_dict()
        with self._lock:
            result = self.model.load_state_dict(weights, strict=False)
            if result.missing_keys or result.unexpected_keys:
                raise EngineError(
                    f"weights do not match the model: missing {result.missing_keys[:5]}, "
                    f"unexpected {result.unexpected_keys[:5]}"
                )
            self.weight_version += 1

    # -- generation ---------------------------------------------------------------------------------------

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        return await asyncio.to_thread(self.generate_sync, list(requests))

    def generate_sync(self, requests: list[GenerationRequest]) -> list[Completion]:
        out: list[Completion | None] = [None] * len(requests)
        groups: dict[SamplingParams, list[int]] = {}
        for i, req in enumerate(requests):
            if not req.input_ids:
                raise EngineError(f"request {req.request_id} has no input_ids (this engine needs tokens)")
            groups.setdefault(req.sampling, []).append(i)
        for sampling, indices in groups.items():
            for lo in range(0, len(indices), self.max_batch_size):
                chunk = indices[lo : lo + self.max_batch_size]
                completions = self._generate_batch([requests[i] for i in chunk], sampling)
                for i, completion in zip(chunk, completions, strict=True):
                    out[i] = completion
        return out  # type: ignore[return-value]

    def _batch_inputs(self, requests: list[GenerationRequest]) -> dict[str, torch.Tensor]:
        width = max(len(r.input_ids) for r in requests)
        ids = torch.full((len(requests), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(requests), width), dtype=torch.long)
        pixels, grids = [], []
        for row, req in enumerate(requests):
            n = len(req.input_ids)
            ids[row, width - n :] = torch.tensor(req.input_ids, dtype=torch.long)
            mask[row, width - n :] = 1
            n_pads = sum(1 for t in req.input_ids if t == self.image_token_id)
            if n_pads:
                if req.pixel_values is None or req.image_grid_thw is None:
                    raise EngineError(f"request {req.request_id} has image tokens but no pixel_values")
                merge = self.processor.image_processor.merge_size**2
                expected = int(req.image_grid_thw.prod(dim=-1).sum()) // merge
                if expected != n_pads:
                    raise EngineError(
                        f"request {req.request_id}: {n_pads} image pad tokens but the images need {expected}"
                    )
                pixels.append(req.pixel_values)
                grids.append(req.image_grid_thw)
        types = torch.zeros_like(ids)
        types[ids == self.image_token_id] = 1
        if self.video_token_id is not None:
            types[ids == self.video_token_id] = 2
        inputs = {"input_ids": ids, "attention_mask": mask, "mm_token_type_ids": types}
        if pixels:
            inputs["pixel_values"] = torch.cat(pixels).to(self.model.dtype)
            inputs["image_grid_thw"] = torch.cat(grids)
        return {k: v.to(self.device) for k, v in inputs.items()}

    def _generation_config(self, sampling: SamplingParams):
        from transformers import GenerationConfig

        # Every knob is set explicitly: transformers fills unset ones from the checkpoint's
        # generation_config.json (e.g. Qwen's top_k=20), which would silently change the distribution.
        return GenerationConfig(
            max_new_tokens=sampling.max_new_tokens,
            do_sample=not sampling.greedy,
            temperature=sampling.temperature if not sampling.greedy else 1.0,
            top_p=sampling.top_p,
            # top_k 0 disables top-k sampling; greedy ignores warpers and warns unless it is the default.
            top_k=0 if not sampling.greedy else 50,
            repetition_penalty=1.0,
            num_beams=1,
            eos_token_id=self.eos_token_ids,
            pad_token_id=self.pad_token_id,
            output_logits=True,
            return_dict_in_generate=True,
        )

    def _generate_batch(
        self, requests: list[GenerationRequest], sampling: SamplingParams
    ) -> list[Completion]:
        inputs = self._batch_inputs(requests)
        config = self._generation_config(sampling)
        extra: dict[str, Any] = {}
        if sampling.stop:
            extra = {"stop_strings": list(sampling.stop), "tokenizer": self.tokenizer}
        started = time.perf_counter()
        with self._lock, torch.random.fork_rng(devices=[] if self.device.type == "cpu" else [self.device]):
            if sampling.seed is not None:
                torch.manual_seed(sampling.seed)
            try:
                with torch.inference_mode():
                    out = self.model.generate(**inputs, generation_config=config, **extra)
            except Exception as err:  # OOM, shape errors...: the caller decides what to do with the episode
                raise EngineError(f"generate failed: {type(err).__name__}: {err}") from err
        elapsed = time.perf_counter() - started
        prompt_width = inputs["input_ids"].shape[1]
        new_tokens = out.sequences[:, prompt_width:].cpu()
        temperature = sampling.temperature if not sampling.greedy else 1.0
        if out.logits:
            logits = torch.stack(out.logits, dim=1).float().cpu()  # batch x steps x vocab
            logprobs = torch.log_softmax(logits / temperature, dim=-1)
            chosen = logprobs.gather(-1, new_tokens[:, : logits.shape[1], None]).squeeze(-1)
        else:
            chosen = torch.zeros(new_tokens.shape)
        completions = []
        for row, req in enumerate(requests):
            tokens = new_tokens[row].tolist()
            length, reason, stop_reason = self._cut(tokens, sampling)
            kept = tokens[:length]
            completions.append(
                Completion(
                    token_ids=kept,
                    text=self.tokenizer.decode(kept, skip_special_tokens=False),
                    logprobs=chosen[row, :length].tolist(),
                    finish_reason=reason,
                    stop_reason=stop_reason,
                    prompt_tokens=len(req.input_ids),
                    latency_s=elapsed,
                    request_id=req.request_id,
                )
            )
        return completions

    def _cut(self, tokens: list[int], sampling: SamplingParams) -> tuple[int, str, str | int | None]:
        """(kept length, finish reason, stop reason) of one row of a batch padded after it finished."""
        for k, token in enumerate(tokens):
            if sampling.stop:
                text = self.tokenizer.decode(tokens[: k + 1], skip_special_tokens=False)
                for stop in sampling.stop:
                    if stop in text:
                        return k + 1, "stop", stop
            if token in self.eos_token_ids:
                return k + 1, "stop", token
        return len(tokens), "length", None
