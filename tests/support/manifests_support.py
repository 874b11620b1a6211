"""Shared by several test modules (from tests/unit/test_platform_manifests.py, where it was first written)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.paths import ROOT

BIN = Path(sys.executable).parent


def render(overlay: str, *, volumes: bool = True) -> list[dict]:
    """The overlay's objects and (``volumes``) those of its separate volumes kustomization."""
    docs = render_dir(ROOT / "manifests" / "overlays" / overlay)
    return docs + (render_dir(ROOT / "manifests" / "overlays" / overlay / "volumes") if volumes else [])


def render_dir(path: Path) -> list[dict]:
    proc = subprocess.run(
        [str(BIN / "kubectl"), "kustomize", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def cron_job_named(docs: list[dict], name: str) -> dict:
    (job,) = [d for d in by_kind(docs, "CronJob") if d["metadata"]["name"] == name]
    return job


def _grants(rules: list[dict], group: str = "pipelines.kubeflow.org") -> set[tuple[str, str]]:
    return {
        (res, verb)
        for r in rules
        if group in r.get("apiGroups", [])
        for res in r["resources"]
        for verb in r["verbs"]
    }
