"""What every engine kind shares: the context a stage builds its engine in, and the record a kind registers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from paravt_core.config_base import StrictModel

STAGES = ("rl", "eval", "agent")  # the places that build engines: rollouts, evaluation, `paravt agent run`


@dataclass(frozen=True)
class BuildContext:
    """What the stage knows when it builds its engine (the config says which engine and how)."""

    stage: str  # one of STAGES
    model: str  # the checkpoint the engine serves (URI); a server's client loads only its processor from it
    purpose: str = "model"  # what the model is for, in load errors ("rollout engine", "evaluated model")
    processor: Any = None  # the HF processor when the stage has one loaded (RL: the policy's)
    device: str = "cpu"  # in-process engines: the stage's device when the engine's own is unset
    dtype: Any = None  # in-process engines and launched servers: weight dtype (None: the checkpoint's)
    pixels: tuple[int, int] | None = None  # (min, max) pixel budget of the encoder: a launched server's
    timeout_s: float | None = None  # per-request client timeout; None: the engine's default
    env: dict[str, str] | None = None  # a launched server's environment (its GPUs); None: ours
    log_path: str | None = None  # a launched server's log file; None: not kept
    seeded: bool = False  # the caller sends per-request seeds (a server that needs a flag for them gets it)

    def load_processor(self) -> Any:
        """The context's processor, else the one saved beside ``model`` (never downloaded)."""
        if self.processor is not None:
            return self.processor
        from transformers import AutoProcessor

        from paravt_core.models import resolve_model_dir

        return AutoProcessor.from_pretrained(resolve_model_dir(self.model), local_files_only=True)


@dataclass(frozen=True)
class EngineKind:
    """One engine kind as the registry knows it (``engines.registry``): its config class (the ``kind`` literal
    is the name) and how to build it. ``stages`` says where it can serve; ``refused`` why not elsewhere."""

    name: str
    config: type[StrictModel]
    build: Callable[[Any, BuildContext], Any]  # (config, context) -> Engine
    stages: frozenset[str]
    refused: dict[str, str] = field(default_factory=dict)  # stage -> one line why this kind cannot serve it
    in_process: bool = False  # the engine runs in the stage's own process (no server)
    launches: bool = False  # a server kind whose stage starts the server itself when base_url is empty
    video_urls: bool = False  # its server decodes a whole video sent as a file:// video_url part itself

    def needs_url(self, config: Any) -> bool:
        """``config`` names no server to talk to and the stage cannot start one."""
        return not self.in_process and not self.launches and not getattr(config, "base_url", "")


# The push over a process group (``weight_sync=distributed``, ``rl.weight_sync.NcclSync``): the same fields on
# every server kind that takes it, each made afresh per config class.
def nccl_address_field() -> Any:
    return Field(
        default="127.0.0.1",
        description="distributed push: address of the learner's rank 0 as the server sees it",
    )


def nccl_port_field() -> Any:
    return Field(default=29600, ge=1, le=65535, description="distributed push: the process group's port")


def server_ranks_field() -> Any:
    return Field(default=1, ge=1, description="distributed push: the server's workers (tp x dp; GPUs)")


def bucket_mb_field() -> Any:
    return Field(default=1024, ge=1, description="distributed push: MiB of tensors per update request")
