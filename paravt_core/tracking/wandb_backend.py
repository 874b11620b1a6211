"""The run in Weights & Biases, for users who have it (``pip install wandb``: not in the images by default).

Key, entity and base URL come from W&B's own environment variables (``WANDB_API_KEY``, ``WANDB_ENTITY``,
``WANDB_BASE_URL``); ``tracking.wandb.mode=offline`` (or ``WANDB_MODE=offline``) writes the run under ``<output>/wandb/``
only (an ``s3://`` output: the stage's local work directory), for ``wandb sync``. The run id goes into the checkpoint state and a resumed stage
continues that run (``resume="allow"``).
"""

from __future__ import annotations

import os
from typing import Any

from paravt_core.tracking.config import WandbTrackingConfig


class WandbBackend:
    def __init__(
        self,
        cfg: WandbTrackingConfig,
        run_name: str,
        output: str,
        work_dir: str,
        *,
        stage: str,
        config: dict[str, Any],
        run_id: str = "",
    ):
        import wandb

        # wandb writes <dir>/wandb/<run>: under a local output it stays with the run's other outputs
        folder = work_dir if "://" in output else output
        os.makedirs(folder, exist_ok=True)
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT") or cfg.project,
            name=run_name,
            id=run_id or None,
            resume="allow" if run_id else None,
            dir=folder,
            mode=os.environ.get("WANDB_MODE") or cfg.mode,
            config=config,
            job_type=stage,
            reinit="finish_previous",
        )

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self.run.log(dict(scalars), step=step)

    def text(self, step: int, tag: str, text: str) -> None:
        pass  # trajectories stay in TensorBoard and trajectories/*.jsonl

    def sync(self) -> None:
        pass

    def state(self) -> dict[str, Any]:
        return {"wandb_run_id": self.run.id}

    def close(self, final_uri: str = "") -> None:
        if final_uri:
            self.run.summary["final_checkpoint"] = final_uri
        self.run.finish()
