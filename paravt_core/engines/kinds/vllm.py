"""``engine.kind=vllm``: a vLLM server (``engines/vllm_engine.py``), at ``base_url`` or launched by the stage:
chat requests with exact token ids and log-probs back, and weight pushes from disk or over a process group; or a
fleet of them (``engines/vllm_fleet.py``), launched or running."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from paravt_core.config_base import StrictModel

from .base import (
    BuildContext,
    EngineKind,
    bucket_mb_field,
    nccl_address_field,
    nccl_port_field,
    server_ranks_field,
)


class VllmEngineConfig(StrictModel):
    kind: Literal["vllm"] = Field(default="vllm", description="a vLLM server (exact token ids and log-probs)")
    base_url: str = Field(
        default="",
        description="a running server (started with VLLM_SERVER_DEV_MODE=1 for rl); empty: launch one",
    )
    served_model: str = Field(
        default="", description="model name on the server; empty: the one it serves (GET /v1/models)"
    )
    max_concurrency: int = Field(default=256, ge=1, description="requests in flight at once")
    weight_sync: Literal["disk", "distributed"] = Field(
        default="disk",
        description="rl weight push: a directory in staging_dir, or over a process group (NCCL; gloo on CPU)",
    )
    staging_dir: str = Field(
        default="", description="disk push: a local directory the server can read; empty: <output>-weights"
    )
    nccl_address: str = nccl_address_field()
    nccl_port: int = nccl_port_field()
    server_ranks: int = server_ranks_field()
    bucket_mb: int = bucket_mb_field()
    pause_mode: Literal["wait", "abort"] = Field(
        default="wait",
        description="how vLLM pauses during a push: wait (in-flight requests finish first) or abort (they end)",
    )
    # the launch (base_url empty): vllm_engine.launch_command
    python: str = Field(default="", description="launch: the Python with vLLM installed; empty: this one")
    port: int = Field(default=8000, ge=1, le=65535, description="launch: the server's port")
    max_model_len: int = Field(default=32768, ge=256, description="launch: context length (--max-model-len)")
    max_images: int = Field(
        default=64, ge=1, description="launch: images per request (--limit-mm-per-prompt)"
    )
    gpus: list[int] = Field(
        default_factory=list,
        description="launch: GPUs (node indices) of the server; the learner's are refused",
    )
    tp_size: int = Field(
        default=0, ge=0, description="launch: tensor-parallel size; 0: all of engine.gpus (or 1)"
    )
    enforce_eager: bool = Field(
        default=False, description="launch: no CUDA graphs or compilation (CPU builds)"
    )
    cpu_kvcache_gib: int = Field(
        default=0, ge=0, description="launch on a CPU build: GiB of KV cache (VLLM_CPU_KVCACHE_SPACE); 0: GPU"
    )
    allowed_media_path: str = Field(
        default="",
        description="launch: requests may send its files as file:// URLs (--allowed-local-media-path); empty: none",
    )
    extra_args: list[str] = Field(default_factory=list, description="launch: more server arguments, as given")
    start_timeout_s: float = Field(default=900.0, gt=0.0, description="launch: seconds to wait for /health")
    servers: int = Field(
        default=1,
        ge=1,
        description="launch: servers of a fleet (engine.port + i each, engine.gpus split evenly)",
    )
    worker_urls: list[str] = Field(
        default_factory=list,
        description="a fleet of running servers (instead of base_url); requests routed by group",
    )

    @property
    def fleet(self) -> bool:
        return self.servers > 1 or bool(self.worker_urls)

    @model_validator(mode="after")
    def _one_fleet(self) -> VllmEngineConfig:
        if self.worker_urls and (self.base_url or self.servers > 1):
            raise ValueError(
                "engine.worker_urls names a fleet's servers: leave engine.base_url and engine.servers"
            )
        if self.servers > 1 and self.base_url:
            raise ValueError("engine.servers > 1 launches a fleet: leave engine.base_url empty")
        if self.fleet and self.weight_sync == "distributed":
            raise ValueError("a vLLM fleet takes weight pushes from disk: engine.weight_sync=disk")
        if self.servers > 1 and len(self.gpus) % self.servers:
            raise ValueError(
                f"engine.gpus {self.gpus} do not split evenly over engine.servers={self.servers}"
            )
        return self

    @model_validator(mode="after")
    def _launched_server_ranks(self) -> VllmEngineConfig:
        """A launched server's workers are its tensor-parallel ranks: the group push's size follows them
        unless set (and then it must agree)."""
        if self.weight_sync != "distributed" or self.base_url:
            return self
        workers = self.tp_size or max(len(self.gpus), 1)
        if "server_ranks" not in self.model_fields_set:
            self.server_ranks = workers
        elif self.server_ranks != workers:
            raise ValueError(
                f"engine.server_ranks={self.server_ranks}: the launched server has {workers} worker(s) "
                "(engine.tp_size, else engine.gpus)"
            )
        return self


def launch_plan(
    cfg: VllmEngineConfig, ctx: BuildContext, index: int = 0
) -> tuple[list[str], dict[str, str], str]:
    """(command, environment, base URL) of the server the stage starts for ``cfg`` (``index``: which of a
    fleet's, on ``engine.port + index`` and its share of ``engine.gpus``): the context's checkpoint (a local
    directory), its dtype and pixel budget, pinned by ``ctx.env`` to ``cfg.gpus`` when given."""
    import sys

    from paravt_core.engines.vllm_engine import launch_command, server_env
    from paravt_core.models import resolve_model_dir

    low, high = ctx.pixels or (None, None)
    share = len(cfg.gpus) // cfg.servers
    gpus = cfg.gpus[index * share : (index + 1) * share]
    port = cfg.port + index
    command = launch_command(
        str(resolve_model_dir(ctx.model)),  # the server opens local directories, not s3:// URIs
        python=cfg.python or sys.executable,
        port=port,
        max_model_len=cfg.max_model_len,
        max_images=cfg.max_images,
        max_pixels=high,
        min_pixels=low,
        dtype=ctx.dtype,
        tp_size=cfg.tp_size or max(len(gpus), 1),
        enforce_eager=cfg.enforce_eager,
        weight_transfer=cfg.weight_sync == "distributed",
        allowed_media_path=cfg.allowed_media_path or None,
        extra_args=cfg.extra_args,
    )
    env = server_env(ctx.env, cpu_kvcache_gib=cfg.cpu_kvcache_gib)
    if ctx.env is not None and cfg.servers > 1 and gpus:
        # the stage pinned all of engine.gpus: this server sees its own share
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
    return command, env, f"http://127.0.0.1:{port}"


def build(cfg: VllmEngineConfig, ctx: BuildContext) -> Any:
    from paravt_core.engines.vllm_engine import VllmEngine, served_model

    timeout = {"timeout_s": ctx.timeout_s} if ctx.timeout_s is not None else {}
    kwargs = {"processor": ctx.load_processor(), "max_concurrency": cfg.max_concurrency, **timeout}
    if cfg.fleet:
        from paravt_core.engines.vllm_fleet import VllmFleet

        if cfg.worker_urls:
            members = [VllmEngine(u, cfg.served_model or served_model(u), **kwargs) for u in cfg.worker_urls]
            return VllmFleet(members)
        plans = [launch_plan(cfg, ctx, i) for i in range(cfg.servers)]
        logs = [ctx.log_path and ctx.log_path.removesuffix(".log") + f"-{i}.log" for i in range(cfg.servers)]
        return VllmFleet.launch(plans, log_paths=logs, start_timeout_s=cfg.start_timeout_s, **kwargs)
    if not cfg.base_url:
        command, env, base_url = launch_plan(cfg, ctx)
        return VllmEngine.launch(
            command, base_url, env=env, log_path=ctx.log_path, start_timeout_s=cfg.start_timeout_s, **kwargs
        )
    return VllmEngine(cfg.base_url, cfg.served_model or served_model(cfg.base_url), **kwargs)


KIND = EngineKind(
    "vllm", VllmEngineConfig, build, frozenset({"rl", "eval", "agent"}), launches=True, video_urls=True
)
