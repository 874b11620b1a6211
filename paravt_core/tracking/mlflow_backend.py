"""The run in MLflow (``mlflow-skinny``'s client: no server code in the images).

The server is ``tracking.mlflow.uri`` or ``MLFLOW_TRACKING_URI``; the experiment is created when missing.
A new run gets the resolved config as params (flattened ``a.b.c``), the stage and the KFP run id as tags;
each logged step its scalars; the end the final checkpoint's URI as a tag and the FINISHED status. The run's
id goes into the checkpoint state, so a resumed stage continues the same MLflow run; the (key, step)
points it already holds (those a killed attempt logged after its last checkpoint) are not sent again,
since an MLflow metric history is append-only: each step is there once.
"""

from __future__ import annotations

import os
import time
from typing import Any

PARAM_BATCH = 100  # mlflow.utils.validation.MAX_PARAMS_TAGS_PER_BATCH
METRIC_BATCH = 1000  # mlflow.utils.validation.MAX_METRICS_PER_BATCH
PARAM_CHARS = 6000  # mlflow.utils.validation.MAX_PARAM_VAL_LENGTH


class MlflowError(RuntimeError):
    """No tracking server configured for the mlflow backend."""


class MlflowBackend:
    def __init__(
        self,
        uri: str,
        experiment: str,
        run_name: str,
        *,
        stage: str,
        run_id: str = "",
        params: dict[str, str] | None = None,
        tags: dict[str, str] | None = None,
    ):
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        uri = uri or os.environ.get("MLFLOW_TRACKING_URI", "")
        if not uri:
            raise MlflowError(
                "tracking.backends has mlflow but no server: set tracking.mlflow.uri or MLFLOW_TRACKING_URI"
            )
        self.client = MlflowClient(tracking_uri=uri)
        self.logged: set[tuple[str, int]] = set()
        if run_id:  # a resumed stage: the same run, without the points it already holds
            self.run_id = run_id
            self.client.update_run(run_id, status="RUNNING")
            for key in self.client.get_run(run_id).data.metrics:
                self.logged.update((key, m.step) for m in self.client.get_metric_history(run_id, key))
            return
        found = self.client.get_experiment_by_name(experiment)
        exp_id = found.experiment_id if found else self.client.create_experiment(experiment)
        all_tags = {"paravt.stage": stage, **(tags or {})}
        self.run_id = self.client.create_run(exp_id, tags=all_tags, run_name=run_name).info.run_id
        items = [Param(k, v[:PARAM_CHARS]) for k, v in sorted((params or {}).items())]
        for i in range(0, len(items), PARAM_BATCH):
            self.client.log_batch(self.run_id, params=items[i : i + PARAM_BATCH])

    def log(self, step: int, scalars: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        points = [Metric(k, v, now, step) for k, v in scalars.items() if (k, step) not in self.logged]
        for i in range(0, len(points), METRIC_BATCH):
            self.client.log_batch(self.run_id, metrics=points[i : i + METRIC_BATCH])
        self.logged.update((m.key, step) for m in points)

    def text(self, step: int, tag: str, text: str) -> None:
        pass  # trajectories stay in TensorBoard and trajectories/*.jsonl

    def sync(self) -> None:
        pass  # every call above is synchronous

    def state(self) -> dict[str, Any]:
        return {"mlflow_run_id": self.run_id}

    def close(self, final_uri: str = "") -> None:
        if final_uri:
            self.client.set_tag(self.run_id, "paravt.final_checkpoint", final_uri)
        self.client.set_terminated(self.run_id, "FINISHED")
