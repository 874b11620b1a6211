"""Experiment tracking of every stage: TensorBoard event files under ``<output>/tensorboard/``, an MLflow run,
a W&B run (``tracking.backends``), and plain progress lines in pod logs (``progress``).

A stage opens one :class:`Tracker` on rank 0 (the other ranks get a disabled one) once it knows where it
resumes from, logs each step's scalars from the numbers its step already read back (no new host sync),
calls :meth:`Tracker.checkpoint` after each checkpoint (flush, upload, and the state to keep in it) and
:meth:`Tracker.close` at the end. Logging is cheap and never stops training: a tracker that fails (a server
gone, after its client's retries) says so once and is left out; the run and the other backends go on.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from paravt_core.tracking.config import TrackingConfig

# Set by the components (their run_id parameter) for the stage and its torchrun children.
KFP_RUN_ID = "KFP_RUN_ID"


def run_name(cfg: TrackingConfig, output: str) -> str:
    """``tracking.run_name``, else the KFP run id, else the output's last path part."""
    return cfg.run_name or os.environ.get(KFP_RUN_ID, "") or os.path.basename(output.rstrip("/")) or "run"


def _backend(
    kind: str,
    cfg: TrackingConfig,
    stage: str,
    output: str,
    work_dir: str,
    resume_step: int,
    state: dict[str, Any],
    config: dict[str, Any],
) -> Any:
    """One backend of ``tracking.backends``, started (resumed runs continue the runs named in ``state``)."""
    if kind == "tensorboard":
        from paravt_core.tracking.tensorboard import TensorBoardBackend

        return TensorBoardBackend(output, work_dir, resume_step)
    name = run_name(cfg, output)
    if kind == "mlflow":
        from paravt_core.tracking.mlflow_backend import MlflowBackend
        from paravt_core.tracking.scalars import flatten_params

        kfp = os.environ.get(KFP_RUN_ID, "")
        return MlflowBackend(
            cfg.mlflow.uri,
            cfg.mlflow.experiment,
            name,
            stage=stage,
            run_id=str(state.get("mlflow_run_id", "")) if resume_step else "",
            params=flatten_params(config),
            tags={"kfp.run_id": kfp} if kfp else {},
        )
    from paravt_core.tracking.wandb_backend import WandbBackend

    run_id = str(state.get("wandb_run_id", "")) if resume_step else ""
    return WandbBackend(cfg.wandb, name, output, work_dir, stage=stage, config=config, run_id=run_id)


class Tracker:
    """The backends of one stage run; a disabled one (other ranks, no backends) does nothing."""

    def __init__(self, backends: list[Any], log_every: int = 1, last_step: int = 0):
        self.backends = backends
        self.log_every = log_every
        self.last_step = last_step
        self.failed: set[str] = set()

    @classmethod
    def disabled(cls) -> Tracker:
        return cls([])

    @classmethod
    def open(
        cls,
        cfg: TrackingConfig,
        *,
        stage: str,
        output: str,
        work_dir: str,
        resume_step: int = 0,
        last_step: int = 0,
        state: dict[str, Any] | None = None,
        config: dict[str, Any] | None = None,
        enabled: bool = True,
        strict: bool = True,
    ) -> Tracker:
        """``resume_step``: the steps a checkpoint already holds (their points are kept, later ones dropped);
        ``state``: what :meth:`state` returned into that checkpoint; ``config``: the resolved config (params).
        ``strict``: a backend that cannot start is an error (a training stage fails before any compute);
        otherwise it is reported and left out (a finished eval still records its results)."""
        if not enabled or not cfg.backends:
            return cls.disabled()
        backends: list[Any] = []
        for kind in dict.fromkeys(cfg.backends):
            try:
                backends.append(
                    _backend(kind, cfg, stage, output, work_dir, resume_step, state or {}, config or {})
                )
            except Exception as err:
                if strict:
                    raise
                print(f"tracking: the {kind} backend did not start ({type(err).__name__}: {err}); not logging "
                      "there", file=sys.stderr, flush=True)  # fmt: skip
        return cls(backends, cfg.log_every, last_step)

    @property
    def enabled(self) -> bool:
        return bool(self.backends)

    def _each(self, what: str, *args: Any) -> None:
        for backend in list(self.backends):
            try:
                getattr(backend, what)(*args)
            except Exception as err:  # a tracker's failure never stops the run: that backend is left out
                name = type(backend).__name__
                self.failed.add(name)
                self.backends.remove(backend)
                print(f"tracking: {name}.{what} failed ({type(err).__name__}: {err}); not logging there any more, "
                      "the run goes on", file=sys.stderr, flush=True)  # fmt: skip

    def due(self, step: int) -> bool:
        return self.enabled and (step % self.log_every == 0 or step == self.last_step)

    def log(self, step: int, scalars: dict[str, float], *, force: bool = False) -> None:
        """Log ``scalars`` at ``step`` when it is a ``log_every`` step or the last one (or ``force``)."""
        if force or self.due(step):
            self._each("log", step, scalars)

    def text(self, step: int, tag: str, text: str) -> None:
        self._each("text", step, tag, text)

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps so that a resumed run continues the same tracker runs."""
        out: dict[str, Any] = {}
        for backend in self.backends:
            if hasattr(backend, "state"):
                out.update(backend.state())
        return out

    def checkpoint(self) -> None:
        """After a checkpoint: flush, and upload the event files of an s3:// output."""
        self._each("sync")

    def close(self, final_uri: str = "") -> None:
        self._each("close", final_uri)


def log_results(
    cfg: TrackingConfig,
    stage: str,
    output: str,
    work_dir: str,
    scalars: dict[str, float],
    config: dict[str, Any],
    checkpoint: str = "",
) -> None:
    """A stage with one result (eval): its numbers as one point (step 1), replacing an earlier attempt's."""
    tracker = Tracker.open(
        cfg,
        stage=stage,
        output=output,
        work_dir=os.path.join(work_dir, "tracking"),
        last_step=1,
        config=config,
    )
    tracker.log(1, scalars)
    tracker.close(checkpoint)
