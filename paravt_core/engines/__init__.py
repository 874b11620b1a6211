"""Generation backends behind one async batch interface (see ``base``): in-process transformers, an SGLang
server, any OpenAI-compatible server, and a scripted engine for scenarios and fault injection."""

from .base import Completion, Engine, EngineError, GenerationRequest, SamplingParams

__all__ = ["Completion", "Engine", "EngineError", "GenerationRequest", "SamplingParams"]
