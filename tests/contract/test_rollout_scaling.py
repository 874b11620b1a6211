"""The rollout server idles at 0 replicas (manifests/components/rollout-server): the multi-node RL step scales
it up before its /health wait (``trainjob.wake_rollout_server``), and the job reaper scales it back to 0 once
no RL job of ours has lived for its grace period (``reaper.rollout_decision``). Against the API emulator with
the real ``kubernetes`` client and the component's own Deployment.

Rules followed: a merge patch of ``spec.replicas`` scales a Deployment (apps/v1; the Deployment controller
then makes the pods); a patch carrying ``metadata.resourceVersion`` is refused with 409 Conflict when the
object changed since (k8s.io/apiserver pkg/registry/generic/registry/store.go, ``Update``,
``OptimisticLockErrorMsg``), so the reaper's scale-down never overrides a step's wake-up in between.
"""

from __future__ import annotations

import copy
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import yaml
from kfp.dsl import Artifact
from kubernetes.client.exceptions import ApiException

from paravt_core.config_base import ConfigError
from paravt_core.launch.reaper import ROLLOUT_SELECTOR, Reaper
from paravt_core.launch.trainjob import ROLLOUT_WANTED_ANNOTATION, labels, wake_rollout_server
from tests.support.k8s_emulator import Emulator
from tests.support.paths import ROOT
from tests.support.trainjob_support import _kubeconfig, crd, kfp_outputs

NS = "default"  # the step's namespace outside a cluster
NAME = "paravt-rollout"
NOW = 1_800_000_000.0


def deployment(replicas: int | None = None, wanted_at: float | None = None) -> dict:
    """The component's Deployment as the API server stores it (namespace, uid, resourceVersion added)."""
    docs = yaml.safe_load_all((ROOT / "manifests/components/rollout-server/rollout-server.yaml").read_text())
    (dep,) = [d for d in docs if d and d["kind"] == "Deployment"]
    dep["metadata"].update(namespace=NS, uid="d-1", resourceVersion="7")
    if replicas is not None:
        dep["spec"]["replicas"] = replicas
    if wanted_at is not None:
        dep["metadata"]["annotations"] = {ROLLOUT_WANTED_ANNOTATION: str(int(wanted_at))}
    return dep


def replicas(emu: Emulator) -> int:
    return emu.get("deployments", NS, NAME)["spec"]["replicas"]


def test_the_component_idles_at_zero_and_carries_the_reapers_label():
    dep = deployment()
    assert dep["spec"]["replicas"] == 0
    key, value = ROLLOUT_SELECTOR.split("=")
    assert dep["metadata"]["labels"][key] == value


def test_the_rl_step_wakes_the_idle_server_before_it_creates_its_job(tmp_path, monkeypatch):
    """The server answers /health only once the Deployment has a replica (this plays its controller); the
    step scales it from 0 to 1, stamps it, passes the health check and only then creates the job (refused
    here with HTTP 400 to end the step)."""
    from components.multinode import rl_trainjob_op

    emu = Emulator()

    class Server(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200 if replicas(emu) >= 1 else 503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    curves, metrics, trained = kfp_outputs(tmp_path, ("curves", "metrics", "trained"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KFP_POD_NAME", raising=False)
    try:
        with emu:
            emu.register_crd(crd())
            emu.put("deployments", NS, deployment())
            emu.write_failures.append(("create", 400, False))
            _kubeconfig(emu, tmp_path / "kubeconfig")
            with pytest.raises(ApiException) as err:
                rl_trainjob_op.python_func(
                    config_yaml="{}", data="s3://b/d", model="s3://b/sft/final", nodes=2, gpus_per_node=8,
                    overrides=["device=cuda", "dtype=bfloat16", "engine.kind=sglang",
                               f"engine.base_url=http://127.0.0.1:{server.server_address[1]}",
                               "launch.rollout_wait_s=0.5", f"launch.rollout_deployment={NAME}"],
                    api="trainjob", runtime="torch-distributed", poll_s=0.05, media_pvc="",
                    node_spec={"image": "registry/paravt-rl:1"}, curves=curves, metrics=metrics,
                    trained=trained, tensorboard=Artifact(name="tb"), output=str(tmp_path / "rl"),
                    run_id="run-rl-1",
                )  # fmt: skip
            assert err.value.status == 400
            assert replicas(emu) == 1
            assert ROLLOUT_WANTED_ANNOTATION in emu.get("deployments", NS, NAME)["metadata"]["annotations"]
            assert emu.count("create", "trainjobs") == 1  # after the wake-up and the health check
            assert [r for r in emu.requests if r[1] == "deployments"] == [
                ("get", "deployments"),
                ("patch", "deployments"),
            ]
    finally:
        server.shutdown()
        server.server_close()


def test_a_fleet_keeps_its_replicas_and_a_missing_deployment_is_one_line(tmp_path):
    with Emulator() as emu:
        emu.put("deployments", NS, deployment(replicas=3))
        assert wake_rollout_server(emu.client(), NS, NAME, log=lambda line: None) == 3
        assert replicas(emu) == 3
        with pytest.raises(ConfigError) as err:
            wake_rollout_server(emu.client(), NS, "paravt-rollout-typo", log=lambda line: None)
    assert (
        "\n" not in str(err.value) and "no such Deployment" in str(err.value) and "HTTP 404" in str(err.value)
    )


def _rl_job(name: str = "paravt-rl-0123456789ab") -> dict:
    """An RL job of ours without a Workflow owner: the reaper keeps it (not ours to judge), so it lives."""
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": NS, "uid": "j-1", "labels": labels("run-rl-1", "rl")}}  # fmt: skip


# (Deployment as read, an RL job lives?) -> (replicas after, stamped now?), worked out from the rule:
# stamp while an RL job lives; scale to 0 only what a step stamped, once the stamp is older than the grace.
CASES = {
    "an RL job lives": ((1, NOW - 7200), True, (1, True)),
    "no RL job, stamp older than the grace": ((1, NOW - 3601), False, (0, False)),
    "no RL job, stamp within the grace": ((1, NOW - 600), False, (1, False)),
    "no RL job, never stamped (scaled by hand)": ((1, None), False, (1, False)),
    "no RL job, already at 0": ((0, NOW - 7200), False, (0, False)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_reaper_scales_an_unused_server_to_zero_after_its_grace(case):
    (count, wanted), rl_lives, (after, stamped) = CASES[case]
    log: list[str] = []
    with Emulator() as emu:
        emu.put("deployments", NS, deployment(count, wanted))
        if rl_lives:
            emu.put("trainjobs", NS, _rl_job())
        reaper = Reaper(emu.client(), NS, log=log.append, rollout_servers=True, rollout_grace_s=3600)
        reaper.scale_rollout_servers(["paravt-rl-0123456789ab"] if rl_lives else [], now=NOW)
        dep = emu.get("deployments", NS, NAME)
        assert dep["spec"]["replicas"] == after, log
        assert (
            (dep["metadata"].get("annotations") or {}).get(ROLLOUT_WANTED_ANNOTATION) == str(int(NOW))
        ) == stamped
        assert len(log) == 1 and log[0].startswith(f"Deployment {NS}/{NAME}: "), log
        assert ("deployments", ROLLOUT_SELECTOR) in emu.selectors


def test_a_pass_counts_the_rl_jobs_it_keeps_and_not_those_it_deletes():
    """One pass: an RL job of ours that lives keeps the server up; once it is gone (deleted by its step, or by
    the reaper) and the grace is over, the server goes to 0. Without --rollout-servers no Deployment is read."""
    with Emulator() as emu:
        emu.put("deployments", NS, deployment(1, 0.0))
        emu.put("trainjobs", NS, _rl_job())
        log: list[str] = []
        Reaper(emu.client(), NS, log=log.append).run()
        assert emu.count("list", "deployments") == 0 and replicas(emu) == 1
        Reaper(emu.client(), NS, log=log.append, rollout_servers=True).run()
        assert replicas(emu) == 1 and "stamped as wanted: RL job paravt-rl-0123456789ab lives" in log[-1], log
        emu.remove("trainjobs", NS, "paravt-rl-0123456789ab")
        dep = emu.get("deployments", NS, NAME)
        dep["metadata"]["annotations"][ROLLOUT_WANTED_ANNOTATION] = "0"
        emu.put("deployments", NS, dep)
        Reaper(emu.client(), NS, log=log.append, rollout_servers=True).run()
        assert replicas(emu) == 0 and "scaled to 0: no RL job of ours" in log[-1], log


def test_a_wake_up_between_the_read_and_the_scale_down_wins():
    """The reaper read the Deployment idle; a step then woke it (a new resourceVersion): the scale-down
    patch carries the version it read, is refused (409) and the server stays up."""
    with Emulator() as emu:
        emu.put("deployments", NS, deployment(1, NOW - 7200))
        reaper = Reaper(emu.client(), NS, log=lambda line: None, rollout_servers=True)
        stale = reaper.apps.list_namespaced_deployment(NS, label_selector=ROLLOUT_SELECTOR)
        wake_rollout_server(emu.client(), NS, NAME, log=lambda line: None)  # the step's stamp: a new version
        log: list[str] = []
        reaper.log = log.append
        reaper.apps.list_namespaced_deployment = lambda *a, **k: copy.deepcopy(stale)  # the read of before
        reaper.scale_rollout_servers([], now=NOW)
        assert replicas(emu) == 1 and log[0].startswith(
            f"Deployment {NS}/{NAME}: kept: changed since it was read"
        )


def test_a_scale_down_between_the_steps_read_and_its_patch_is_read_again(monkeypatch):
    """The step read the server up (1 replica); the reaper's scale-down lands before the step's stamp: the
    stamp carries the version read, is refused (409), and the step reads again and scales it back to 1."""
    from kubernetes import client as k8s

    with Emulator() as emu:
        emu.put("deployments", NS, deployment(1, NOW - 7200))
        read = k8s.AppsV1Api.read_namespaced_deployment
        reads: list[int] = []

        def read_then_scale_down(self, *args, **kwargs):
            dep = read(self, *args, **kwargs)
            if not reads:  # the reaper's patch, after this read
                down = emu.get("deployments", NS, NAME)
                down["spec"]["replicas"], down["metadata"]["resourceVersion"] = 0, "8"
                emu.put("deployments", NS, down)
            reads.append(dep.spec.replicas)
            return dep

        monkeypatch.setattr(k8s.AppsV1Api, "read_namespaced_deployment", read_then_scale_down)
        assert wake_rollout_server(emu.client(), NS, NAME, log=lambda line: None) == 1
        assert reads == [1, 0] and replicas(emu) == 1 and emu.count("patch", "deployments") == 2


def test_dry_run_scales_nothing():
    with Emulator() as emu:
        emu.put("deployments", NS, deployment(1, NOW - 7200))
        log: list[str] = []
        Reaper(emu.client(), NS, dry_run=True, log=log.append, rollout_servers=True).scale_rollout_servers(
            [], now=NOW
        )
        assert replicas(emu) == 1 and emu.count("patch", "deployments") == 0
        assert log == [
            f"Deployment {NS}/{NAME}: would scale it to 0 (dry run): no RL job of ours for 7200s (grace 3600s)"
        ]


def test_the_components_roles_grant_exactly_the_calls(tmp_path):
    """The step's calls (get, patch: wake_rollout_server) and the reaper's (list, patch) against the Roles of
    manifests/components/rollout-server/rbac.yaml, each bound to its account."""
    with Emulator() as emu:
        emu.put("deployments", NS, deployment())
        wake_rollout_server(emu.client(), NS, NAME, log=lambda line: None)
        step_calls = set(emu.requests)
        start = len(emu.requests)
        emu.get("deployments", NS, NAME)
        dep = emu.get("deployments", NS, NAME)
        dep["metadata"]["annotations"][ROLLOUT_WANTED_ANNOTATION] = "0"
        emu.put("deployments", NS, dep)
        Reaper(emu.client(), NS, log=lambda line: None, rollout_servers=True).scale_rollout_servers(
            [], now=NOW
        )
        assert replicas(emu) == 0
        reaper_calls = set(emu.requests[start:])
    docs = [
        d
        for d in yaml.safe_load_all((ROOT / "manifests/components/rollout-server/rbac.yaml").read_text())
        if d
    ]
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Role"}
    bound = {
        d["roleRef"]["name"]: [s["name"] for s in d["subjects"]] for d in docs if d["kind"] == "RoleBinding"
    }

    def grants(role: str) -> set[tuple[str, str]]:
        return {(v, r) for rule in roles[role]["rules"] for r in rule["resources"] for v in rule["verbs"]}

    assert grants("paravt-rollout-waker") == step_calls == {("get", "deployments"), ("patch", "deployments")}
    assert (
        grants("paravt-rollout-scaler") == reaper_calls == {("list", "deployments"), ("patch", "deployments")}
    )
    assert bound == {
        "paravt-rollout-waker": ["paravt-pipeline-runner"],
        "paravt-rollout-scaler": ["paravt-job-reaper"],
    }
    for role in roles.values():  # by name wherever RBAC can (a list cannot)
        for rule in role["rules"]:
            assert rule.get("resourceNames") == [NAME] or rule["verbs"] == ["list"], rule
