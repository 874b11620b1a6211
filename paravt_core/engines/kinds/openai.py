"""``engine.kind=openai``: any OpenAI-compatible chat server (``engines/openai_engine.py``). It returns text,
not token ids or their log-probs, so it can evaluate but not roll out for the learner."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from paravt_core.config_base import StrictModel

from .base import BuildContext, EngineKind


class OpenAIEngineConfig(StrictModel):
    kind: Literal["openai"] = Field(default="openai", description="an OpenAI-compatible chat server")
    base_url: str = Field(default="", description="the server (http://host:port/v1); required")
    served_model: str = Field(default="", description="model name on the server; empty: the stage's `model`")
    max_concurrency: int = Field(default=16, ge=1, description="requests in flight at once")


def build(cfg: OpenAIEngineConfig, ctx: BuildContext) -> Any:
    from paravt_core.engines.openai_engine import OpenAIEngine

    timeout = {"timeout_s": ctx.timeout_s} if ctx.timeout_s is not None else {}
    return OpenAIEngine(
        cfg.base_url,
        cfg.served_model or ctx.model,
        processor=ctx.load_processor(),
        max_concurrency=cfg.max_concurrency,
        **timeout,
    )


KIND = EngineKind(
    "openai",
    OpenAIEngineConfig,
    build,
    frozenset({"eval", "agent"}),
    refused={
        "rl": "an OpenAI-compatible server returns text, not the token ids and log-probs the learner trains on; "
        "use engine.kind=vllm (the same server, exact tokens) or sglang"
    },
)
