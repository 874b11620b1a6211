"""What a finished stage shows in the KFP UI: its numbers as ``Metrics``, its curve as an artifact, and
its checkpoint as the ``Model`` output. Shared by the one-node, multi-node and ablation components, so
every way of running a stage publishes the same things. Imported inside the components' bodies (the
package is installed in the images), no kfp import here.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from components.locations import expose
from paravt_core import storage


def log_numbers(metrics: Any, summary: Mapping[str, Any]) -> None:
    """Every numeric value of a stage's summary as a KFP metric (booleans and text are left out)."""
    for key, value in summary.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            metrics.log_metric(key, value)


def read_summary(output: str) -> dict[str, Any]:
    """The stage's ``metrics.json`` (what a stage run in another process or pod left behind)."""
    return json.loads(storage.read_bytes(storage.join(output, "metrics.json")))


def publish_tensorboard(artifact: Any, output: str, run_id: str) -> str:
    """The stage's TensorBoard log directory (``<output>/tensorboard``) as an output artifact of the step, so
    the run page links to it (a Kubeflow ``Tensorboard`` resource serves it: manifests/base/tensorboard)."""
    logdir = storage.join(output, "tensorboard")
    artifact.metadata["logdir"] = logdir
    expose(artifact, logdir, run_id)
    return logdir


def publish_sft(
    output: str, summary: Mapping[str, Any], *, curve: Any, metrics: Any, model: Any, run_id: str
) -> str:
    """SFT's loss curve (inline PNG in an HTML artifact), numbers and final checkpoint; returns its URI."""
    png = storage.read_bytes(storage.join(output, "loss_curve.png"))
    with open(curve.path, "w") as out:
        out.write(f'<img alt="SFT loss" src="data:image/png;base64,{base64.b64encode(png).decode()}">')
    log_numbers(metrics, summary)
    final = storage.join(output, "final")
    expose(model, final, run_id)
    return final


def publish_rl_curves(output: str, summary: Mapping[str, Any], *, curves: Any, metrics: Any) -> None:
    """RL's curves (a PNG artifact that also points at the stored file) and numbers."""
    with open(curves.path, "wb") as out:
        out.write(storage.read_bytes(storage.join(output, "curves.png")))
    curves.metadata["uri"] = storage.join(output, "curves.png")
    log_numbers(metrics, summary)


def publish_rl(
    output: str, summary: Mapping[str, Any], *, curves: Any, metrics: Any, trained: Any, run_id: str
) -> str:
    """RL's curves, numbers and final checkpoint; returns its URI."""
    publish_rl_curves(output, summary, curves=curves, metrics=metrics)
    final = storage.join(output, "final")
    print(json.dumps({"final": final}))
    expose(trained, final, run_id)
    return final
