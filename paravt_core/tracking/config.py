"""The ``tracking:`` block every stage config shares (SFT, RL, eval): which experiment trackers get the
run's numbers, how often, and under what name. Kept apart from the backends so that loading a config
imports none of them (TensorBoard, MLflow and W&B are imported only by a run that uses them)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from paravt_core.config_base import StrictModel

Backend = Literal["tensorboard", "mlflow", "wandb"]


class MlflowTrackingConfig(StrictModel):
    uri: str = Field(
        default="", description="MLflow tracking server (http://host:5000); empty: MLFLOW_TRACKING_URI"
    )
    experiment: str = Field(
        default="paravt", description="experiment the run is logged under (created when missing)"
    )


class WandbTrackingConfig(StrictModel):
    project: str = Field(default="paravt", description="W&B project (WANDB_PROJECT wins when set)")
    mode: Literal["online", "offline"] = Field(
        default="online",
        description="offline: the run only under <output>/wandb (wandb sync uploads it); WANDB_MODE wins",
    )


class TrackingConfig(StrictModel):
    """Where the per-step numbers go besides ``metrics.jsonl``; rank 0 logs, from the step's one read."""

    backends: list[Backend] = Field(
        default_factory=lambda: ["tensorboard"],
        description="any of tensorboard (<output>/tensorboard), mlflow, wandb; []: none",
    )
    log_every: int = Field(
        default=1, ge=1, description="steps between logged points and pod-log progress lines"
    )
    progress_every_s: float = Field(
        default=60.0,
        ge=0.0,
        description="pod logs (stderr not a terminal): at least this many seconds between progress lines",
    )
    run_name: str = Field(
        default="", description="run name in the trackers; empty: the KFP run id, else the output's last part"
    )
    text_every: int = Field(
        default=10,
        ge=0,
        description="RL: one rendered trajectory as TensorBoard text every N steps (0: none)",
    )
    peak_tflops: float = Field(
        default=0.0,
        ge=0.0,
        # the data sheet's 989 (H100 / H200): the MFU convention; a lent H200's 8192³ matmul measured 769-798
        description="SFT MFU: dense bf16 TFLOP/s per GPU; 0: the data sheet's by device name (H100/H200 989)",
    )
    mlflow: MlflowTrackingConfig = Field(
        default_factory=MlflowTrackingConfig, description="the mlflow backend: server and experiment"
    )
    wandb: WandbTrackingConfig = Field(
        default_factory=WandbTrackingConfig, description="the wandb backend (key and entity: WANDB_* env)"
    )
