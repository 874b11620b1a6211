"""``engine.kind=transformers``: the model in the stage's own process (``engines/transformers_engine.py``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from paravt_core.config_base import StrictModel

from .base import BuildContext, EngineKind


class TransformersEngineConfig(StrictModel):
    kind: Literal["transformers"] = Field(
        default="transformers", description="in-process generate (no server)"
    )
    device: str = Field(
        default="",
        description="torch device (cpu, cuda, cuda:1); empty: the stage's (eval: cpu; rl: the learner's, the only one)",
    )
    dtype: str | None = Field(
        default=None, description="weight dtype; null: the checkpoint's (rl: always the run's dtype)"
    )
    coalesce: bool = Field(
        default=True, description="merge the generation calls of the episodes in flight into one batch"
    )
    max_batch: int = Field(default=32, ge=1, description="requests per batched generate call")


def build(cfg: TransformersEngineConfig, ctx: BuildContext) -> Any:
    from paravt_core.engines.transformers_engine import TransformersEngine

    dtype = cfg.dtype if cfg.dtype is not None else ctx.dtype
    return TransformersEngine.from_uri(
        ctx.model,
        device=cfg.device or ctx.device,
        dtype=dtype,
        max_batch_size=cfg.max_batch,
        purpose=ctx.purpose,
    )


KIND = EngineKind(
    "transformers", TransformersEngineConfig, build, frozenset({"rl", "eval", "agent"}), in_process=True
)
