"""``engine.kind=sglang``: an SGLang server (``engines/sglang_engine.py``), one we start on a GPU machine or one
running at ``base_url``, or a fleet of them behind ``sglang-router`` (``engines/fleet.py``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from paravt_core.config_base import StrictModel

from .base import (
    BuildContext,
    EngineKind,
    bucket_mb_field,
    nccl_address_field,
    nccl_port_field,
    server_ranks_field,
)


class SglangEngineConfig(StrictModel):
    kind: Literal["sglang"] = Field(default="sglang", description="an SGLang server (token ids in and out)")
    base_url: str = Field(
        default="", description="a running server or router (http://host:port); empty: launch one (GPU)"
    )
    port: int = Field(default=30000, ge=1, le=65535, description="launch: the server's port")
    deterministic_inference: bool = Field(
        default=False, description="the server runs --enable-deterministic-inference (then seeds are sent)"
    )
    max_batch: int = Field(default=64, ge=1, description="requests per /generate body of a batched call")
    max_concurrency: int = Field(
        default=256, ge=1, description="/generate requests in flight at once (one per episode turn)"
    )
    # "disk" writes the gathered HF weights to staging_dir for /update_weights_from_disk; "distributed"
    # broadcasts them over NCCL (/update_weights_from_distributed, GPU only).
    weight_sync: Literal["disk", "distributed"] = Field(
        default="disk", description="rl weight push: via files in staging_dir, or an NCCL broadcast (GPU)"
    )
    staging_dir: str = Field(
        default="", description="disk push: a local directory the server can read; empty: <output>-weights"
    )
    nccl_address: str = nccl_address_field()
    nccl_port: int = nccl_port_field()
    server_ranks: int = server_ranks_field()
    bucket_mb: int = bucket_mb_field()
    # SGLang's third mode, in_place, keeps running requests in the batch: the flush after the last bucket
    # is then refused ("requests are still running"), so a push under load fails; it is not offered.
    pause_mode: Literal["retract", "abort"] = Field(
        default="retract",
        description="how SGLang pauses in-flight requests during a push: retract (they resume after it) or "
        "abort (they end)",
    )
    gpus: list[int] = Field(
        default_factory=list,
        description="GPUs (node indices) of the server (rl/launch.py or the stage's own launch); learner: the rest",
    )
    tp_size: int = Field(default=0, ge=0, description="launch: tensor-parallel size; 0: all of engine.gpus")
    mem_fraction_static: float = Field(
        default=0.85, gt=0.0, lt=1.0, description="launch: GPU memory share for weights and KV cache"
    )
    # Rollout fleet (engines/fleet.py): several SGLang servers behind one sglang-router
    servers: int = Field(
        default=1, ge=1, description="servers behind one sglang-router (1: one server, no router)"
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

    @property
    def fleet(self) -> bool:
        """Several servers behind a router (``engines/fleet.py``)."""
        return self.servers > 1 or bool(self.service_selector)


def build(cfg: SglangEngineConfig, ctx: BuildContext) -> Any:
    """A client of the fleet's router, of the server at ``base_url``, or of a server launched here on the
    context's checkpoint with its pixel budget (pinned by ``ctx.env`` to ``cfg.gpus`` when given)."""
    from paravt_core.engines.sglang_engine import SGLangEngine

    processor = ctx.load_processor()
    deterministic = cfg.deterministic_inference or ctx.seeded
    if cfg.fleet:
        from paravt_core.engines.fleet import FleetEngine

        return FleetEngine(
            cfg.base_url,
            worker_urls=cfg.worker_urls,
            metrics_url=cfg.router_metrics_url,
            routing=cfg.router_policy == "manual",
            processor=processor,
            deterministic_inference=deterministic,
        )
    if cfg.base_url:
        return SGLangEngine(
            cfg.base_url,
            processor=processor,
            max_batch_size=cfg.max_batch,
            deterministic_inference=deterministic,
        )
    from paravt_core.models import resolve_model_dir

    placement: dict[str, Any] = {}
    if ctx.env is not None:  # pinned to cfg.gpus: the server sees them as 0..n-1
        placement = {"env": ctx.env, "tp_size": cfg.tp_size or len(cfg.gpus), "base_gpu_id": 0}
    low, high = ctx.pixels or (None, None)
    return SGLangEngine.launch(
        str(resolve_model_dir(ctx.model)),  # --model-path opens local directories, not s3:// URIs
        port=cfg.port,
        processor=processor,
        max_pixels=high,
        min_pixels=low,
        deterministic_inference=deterministic,
        log_path=ctx.log_path,
        **({"dtype": ctx.dtype} if ctx.dtype is not None else {}),
        **placement,
    )


KIND = EngineKind(
    "sglang",
    SglangEngineConfig,
    build,
    frozenset({"rl", "agent"}),
    launches=True,
    refused={"eval": "eval has not been run against an SGLang server yet; use vllm, openai or transformers"},
)
