"""Typed config of the RL stage (``paravt rl``): the ``paravt:`` recipe, the episode, the GRPO algorithm, the
optimizer and checkpoints. It lives here, not in ``paravt_core.config``, because it embeds the agent's
``AgentConfig`` (see ``paravt_core.config.STAGE_CONFIGS``)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from paravt_core.agent.config import AgentConfig
from paravt_core.config import (
    DEFAULT_SDPA_BACKEND,
    SDPA_BACKEND_HELP,
    AdvantageConfig,
    LaunchConfig,
    ParavtRecipe,
    PolicyLossConfig,
    SdpaBackend,
    TrainConfig,
)
from paravt_core.config_base import StrictModel, kind_section
from paravt_core.engines.kinds.transformers import TransformersEngineConfig
from paravt_core.engines.registry import check_kind, engine_config
from paravt_core.tracking.config import TrackingConfig


class OptimConfig(StrictModel):
    lr: float = Field(default=2e-6, gt=0.0, description="constant learning rate of AdamW (docs/method.md §5)")
    weight_decay: float = Field(default=0.01, ge=0.0, description="AdamW weight decay")
    betas: tuple[float, float] = Field(default=(0.9, 0.999), description="AdamW betas")
    grad_clip: float = Field(default=1.0, gt=0.0, description="gradient norm clipping")


class RlCheckpointConfig(StrictModel):
    every: int = Field(default=5, ge=1, description="steps between checkpoints (the last step always saves)")
    keep_last: int = Field(default=2, ge=1, description="complete checkpoints kept; older ones are deleted")
    weights_checksum: bool = Field(
        default=True,
        description="sha256 of the served weights in trainer.json (host pass over them; off at 8B)",
    )


# Where rollouts are generated and how the new weights get there after each step: one config class per
# engine kind (engines/kinds/), told apart by engine.kind.
RolloutEngineConfig = engine_config("rl")


class RlConfig(StrictModel):
    """``paravt rl``: PARA-GRPO on the data stage's RL parquets, starting from the SFT checkpoint."""

    # The SFT stage's name for the same thing (``paravt sft trainer.steps=N``) is accepted here too.
    SHORTHANDS: ClassVar[dict[str, str]] = {"trainer.steps": "steps", "engine_batch_size": "engine.max_batch"}

    data: str = Field(
        default="./paravt-work/data", description="the data stage's output: reads <data>/rl/*.parquet"
    )
    model: str = Field(
        default="./paravt-work/sft/final", description="policy to start from (SFT checkpoint URI)"
    )
    reference_model: str = Field(
        default="", description="frozen KL reference; empty: the same checkpoint as `model`"
    )
    output: str = Field(
        default="./paravt-work/rl",
        min_length=1,
        description="URI: checkpoints, final HF model, metrics, trajectories",
    )
    seed: int = Field(default=0, description="data order and sampling seeds")
    steps: int = Field(default=700, ge=1, description="policy updates")
    prompts_per_step: int = Field(default=7, ge=1, description="prompts sampled per step")
    group_size: int = Field(default=8, ge=2, description="rollouts per prompt (GRPO group n)")
    max_staleness: int = Field(
        default=0,
        ge=0,
        description="policy versions a trained sample may lag behind the learner; 0: synchronous",
    )
    device: str = Field(default="cpu", description="learner device (cpu, cuda)")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        default="float32",
        description="the served weights (the engine's dtype, every push, final/); bfloat16 on GPUs, where the "
        "learner keeps float32 masters",
    )
    engine: RolloutEngineConfig = Field(
        default_factory=lambda: TransformersEngineConfig(max_batch=64),
        description="where rollouts are generated, how weights get there",
    )
    pack_tokens: int = Field(
        default=8192, ge=256, description="learner: tokens packed per forward pass (like SFT)"
    )
    attn_implementation: str = Field(
        default="packed_sdpa",
        description='learner attention: "packed_sdpa" (per packed sample), "sdpa" (masked [L, L] per pack), '
        '"flash_attention_2"',
    )
    sdpa_backend: SdpaBackend = Field(default=DEFAULT_SDPA_BACKEND, description=SDPA_BACKEND_HELP)
    trajectories_per_step: int = Field(
        default=2, ge=0, description="sampled episodes written to trajectories.jsonl per step"
    )
    final_steps: int = Field(
        default=10, ge=1, description="last steps averaged into metrics.json's f_tau_final and kappa_final"
    )
    paravt: ParavtRecipe = Field(
        default_factory=ParavtRecipe, description="the PARA-GRPO recipe (docs/method.md §5)"
    )
    # think_prefix comes from paravt.constrained.think_prefix.
    agent: AgentConfig = Field(
        default_factory=AgentConfig,
        description="the episode: the published RL sampling (temperature 0.7, 2048 tokens)",
    )
    advantage: AdvantageConfig = Field(
        default_factory=AdvantageConfig, description="reward shaping and advantages"
    )
    loss: PolicyLossConfig = Field(default_factory=PolicyLossConfig, description="the decoupled PPO loss")
    optim: OptimConfig = Field(default_factory=OptimConfig, description="the optimizer")
    checkpoint: RlCheckpointConfig = Field(
        default_factory=RlCheckpointConfig, description="checkpoint cadence and retention"
    )
    train: TrainConfig = Field(default_factory=TrainConfig, description="shared training core options")
    launch: LaunchConfig = Field(default_factory=LaunchConfig, description="one node or a multi-node job")
    tracking: TrackingConfig = Field(
        default_factory=TrackingConfig,
        description="experiment tracking (TensorBoard, MLflow, W&B) and pod-log progress",
    )

    @field_validator("engine", mode="before")
    @classmethod
    def _engine_kind_serves_rl(cls, value: Any) -> Any:
        if isinstance(value, dict) and "kind" in value:
            check_kind(
                "rl", value["kind"]
            )  # a kind that cannot roll out says why (e.g. openai: no token ids)
        return kind_section(value, cls.model_fields["engine"].get_default(call_default_factory=True))
