"""Pipeline task pods under Pod Security ``restricted`` and on clusters without NVIDIA's GPU labels: the
compiled IR carries each task's securityContext, and the GPU-model node selector follows
``$PARAVT_GPU_NODE_SELECTOR`` (read when compiling)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from pipelines import platform
from pipelines.compile import compile_pipeline
from tests.support.paths import ROOT


def _executors(tmp_path: Path, name: str = "train") -> dict:
    out = compile_pipeline(name, str(tmp_path / f"{name}.yaml"), warn=False)
    docs = list(yaml.safe_load_all(Path(out).read_text()))
    return docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]


def test_every_task_container_runs_as_the_images_non_root_user(tmp_path):
    """KFP 2.17.0's driver copies a task's ``securityContext`` (kfp-kubernetes ``set_security_context``)
    onto the task's own container (backend/src/v2/driver/k8s.go, ``GetSecurityContext``); Pod Security
    ``restricted`` refuses a container without ``runAsNonRoot`` (pod-security-admission, policy/
    check_runAsNonRoot.go). The uid is the images' USER."""
    uid = {re.search(r"^USER (\d+):", (ROOT / f).read_text(), re.M).group(1) for f in
           ("Dockerfile.sft", "Dockerfile.rl", "Dockerfile.eval")}  # fmt: skip
    assert uid == {str(platform.IMAGE_UID)}
    for name in ("train", "nightly"):
        executors = _executors(tmp_path, name)
        assert executors
        for key, executor in executors.items():
            sc = executor.get("securityContext") or {}
            assert sc.get("runAsNonRoot") is True, key
            assert int(sc["runAsUser"]) == int(sc["runAsGroup"]) == platform.IMAGE_UID, key


@pytest.mark.parametrize(
    ("env", "want"),
    [
        (None, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
        ("node.kubernetes.io/instance-type=p5.48xlarge", {"node.kubernetes.io/instance-type": "p5.48xlarge"}),
        ("", None),
    ],
)
def test_gpu_model_selector_is_configurable(tmp_path, monkeypatch, env, want):
    """``nvidia.com/gpu.product`` is set only by NVIDIA's GPU feature discovery (GPU Operator, or the
    device plugin's chart with gfd enabled); without it a pod selecting on it stays Pending forever."""
    from kfp import dsl

    from tests.support.platform_support import _compile, probe_op

    if env is None:
        monkeypatch.delenv(platform.GPU_NODE_SELECTOR_ENV, raising=False)
    else:
        monkeypatch.setenv(platform.GPU_NODE_SELECTOR_ENV, env)

    @dsl.pipeline(name="probe")
    def probe():
        platform.configure_task(probe_op(x="a"), "sft")
        platform.configure_task(probe_op(x="b"), "eval")

    _, _, k8s = _compile(probe, tmp_path, monkeypatch)
    for key in ("exec-probe-op", "exec-probe-op-2"):
        got = (k8s[key].get("nodeSelector") or {}).get("labels")
        assert got == want, key
    assert platform.node_spec("rl", "img")["node_selector"] == (want or {})


def test_a_malformed_gpu_selector_is_refused(monkeypatch):
    monkeypatch.setenv(platform.GPU_NODE_SELECTOR_ENV, "p5.48xlarge")
    with pytest.raises(ValueError, match="expected key=value"):
        platform.gpu_node_selector("NVIDIA-H100-80GB-HBM3")
