"""Typed config of the RL stage (``paravt rl``): the ``paravt:`` recipe, the episode, the GRPO algorithm, the
optimizer and checkpoints. It lives here, not in ``paravt_core.config``, because it embeds the agent's
``AgentConfig`` (see ``paravt_core.config.STAGE_CONFIGS``)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

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
from paravt_core.config_base import StrictModel
from paravt_core.tracking.config import TrackingConfig


class OptimConfig(StrictModel):
    lr: float = Field(default=2e-6, gt=0.0, description="constant learning rate of AdamW (SPEC §5)")
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


class RolloutEngineConfig(StrictModel):
    """Where rollouts are generated and how the new weights get there after each step."""

    kind: Literal["transformers", "sglang", "vllm"] = Field(
        default="transformers",
        description="in-process generate, an SGLang server, or a vLLM server (base_url)",
    )
    base_url: str = Field(
        default="",
        description="sglang / vllm: a running server (http://host:port); empty: sglang launches one (GPU)",
    )
    port: int = Field(default=30000, ge=1, le=65535, description="sglang launch: the server's port")
    deterministic_inference: bool = Field(
        default=False, description="sglang: the server runs --enable-deterministic-inference"
    )
    # "disk" writes the gathered HF weights to staging_dir for /update_weights_from_disk; "distributed"
    # broadcasts them over NCCL (/update_weights_from_distributed, GPU only).
    weight_sync: Literal["disk", "distributed"] = Field(
        default="disk", description="sglang weight push: via files in staging_dir, or an NCCL broadcast (GPU)"
    )
    staging_dir: str = Field(
        default="", description="disk push: a local directory the server can read; empty: <output>-weights"
    )
    nccl_address: str = Field(
        default="127.0.0.1",
        description="distributed push: address of the learner's rank 0 as the server sees it",
    )
    nccl_port: int = Field(
        default=29600, ge=1, le=65535, description="distributed push: the NCCL group's port"
    )
    server_ranks: int = Field(default=1, ge=1, description="distributed push: GPUs of the server (tp x dp)")
    bucket_mb: int = Field(
        default=1024,
        ge=1,
        description="distributed push: MiB of tensors per /update_weights_from_distributed",
    )
    # SGLang's third mode, in_place, keeps running requests in the batch: the flush after the last bucket
    # is then refused ("requests are still running"), so a push under load fails; it is not offered.
    pause_mode: Literal["retract", "abort"] = Field(
        default="retract",
        description="how SGLang pauses in-flight requests during a push: retract (they resume after it) or "
        "abort (they end)",
    )
    gpus: list[int] = Field(
        default_factory=list,
        description="GPUs (node indices) of the SGLang server (rl/launch.py or the stage's own launch); learner: the rest",
    )
    tp_size: int = Field(
        default=0, ge=0, description="sglang launch: tensor-parallel size; 0: all of engine.gpus"
    )
    mem_fraction_static: float = Field(
        default=0.85, gt=0.0, lt=1.0, description="sglang launch: GPU memory share for weights and KV cache"
    )
    max_concurrency: int = Field(
        default=256, ge=1, description="sglang: /generate requests in flight at once (one per episode turn)"
    )
    # Rollout fleet (engines/fleet.py): several SGLang servers behind one sglang-router
    servers: int = Field(
        default=1, ge=1, description="sglang: servers behind one sglang-router (1: one server, no router)"
    )
    router_policy: Literal["manual", "cache_aware", "round_robin", "power_of_two", "random"] = Field(
        default="manual",
        description="fleet: router policy; manual = a GRPO group's routing key sticks to one server's cache",
    )
    router_retries: int = Field(
        default=3, ge=0, description="fleet: router retries of a request on other servers"
    )
    router_metrics_port: int = Field(
        default=30090, ge=1, le=65535, description="fleet launch: the router's Prometheus port (step metrics)"
    )
    worker_urls: list[str] = Field(
        default_factory=list,
        description="fleet: the servers behind engine.base_url (a router); empty: the router's /workers list",
    )
    router_metrics_url: str = Field(
        default="", description="fleet: the router's Prometheus endpoint (empty: no router counters)"
    )
    service_selector: list[str] = Field(
        default_factory=list,
        description="fleet launch: key=value pod labels; the router discovers the servers (Kubernetes)",
    )
    service_namespace: str = Field(
        default="", description="fleet launch: namespace of the discovered servers"
    )
    service_port: int = Field(
        default=30000, ge=1, le=65535, description="fleet launch: port of the discovered servers"
    )


class RlConfig(StrictModel):
    """``paravt rl``: PARA-GRPO on the data stage's RL parquets, starting from the SFT checkpoint."""

    # The SFT stage's name for the same thing (``paravt sft trainer.steps=N``) is accepted here too.
    SHORTHANDS: ClassVar[dict[str, str]] = {"trainer.steps": "steps"}

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
        default_factory=RolloutEngineConfig, description="where rollouts are generated, how weights get there"
    )
    engine_batch_size: int = Field(
        default=64, ge=1, description="requests per generate call of the in-process engine"
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
    paravt: ParavtRecipe = Field(default_factory=ParavtRecipe, description="the PARA-GRPO recipe (SPEC §5)")
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
