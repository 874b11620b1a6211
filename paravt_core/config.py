"""Typed stage configs: YAML file + dotted ``key=value`` overrides, unknown keys rejected.

Every stage has one pydantic model. ``load_config(DataConfig, "c.yaml", ["extract.workers=4"])``
reads the YAML, applies the overrides (values parsed as YAML scalars, so ``4`` is an int and
``[a, b]`` a list), and validates. Any unknown key, at any depth, is an error that lists the
valid names at that level.
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from paravt_core.config_base import ConfigError, StrictModel, union_member, union_models
from paravt_core.tracking.config import TrackingConfig

C = TypeVar("C", bound="StrictModel")


# ---------------------------------------------------------------------------------------------
# Data stage
# ---------------------------------------------------------------------------------------------


class DownloadConfig(StrictModel):
    """Where the media archives and the parquets come from.

    A source is a Hugging Face dataset repo id (``hf://ParaVT/ParaVT-Source`` or a bare
    ``owner/name``), a local directory (used in place), or an ``s3://`` prefix. Include patterns are
    fnmatch patterns on paths relative to the source (``museg/charades*`` = only the Charades zips).
    An empty ``media_source`` downloads no archives: ``extract.root`` must then already hold the media.
    """

    media_source: str = Field(
        default="hf://ParaVT/ParaVT-Source",
        description="media archives: hf://repo, owner/name, local dir or s3:// prefix; empty: no download",
    )
    parquet_source: str = Field(
        default="hf://ParaVT/ParaVT-Parquet",
        description="training parquets: hf://repo, owner/name, local dir or s3:// prefix",
    )
    media_include: list[str] = Field(
        default_factory=lambda: ["*.zip"], description="fnmatch patterns of the media archives to fetch"
    )
    parquet_include: list[str] = Field(
        default_factory=lambda: ["*.parquet"], description="fnmatch patterns of the parquets to fetch"
    )
    revision: str | None = Field(default=None, description="hub revision (branch, tag, commit); null: main")
    max_workers: int = Field(default=4, ge=1, description="parallel file downloads")


class ExtractConfig(StrictModel):
    root: str = Field(
        default="", description="extraction root (one tree for every archive); empty: <work_dir>/media"
    )
    workers: int = Field(default=2, ge=1, description="archives extracted in parallel")
    # Zip-bomb bounds per archive, checked on the central directory before anything is written: total
    # uncompressed bytes, and uncompressed / archive size (media barely compresses; ParaVT zips are < 10 GB).
    max_archive_bytes: int = Field(
        default=64 << 30, ge=1, description="zip-bomb guard: most uncompressed bytes one archive may hold"
    )
    max_compression_ratio: float = Field(
        default=100.0, gt=0, description="zip-bomb guard: most uncompressed / compressed size of one archive"
    )


class MaterializeConfig(StrictModel):
    media_prefix: str = Field(
        default="",
        description="where sentinel paths point: empty = the local extraction root; s3:// = URIs under it",
    )
    upload_media: bool = Field(
        default=True, description="with an s3:// media_prefix, upload the extracted media there (once)"
    )
    batch_rows: int = Field(default=16384, ge=1, description="parquet rows rewritten per batch")
    threads: int = Field(default=2, ge=1, description="batches processed concurrently per file")


class ValidateConfig(StrictModel):
    check_files_exist: bool = Field(default=True, description="check that every referenced media file exists")
    check_structure: bool = Field(
        default=True, description="decode and shape-check messages / extra_info (off: check paths only)"
    )
    max_bad_fraction: float = Field(
        default=0.005,
        ge=0.0,
        le=1.0,
        description="fail the stage when (missing + invalid rows) / rows exceeds this",
    )


class DataConfig(StrictModel):
    """``paravt data``: download -> extract -> materialize -> validate -> audit."""

    work_dir: str = Field(
        default="./paravt-work", description="local scratch: downloads and the extracted media root"
    )
    output: str = Field(
        default="./paravt-work/data", min_length=1, description="URI of the materialized parquets + audit"
    )
    download: DownloadConfig = Field(
        default_factory=DownloadConfig, description="where media archives and parquets come from"
    )
    extract: ExtractConfig = Field(default_factory=ExtractConfig, description="unpacking the media archives")
    materialize: MaterializeConfig = Field(
        default_factory=MaterializeConfig, description="rewriting media references in the parquets"
    )
    validate_: ValidateConfig = Field(
        default_factory=ValidateConfig, alias="validate", description="row checks and the bad-row gate"
    )

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)


# ---------------------------------------------------------------------------------------------
# RL recipe (the ``paravt:`` block, docs/method.md §5) and the GRPO algorithm knobs
# ---------------------------------------------------------------------------------------------

RecipeName = Literal["para_grpo", "vanilla_grpo"]


class ConstrainedConfig(StrictModel):
    think_prefix: bool = Field(
        default=True, description='force "<think>\\n" at the start of every main-agent turn'
    )
    answer_suffix: bool = Field(
        default=True, description="answer-closure weights in the format reward's base part"
    )


class GatingConfig(StrictModel):
    nframes_gating: bool = Field(
        default=True, description="K ~ Uniform(choices) overview frames per prompt, shared by its group"
    )
    choices: list[int] = Field(
        default_factory=lambda: [4, 8, 16, 32, 64], min_length=1, description="frame counts K is drawn from"
    )
    default_frames: int = Field(default=64, ge=1, description="K when gating is off")
    seed: int = Field(default=0, description="with the row id, decides every K (stable across processes)")

    @field_validator("choices")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if any(k < 1 for k in value):
            raise ValueError(f"every frame count must be >= 1, got {value}")
        return value


class AnchoringConfig(StrictModel):
    weight: float = Field(
        default=0.5, description="lambda_anchor: weight of the format reward's anchor part (structural tags)"
    )
    unclosed_penalty: bool = Field(
        default=True, description="anchor's -0.3 x lambda for a think block never closed (off: ablation)"
    )


class JudgeConfig(StrictModel):
    """LLM judge knobs; the endpoint, key and model come from LLM_JUDGE_* environment variables."""

    timeout_s: float = Field(default=10.0, gt=0.0, description="seconds per HTTP attempt")
    max_retries: int = Field(default=2, ge=0, description="retries after a failed attempt")
    backoff_s: float = Field(default=0.5, ge=0.0, description="first retry delay in seconds")
    deadline_s: float = Field(
        default=30.0, gt=0.0, description="seconds for a whole verdict, retries included"
    )


class RewardConfig(StrictModel):
    mode: Literal["f1", "exact", "llm"] = Field(
        default="f1", description="open-ended answers: token F1, exact match (else 0), or the LLM judge"
    )
    format_weight: float = Field(default=1.0, description="weight of the format reward")
    tool_weight: float = Field(
        default=1.0, ge=0.0, description="multiplies R_tool in the total (0: no R_tool)"
    )
    timeout_s: float = Field(
        default=60.0, gt=0.0, description="seconds for one sample's reward; beyond: 0, counted"
    )
    degenerate_im_starts: int = Field(
        default=5, ge=1, description="degeneration guard: this many <|im_start|> ... (reward 0)"
    )
    degenerate_max_chars: int = Field(
        default=300, ge=0, description="... within fewer characters than this (reward 0)"
    )
    judge: JudgeConfig = Field(default_factory=JudgeConfig, description="the LLM judge (mode=llm)")

    @model_validator(mode="after")
    def _judge_inside_reward_timeout(self) -> RewardConfig:
        if self.judge.deadline_s >= self.timeout_s:
            raise ValueError(
                f"reward.judge.deadline_s ({self.judge.deadline_s}) must be below reward.timeout_s "
                f"({self.timeout_s}), so a slow judge falls back to F1 instead of zeroing the sample"
            )
        return self


# docs/method.md §5 table: what each preset sets. Keys given explicitly (YAML or dotted overrides) win.
RECIPE_PRESETS: dict[str, dict[str, Any]] = {
    "para_grpo": {
        "constrained": {"think_prefix": True, "answer_suffix": True},
        "gating": {"nframes_gating": True},
        "anchoring": {"weight": 0.5},
        "reward": {"mode": "f1", "format_weight": 1.0},
    },
    "vanilla_grpo": {
        "constrained": {"think_prefix": False, "answer_suffix": False},
        "gating": {"nframes_gating": False},
        "anchoring": {"weight": 0.0},
        "reward": {"mode": "f1", "format_weight": 1.0},
    },
}


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


class ParavtRecipe(StrictModel):
    """The ``paravt:`` block: ``preset`` fills docs/method.md §5's column, every knob stays overridable
    (``paravt.preset=vanilla_grpo paravt.anchoring.weight=0.2``)."""

    preset: RecipeName = Field(
        default="para_grpo",
        description="fills the knobs below (explicit keys win): PARA-GRPO or vanilla GRPO",
    )
    constrained: ConstrainedConfig = Field(
        default_factory=ConstrainedConfig, description="constrained generation: think prefix, answer suffix"
    )
    gating: GatingConfig = Field(default_factory=GatingConfig, description="nFrames gating of the overview")
    anchoring: AnchoringConfig = Field(
        default_factory=AnchoringConfig, description="format-reward anchoring on the structural tags"
    )
    reward: RewardConfig = Field(default_factory=RewardConfig, description="how a rollout is scored")

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        preset = data.get("preset", "para_grpo")
        if preset not in RECIPE_PRESETS:
            return data  # the Literal check reports it
        return _deep_merge(RECIPE_PRESETS[preset], data)

    @classmethod
    def para_grpo(cls, **overrides: Any) -> ParavtRecipe:
        return cls.model_validate({"preset": "para_grpo", **overrides})

    @classmethod
    def vanilla_grpo(cls, **overrides: Any) -> ParavtRecipe:
        return cls.model_validate({"preset": "vanilla_grpo", **overrides})


class AdvantageConfig(StrictModel):
    """docs/method.md §5 advantages: R' = clip((R + bias) * scale, +-clip), group-normalized, per-token KL reward,
    reward-to-go (gamma = lambda = 1), token-weighted batch normalization."""

    reward_bias: float = Field(default=-0.2, description="added to every reward before scaling")
    reward_scale: float = Field(default=10.0, description="multiplies the biased reward")
    reward_clip: float = Field(default=20.0, gt=0.0, description="shaped reward clipped to +-this")
    group_eps: float = Field(default=1e-5, gt=0.0, description="added to a group's std when normalizing")
    kl_ctl: float = Field(
        default=0.01, ge=0.0, description="per-token KL penalty coefficient (vs the reference)"
    )
    kl_clamp: float = Field(
        default=10.0, gt=0.0, description="per-token log-ratio clamped to +-this before the penalty"
    )
    batch_norm: bool = Field(
        default=True, description="token-weighted normalization of advantages over the batch"
    )
    batch_eps: float = Field(default=1e-5, gt=0.0, description="added to the batch std when normalizing")


class PolicyLossConfig(StrictModel):
    """docs/method.md §5 decoupled PPO loss."""

    clip_eps: float = Field(default=0.2, gt=0.0, lt=1.0, description="PPO ratio clipped to 1 +- this")
    behav_weight_cap: float | None = Field(
        default=5.0,
        gt=1.0,
        description="tokens whose proximal/behaviour weight exceeds this are dropped; null: keep all",
    )


# ---------------------------------------------------------------------------------------------
# SFT stage
# ---------------------------------------------------------------------------------------------


class TrainConfig(StrictModel):
    """The training core shared by SFT and RL (``paravt_core.train``)."""

    freeze_vision: bool = Field(
        default=True, description="vision tower not trained (the published model updated the LLM only)"
    )
    dist_timeout_s: float = Field(default=1800.0, gt=0, description="collective timeout of the process group")
    follower_wait_s: float = Field(
        default=7200.0, gt=0, description="RL: how long ranks 1..N wait on the store for rank 0's rollout"
    )
    logprob_chunk: int = Field(
        default=1024, ge=1, description="positions per lm_head block in log-prob/loss (no full fp32 logits)"
    )
    activation_checkpointing: bool = Field(
        default=True, description="RL learner: recompute decoder layers in the backward (SFT: model.*)"
    )
    compile_layers: bool = Field(
        default=False,
        description="torch.compile each decoder layer (regional compile); off until a GPU run shows a gain",
    )


class LaunchConfig(StrictModel):
    """How the pipeline runs a training stage: one node (in-pod ``torchrun``) or a multi-node job."""

    nodes: int = Field(
        default=1, ge=1, description="nodes; >1: a Kubeflow Trainer job, one torchrun per node"
    )
    gpus_per_node: int = Field(
        default=8, ge=1, description="GPUs (torchrun processes) per node of a multi-node job"
    )
    api: Literal["trainjob", "pytorchjob"] = Field(
        default="trainjob", description="trainjob: trainer.kubeflow.org/v1alpha1; pytorchjob: kubeflow.org/v1"
    )
    runtime: str = Field(
        default="torch-distributed", description="ClusterTrainingRuntime the TrainJob refers to"
    )
    poll_s: float = Field(default=15.0, gt=0, description="seconds between status reads of the job")
    retries: int = Field(
        default=2,
        ge=0,
        description="in-pod reruns after a crash a rerun can fix, each from the newest checkpoint",
    )
    retry_backoff_s: float = Field(
        default=60.0, ge=0, description="seconds before the first in-pod rerun, doubled for each next one"
    )
    pending_timeout_s: float = Field(
        default=1800.0,
        ge=0,
        description="delete the job (the step fails) when not all nodes run this long; 0: never",
    )
    fabric_resources: dict[str, int] = Field(
        default_factory=dict,
        description="RDMA devices per node, e.g. {vpc.amazonaws.com/efa: 32} (AWS EFA), {rdma/ib: 8} (InfiniBand)",
    )
    ipc_lock: bool = Field(
        default=False,
        description="add IPC_LOCK to the nodes (RDMA pins memory); needs a privileged namespace",
    )
    node_env: dict[str, str] = Field(
        default_factory=dict,
        description="extra env on every node: the fabric's NCCL_* / FI_* settings; fabric_resources needs NCCL_NET (IB, Libfabric)",
    )
    queue_name: str = Field(
        default="", description="Kueue LocalQueue: sets the kueue.x-k8s.io/queue-name label"
    )
    gang: bool = Field(
        default=False,
        description="all nodes at once: TrainJob names the TrainingRuntime `runtime`; PyTorchJob sets minAvailable",
    )
    cluster_domain: str = Field(
        default="cluster.local",
        description="the cluster's DNS domain (kubelet --cluster-domain, e.g. cluster.local), in rank 0's name",
    )
    rollout_wait_s: float = Field(
        default=300.0,
        ge=0,
        description="multi-node RL: how long the step waits for engine.base_url's /health before it creates the job",
    )
    rollout_deployment: str = Field(
        default="",
        description='multi-node RL: Deployment of the rollout server scaled to 1 before the /health wait; "": none',
    )
    queue_timeout_s: float = Field(
        default=0.0,
        ge=0,
        description="delete the job when still suspended (queued by Kueue) this long; 0: wait; then pending_timeout_s",
    )

    @field_validator("cluster_domain")
    @classmethod
    def _domain_only(cls, value: str) -> str:
        # The rank-0 name is <pod>.<service>.<namespace>.svc.<domain> (Kubernetes DNS spec, "Records for
        # Services"); "svc.cluster.local" or a dotted/empty label would make it a name no resolver answers.
        labels = value.split(".")
        if (
            value.startswith(".")
            or "svc" in labels
            or not all(re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", x) for x in labels)
        ):
            raise ValueError(
                f"launch.cluster_domain {value!r}: the domain alone, e.g. cluster.local (no leading dot, no svc.)"
            )
        return value

    @model_validator(mode="after")
    def _fabric_names_its_nccl_net(self) -> LaunchConfig:
        # NCCL initialises the first network plugin that works, its socket transport last, so a missing
        # plugin or device silently means TCP. With NCCL_NET only the plugin of that name (case-insensitive)
        # may initialise, and init fails when it does not (NCCL v2.30.7 src/plugin/net.cc, ncclNetInit).
        if self.fabric_resources and not self.node_env.get("NCCL_NET", "").strip():
            raise ValueError(
                f"launch.fabric_resources ({', '.join(self.fabric_resources)}) needs launch.node_env.NCCL_NET, "
                "else NCCL falls back to TCP silently: IB for InfiniBand, Libfabric for AWS EFA (aws-ofi-nccl)"
            )
        return self


# The SDPA kernel of packed_sdpa's calls (paravt_core/train/attention.py). flash by default: torch 2.11+ on
# sm90/sm100 with cuDNN > 9.15 puts cuDNN first, which builds an execution plan per new sample length.
SdpaBackend = Literal["flash", "auto", "cudnn", "efficient", "math"]
DEFAULT_SDPA_BACKEND: SdpaBackend = "flash"
# one line of --help (tests/unit/test_config_descriptions.py): the default is not yet measured on a GPU
SDPA_BACKEND_HELP = (
    "packed_sdpa's SDPA kernels: flash = flash, then efficient, math, never cuDNN; auto = torch's; "
    "a GPU run may change it"
)


class SftModelConfig(StrictModel):
    uri: str = Field(
        default="Qwen/Qwen3-VL-8B-Instruct",
        description="checkpoint to start from: local dir, s3:// prefix or hub id",
    )
    attn_implementation: str = Field(
        default="packed_sdpa",
        description='"sdpa" (masked [L, L] per pack), "packed_sdpa" (per sample: skips cross-sample blocks), '
        '"flash_attention_2"',
    )
    sdpa_backend: SdpaBackend = Field(default=DEFAULT_SDPA_BACKEND, description=SDPA_BACKEND_HELP)
    gradient_checkpointing: bool = Field(
        default=True, description="recompute activations in the backward pass"
    )
    bf16: bool = Field(
        default=True,
        description="bf16 compute over float32 masters and reductions (GPU; CPU: float32); final/ in bf16",
    )


class SftDataConfig(StrictModel):
    input: str = Field(
        default="./paravt-work/data",
        description="output URI of `paravt data` (with its _COMPLETE marker); rows are <input>/sft/*.parquet",
    )
    include: list[str] = Field(
        default_factory=lambda: ["*.parquet"], description="fnmatch patterns on the parquet file names"
    )
    seed: int = Field(default=0, description="row order: a fresh permutation per epoch from (seed, epoch)")
    num_workers: int = Field(
        default=4, ge=0, description="processes turning rows into model inputs (0: in-process)"
    )
    prefetch_factor: int = Field(default=4, ge=1, description="samples in flight per worker")
    max_bad_fraction: float = Field(
        default=0.05, ge=0.0, le=1.0, description="fail the stage when dropped rows / rows seen exceeds this"
    )
    bad_gate_min_rows: int = Field(
        default=200, ge=1, description="... checked once this many rows were seen (and always at the end)"
    )


class SftMediaConfig(StrictModel):
    video_fps: float = Field(default=1.0, gt=0, description="frames sampled per second of video")
    video_min_frames: int = Field(default=4, ge=1, description="fewest frames per video")
    video_max_frames: int = Field(default=64, ge=1, description="most frames per video")
    video_min_pixels: int = Field(default=784, ge=1, description="smallest video frame, in pixels")
    video_max_pixels: int = Field(default=50176, ge=1, description="pixel budget per video frame (224 x 224)")
    image_min_pixels: int = Field(default=784, ge=1, description="smallest image, in pixels")
    image_max_pixels: int = Field(default=50176, ge=1, description="pixel budget per image")


class SftPackingConfig(StrictModel):
    length: int = Field(
        default=8192, ge=16, description="tokens per packed sequence; longer rows are dropped"
    )
    max_open: int = Field(
        default=4, ge=1, description="open sequences of the first-fit packer (1 = next-fit)"
    )
    close_slack: int = Field(default=64, ge=0, description="a sequence this close to full is emitted at once")


class SftTrainerConfig(StrictModel):
    steps: int = Field(default=1500, ge=1, description="optimizer steps")
    grad_accum: int = Field(default=4, ge=1, description="packed sequences per rank per optimizer step")
    lr: float = Field(default=2e-5, gt=0, description="peak learning rate (AdamW)")
    warmup_ratio: float = Field(
        default=0.05, ge=0.0, lt=1.0, description="linear warmup share of the steps, then cosine to 0"
    )
    weight_decay: float = Field(
        default=0.01, ge=0.0, description="AdamW decay on matrices; norms and biases are not decayed"
    )
    betas: tuple[float, float] = Field(default=(0.9, 0.999), description="AdamW betas")
    eps: float = Field(default=1e-8, description="AdamW epsilon")
    max_grad_norm: float = Field(default=1.0, gt=0, description="gradient norm clipping")
    seed: int = Field(default=0, description="seed of the random generators (plus the rank) on every process")


class SftCheckpointConfig(StrictModel):
    every: int = Field(
        default=100, ge=1, description="steps between checkpoints (the last step always saves)"
    )
    keep_last: int = Field(default=2, ge=1, description="complete checkpoints kept; older ones are deleted")


class SftConfig(StrictModel):
    """``paravt sft``: packed SFT of Qwen3-VL on the data stage's SFT rows (docs/method.md §6)."""

    output: str = Field(
        default="./paravt-work/sft",
        min_length=1,
        description="URI: checkpoints/, final/ (HF checkpoint), metrics, plot",
    )
    work_dir: str = Field(
        default="./paravt-work/sft-tmp", description="local scratch (staging of s3 checkpoints)"
    )
    model: SftModelConfig = Field(
        default_factory=SftModelConfig, description="the starting checkpoint (model=URI sets model.uri)"
    )
    data: SftDataConfig = Field(
        default_factory=SftDataConfig, description="the SFT rows (data=URI sets data.input)"
    )
    media: SftMediaConfig = Field(
        default_factory=SftMediaConfig, description="frame sampling and pixel budgets"
    )
    packing: SftPackingConfig = Field(default_factory=SftPackingConfig, description="sequence packing")
    trainer: SftTrainerConfig = Field(default_factory=SftTrainerConfig, description="optimizer and schedule")
    checkpoint: SftCheckpointConfig = Field(
        default_factory=SftCheckpointConfig, description="checkpoint cadence and retention"
    )
    train: TrainConfig = Field(default_factory=TrainConfig, description="shared training core options")
    launch: LaunchConfig = Field(default_factory=LaunchConfig, description="one node or a multi-node job")
    tracking: TrackingConfig = Field(
        default_factory=TrackingConfig,
        description="experiment tracking (TensorBoard, MLflow, W&B) and pod-log progress",
    )

    # ``model=URI`` / ``data=URI`` set only these keys (the section's other YAML keys stay); ``steps`` is
    # the RL stage's name for the same thing as ``trainer.steps``.
    SHORTHANDS: ClassVar[dict[str, str]] = {
        "model": "model.uri",
        "data": "data.input",
        "steps": "trainer.steps",
    }

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        """``model=URI`` and ``data=URI`` as in the RL and eval stages: shorthands of ``model.uri`` and
        ``data.input``."""
        if isinstance(data, dict):
            data = dict(data)
            if isinstance(data.get("model"), str):
                data["model"] = {"uri": data["model"]}
            if isinstance(data.get("data"), str):
                data["data"] = {"input": data["data"]}
        return data


# ---------------------------------------------------------------------------------------------
# Stage registry
# ---------------------------------------------------------------------------------------------

# Stage configs that embed the agent's ``AgentConfig`` live with their stage (``paravt_core.rl.config``):
# importing the agent here would make every stage import it, the data stage included. They are
# importable from this module too (``from paravt_core.config import RlConfig``, resolved on first use).
# ---------------------------------------------------------------------------------------------
# Report stage
# ---------------------------------------------------------------------------------------------


class TrendConfig(StrictModel):
    """Nightly eval trend. This night's eval outputs are ``<results_prefix>/<night>/<benchmark>/``; every
    night's summary is ``<results_prefix>/nights/<night>.json``. Empty ``results_prefix``: no trend."""

    results_prefix: str = Field(
        default="", description="URI holding <night>/<benchmark>/ eval outputs and nights/; empty: no trend"
    )
    night: str = Field(
        default="",
        description="YYYY-MM-DD; empty: the night run_id started (nights/*.json), else today (UTC)",
    )
    run_id: str = Field(default="", description="the KFP run of this night")
    checkpoint: str = Field(
        default="", description="the model URI evaluated this night (shown in the report)"
    )
    benchmarks: list[str] = Field(default_factory=list, description="what this night should have evaluated")
    state: str = Field(
        default="",
        description="the run's final state as KFP reports it (SUCCEEDED, FAILED, CANCELED); empty: from the benchmarks",
    )
    error: str = Field(default="", description="the run's error message, if it failed (shown in the report)")
    max_nights: int = Field(default=30, ge=2, description="nights shown in the plot and the table")


class ReportConfig(StrictModel):
    """``paravt report``: the eval table of a run and, for nightly evals, the trend over earlier nights."""

    output: str = Field(
        default="./paravt-work/report",
        min_length=1,
        description="URI of report.html, report.md, trend.png, metrics.json",
    )
    title: str = Field(default="ParaVT report", description="the report's heading")
    eval_outputs: list[str] = Field(default_factory=list, description="eval stage outputs (URIs) to tabulate")
    sft_output: str = Field(
        default="", description="SFT stage output (URI) whose metrics.json and plots the report shows"
    )
    rl_output: str = Field(
        default="", description="RL stage output (URI) whose metrics.json and plots the report shows"
    )
    trend: TrendConfig = Field(default_factory=TrendConfig, description="nightly eval trend")


_STAGE_MODULES = {"RlConfig": "paravt_core.rl.config", "EvalConfig": "paravt_core.eval.config"}
STAGE_CONFIGS: dict[str, str] = {
    "data": "DataConfig",
    "sft": "SftConfig",
    "rl": "RlConfig",
    "report": "ReportConfig",
    "eval": "EvalConfig",
}


def stage_config(stage: str) -> type[StrictModel]:
    """The config model of ``stage`` (``STAGE_CONFIGS`` names it)."""
    return getattr(sys.modules[__name__], STAGE_CONFIGS[stage])


def __getattr__(name: str) -> Any:
    if name in _STAGE_MODULES:
        import importlib

        return getattr(importlib.import_module(_STAGE_MODULES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def parse_override(item: str) -> tuple[list[str], Any]:
    """``"a.b=4"`` -> (["a", "b"], 4). The value is parsed as a YAML scalar or flow collection."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} is not of the form key.path=value")
    key, raw = item.split("=", 1)
    parts = [p for p in key.strip().split(".")]
    if not key.strip() or any(not p for p in parts):
        raise ConfigError(f"override {item!r} has an empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return parts, value


def _field_names(model: type[BaseModel]) -> dict[str, str]:
    """Accepted key -> field name (aliases accepted as keys)."""
    names: dict[str, str] = {}
    for name, info in model.model_fields.items():
        names[info.alias or name] = name
        names[name] = name
    return names


def _check_keys(model: type[BaseModel], data: Any, where: str) -> None:
    """Raise ConfigError naming the valid keys for the first unknown key, recursively."""
    if not isinstance(data, dict):
        return
    names = _field_names(model)
    for key, value in data.items():
        if key not in names:
            valid = sorted({info.alias or n for n, info in model.model_fields.items()})
            path = f"{where}.{key}" if where else key
            near = difflib.get_close_matches(str(key), valid, n=1)
            hint = f"; did you mean {f'{where}.{near[0]}' if where else near[0]!r}?" if near else ""
            raise ConfigError(f"unknown config key {path!r}{hint}; valid keys here: {', '.join(valid)}")
        info = model.model_fields[names[key]]
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            _check_keys(annotation, value, f"{where}.{key}" if where else key)
        elif union_models(annotation) and isinstance(value, dict):
            _check_union_keys(union_models(annotation), info, value, f"{where}.{key}" if where else key)


def _check_union_keys(models: list[type[BaseModel]], info: Any, data: dict[str, Any], where: str) -> None:
    """The keys of a section chosen by its ``kind`` (default: the field's default's): a key of another kind
    is named as such, so ``engine.base_url`` without ``engine.kind`` says which kinds have it."""
    kind = data.get("kind", getattr(info.get_default(call_default_factory=True), "kind", None))
    chosen = union_member(models, kind)
    if chosen is None:
        return  # an unknown kind: the section's validation names the kinds there are
    for key in data:
        if key in _field_names(chosen):
            continue
        owners = [m.model_fields["kind"].default for m in models if key in _field_names(m)]
        if owners:
            raise ConfigError(
                f"{where}.{key} is a field of {where}.kind={' / '.join(owners)}, not of {where}.kind={kind}: "
                f"set {where}.kind, or replace the section whole ('{where}={{kind: {kind}}}')"
            )
    _check_keys(chosen, data, where)


def _set_path(data: dict[str, Any], path: list[str], value: Any) -> None:
    node = data
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[path[-1]] = value


def _move_path(data: dict[str, Any], src: list[str], dst: list[str]) -> None:
    """A non-mapping value at ``src`` moves to ``dst`` (parents of ``src`` left empty are removed)."""
    parents = [data]
    for part in src[:-1]:
        child = parents[-1].get(part)
        if not isinstance(child, dict):
            return
        parents.append(child)
    if src[-1] not in parents[-1] or isinstance(parents[-1][src[-1]], dict):
        return
    value = parents[-1].pop(src[-1])
    for part, parent in zip(reversed(src[:-1]), reversed(parents[:-1]), strict=True):
        if not parent[part]:
            del parent[part]
    node: Any = data
    for part in dst:
        node = node.get(part) if isinstance(node, dict) else None
    if node is not None and node != value:
        raise ConfigError(
            f"{'.'.join(src)}: {value!r} and {'.'.join(dst)}: {node!r} are one field set twice; keep one"
        )
    _set_path(data, dst, value)


def load_config(model: type[C], path: str | Path | None = None, overrides: list[str] | None = None) -> C:
    """Build a validated config from an optional YAML file and dotted overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        text = Path(path).read_text()
        try:
            loaded = yaml.safe_load(text) or {}
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            problem = getattr(err, "problem", None) or type(err).__name__
            raise ConfigError(f"{path}: not valid YAML{where}: {problem}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: top level must be a mapping, got {type(loaded).__name__}")
        data = loaded
    shorthands: dict[str, str] = getattr(model, "SHORTHANDS", {})
    for short, full in shorthands.items():  # in the YAML file
        _move_path(data, short.split("."), full.split("."))
    for item in overrides or []:
        keys, value = parse_override(item)
        if ".".join(keys) in shorthands and not isinstance(value, dict):
            keys = shorthands[".".join(keys)].split(".")
        _set_path(data, keys, value)
    _check_keys(model, data, "")
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(validation_message(err)) from err


def validation_message(err: ValidationError) -> str:
    """pydantic's report as one line: ``key.path: what is wrong (got value)`` per problem."""
    problems = []
    for e in err.errors(include_url=False):
        loc = ".".join(str(p) for p in e["loc"] if not str(p).startswith("function-"))
        msg = e["msg"].removeprefix("Value error, ")
        got = "" if e["type"] in ("missing", "model_type") else f" (got {e['input']!r})"
        problems.append(f"{loc or 'config'}: {msg}{got}" if loc else f"{msg}{got}")
    return "invalid value: " + "; ".join(problems)


def config_to_dict(cfg: BaseModel) -> dict[str, Any]:
    return cfg.model_dump(mode="json", by_alias=True)


def config_to_yaml(cfg: BaseModel) -> str:
    return yaml.safe_dump(config_to_dict(cfg), sort_keys=False)
