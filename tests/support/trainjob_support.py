"""Shared by several test modules (from tests/contract/test_launch_trainjob.py, where it was first written)."""

from __future__ import annotations

import functools
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from kfp.dsl import HTML, Artifact, Metrics, Model

from paravt_core.launch.trainjob import (
    NodeSpec,
)
from tests.support.k8s_emulator import Emulator
from tests.support.paths import ROOT

CRD = ROOT / "tests/fixtures/k8s/trainer.kubeflow.org_trainjobs.v2.3.0.yaml"
PYTORCHJOB_CRD = ROOT / "tests/fixtures/k8s/kubeflow.org_pytorchjobs.v1.9.0.yaml"
NS = "paravt"
RUN = "4b1c7e2a-0f0e-4d6e-9a55-1f3d2b8c9e01"
CONFIG = "output: s3://bucket/runs/x/sft\nlaunch:\n  nodes: 2\n"


@functools.cache
def crd(path: Path = CRD) -> dict:
    return next(d for d in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader) if d)


def spec() -> NodeSpec:
    return NodeSpec(
        image="registry/paravt-sft@sha256:" + "a" * 64,
        node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        secret_env={
            "AWS_ACCESS_KEY_ID": ("paravt-s3", "AWS_ACCESS_KEY_ID"),
            "AWS_SECRET_ACCESS_KEY": ("paravt-s3", "AWS_SECRET_ACCESS_KEY"),
        },
        config_map_env={"AWS_ENDPOINT_URL": ("paravt-s3-config", "AWS_ENDPOINT_URL")},
        pvc="paravt-media",
        shm="64Gi",
        active_deadline_s=48 * 3600,
    )


def _controller(emu: Emulator, name: str, steps: list, plural: str = "trainjobs") -> threading.Thread:
    """Play the Trainer controller: once the job exists, apply ``steps`` (callables) ~50 ms apart."""

    def go() -> None:
        assert emu.created.wait(10)
        for step in steps:
            time.sleep(0.05)
            step()

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def _kubeconfig(emu: Emulator, path: Path) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "emu", "cluster": {"server": emu.host}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "u"}}],
                "current-context": "emu",
            }
        )
    )
    return path


def _complete(emu: Emulator, ns: str, name: str) -> None:
    cond = {"type": "Complete", "status": "True", "reason": "JobSetCompleted", "message": "done"}
    emu.set_status(
        "trainjobs", ns, name, {"conditions": [cond | {"lastTransitionTime": "2026-11-25T09:00:00Z"}]}
    )


def kfp_outputs(tmp_path: Path, names: tuple[str, ...]) -> list[Any]:
    """KFP output artifacts of those names (their kinds as the steps declare them), under ``tmp_path/art``."""
    kinds = {"curve": HTML, "curves": Artifact, "metrics": Metrics, "model": Model, "trained": Model}
    made = []
    (tmp_path / "art").mkdir(parents=True, exist_ok=True)
    for n in names:
        a = kinds[n](name=n, uri=str(tmp_path / "art" / n))
        a.path = str(tmp_path / "art" / n)
        made.append(a)
    return made
