"""Generation backends behind one async batch interface (see ``base``): in-process transformers, an SGLang
server, a vLLM server, any OpenAI-compatible server, and a scripted engine for scenarios and fault injection.
Stages build them by ``engine.kind`` through ``registry`` (one module per kind in ``kinds/``). Concurrent episodes
reach them through ``coalesce.CoalescingEngine`` (lock-step batches, for the in-process engine) or
``independent.IndependentEngine`` (one request per episode turn, for continuously batching servers)."""

from .base import Completion, Engine, EngineError, EngineRefused, GenerationRequest, SamplingParams

__all__ = ["Completion", "Engine", "EngineError", "EngineRefused", "GenerationRequest", "SamplingParams"]
