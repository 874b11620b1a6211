"""``paravt pipeline doctor``: read the cluster before a run and say, one line each, what will not work.

What it reads (the Kubernetes API, with the caller's kubeconfig or in-cluster account):

- the CRDs and the versions they serve: TrainJob (with ``runtimePatches``: Trainer v2.2 or later, else v2.1's
  ``podTemplateOverrides``), PyTorchJob (training operator), Kueue's LocalQueue, KFP's ScheduledWorkflow;
- the namespace's KFP launcher config (ConfigMap ``kfp-launcher``) and its Pod Security Admission level
  (label ``pod-security.kubernetes.io/enforce``);
- Argo's controller ConfigMap (``workflow-controller-configmap`` in KFP's namespace): ``workflowDefaults``,
  its Workflow TTL and default retry policy.

A line is ``blocks:`` (a shipped pipeline cannot run: exit code 1), ``warning:`` (a feature will not work or
cleans up later than it should) or ``ok:``. Nothing is written to the cluster.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import yaml

from paravt_core.launch.trainjob import TRAINJOB, TRAINJOB_CRD, crd_spec_fields

PYTORCHJOB_CRD = "pytorchjobs.kubeflow.org"
KUEUE_CRD = "localqueues.kueue.x-k8s.io"
SCHEDULED_WORKFLOW_CRD = "scheduledworkflows.kubeflow.org"  # KFP's recurring runs
KFP_LAUNCHER = "kfp-launcher"
ARGO_CONFIGMAP = "workflow-controller-configmap"
PSS_ENFORCE = "pod-security.kubernetes.io/enforce"
# Argo's retry policy when a retryStrategy names none (Argo v4.0.5 RetryPolicyActual; docs/reference.md).
ARGO_DEFAULT_RETRY_POLICY = "OnFailure"


@dataclasses.dataclass(frozen=True)
class Line:
    level: str  # "blocks", "warning" or "ok"
    text: str

    def __str__(self) -> str:
        return f"{self.level}: {self.text}"


class _Reader:
    """GETs that answer the parsed object, None for 404, or the HTTP status (int) when refused."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self.ext = client.ApiextensionsV1Api(api_client)
        self.core = client.CoreV1Api(api_client)

    def _get(self, call: Any, *args: Any) -> dict[str, Any] | int | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return json.loads(call(*args, _preload_content=False, _request_timeout=10).data)
        except ApiException as err:
            return None if err.status == 404 else int(err.status or 0)

    def crd(self, name: str) -> dict[str, Any] | int | None:
        return self._get(self.ext.read_custom_resource_definition, name)

    def configmap(self, namespace: str, name: str) -> dict[str, Any] | int | None:
        return self._get(self.core.read_namespaced_config_map, name, namespace)

    def namespace(self, name: str) -> dict[str, Any] | int | None:
        return self._get(self.core.read_namespace, name)


def _versions(crd: dict[str, Any]) -> str:
    return ", ".join(v["name"] for v in crd["spec"].get("versions") or [] if v.get("served"))


def check_crds(read: _Reader) -> tuple[list[Line], frozenset[str] | None]:
    """The CRD lines, and the installed TrainJob's spec fields (None when it is absent or unreadable)."""
    lines: list[Line] = []
    got = {name: read.crd(name) for name in (TRAINJOB_CRD, PYTORCHJOB_CRD, KUEUE_CRD, SCHEDULED_WORKFLOW_CRD)}
    if any(isinstance(v, int) for v in got.values()):
        lines.append(Line("warning", "cannot read CustomResourceDefinitions (forbidden): the job kinds are "
                                     "unknown; run the doctor as someone who may get them"))  # fmt: skip
    fields = None
    tj = got[TRAINJOB_CRD]
    if isinstance(tj, dict):
        fields = crd_spec_fields(tj, TRAINJOB[1])
        if fields is None:
            lines.append(Line("warning", f"TrainJob CRD serves {_versions(tj)}, not {TRAINJOB[1]}: launch.api: "
                                         "trainjob will not work; use launch.api: pytorchjob"))  # fmt: skip
        elif "runtimePatches" in fields:
            lines.append(
                Line("ok", f"TrainJob {_versions(tj)} with runtimePatches (Kubeflow Trainer v2.2 or later)")
            )
        else:
            lines.append(Line("warning", (
                "TrainJob is Trainer v2.1's (podTemplateOverrides, no runtimePatches): multi-node jobs are built "
                "that way when the step may read the CRD (apply manifests/cluster: ClusterRole "
                "paravt-trainjob-crd-reader), launch.ipc_lock is refused and the node pods carry no "
                "securityContext; install Trainer v2.2 or later for both"
            )))  # fmt: skip
    pj = got[PYTORCHJOB_CRD]
    if isinstance(pj, dict):
        lines.append(Line("ok", f"PyTorchJob {_versions(pj)} (training operator: launch.api: pytorchjob)"))
    if tj is None and pj is None:
        lines.append(Line("warning", "neither TrainJob nor PyTorchJob is installed: multi-node stages "
                                     "(launch.nodes > 1) cannot run; install Kubeflow Trainer v2.2 or later"))  # fmt: skip
    elif tj is None:
        lines.append(Line("warning", "no TrainJob CRD: set launch.api: pytorchjob for multi-node stages"))
    kueue = got[KUEUE_CRD]
    if isinstance(kueue, dict):
        lines.append(Line("ok", f"Kueue LocalQueue {_versions(kueue)}: name one in launch.queue_name"))
    elif kueue is None:
        lines.append(Line("ok", "no Kueue: launch.queue_name has no effect"))
    swf = got[SCHEDULED_WORKFLOW_CRD]
    if swf is None:
        lines.append(Line("blocks", "KFP's ScheduledWorkflow CRD is missing: `paravt pipeline schedule` (the "
                                    "nightly eval) cannot work; install Kubeflow Pipelines"))  # fmt: skip
    elif isinstance(swf, dict):
        lines.append(Line("ok", f"KFP ScheduledWorkflow {_versions(swf)}"))
    return lines, fields


def check_namespace(read: _Reader, namespace: str, trainjob_fields: frozenset[str] | None) -> list[Line]:
    lines: list[Line] = []
    launcher = read.configmap(namespace, KFP_LAUNCHER)
    if launcher is None:
        lines.append(Line("blocks", (
            f"no ConfigMap {KFP_LAUNCHER} in {namespace}: KFP's pods there cannot start (their artifact "
            "config); use a profile namespace or the single-user overlay (manifests/README.md)"
        )))  # fmt: skip
    elif isinstance(launcher, int):
        lines.append(Line("warning", f"cannot read ConfigMap {namespace}/{KFP_LAUNCHER} (HTTP {launcher})"))
    elif "defaultPipelineRoot" not in (launcher.get("data") or {}):
        lines.append(Line("warning", f"{namespace}/{KFP_LAUNCHER} sets no defaultPipelineRoot: pass "
                                     "--pipeline-root to submit and schedule"))  # fmt: skip
    else:
        lines.append(
            Line("ok", f"{namespace}/{KFP_LAUNCHER}: pipeline root {launcher['data']['defaultPipelineRoot']}")
        )
    ns = read.namespace(namespace)
    if isinstance(ns, int):
        lines.append(
            Line("warning", f"cannot read namespace {namespace} (HTTP {ns}): Pod Security level unknown")
        )
        return lines
    if ns is None:
        lines.append(Line("blocks", f"namespace {namespace} does not exist"))
        return lines
    # Unlabelled: the API server's default, privileged unless its admission config says otherwise.
    level = ((ns.get("metadata") or {}).get("labels") or {}).get(PSS_ENFORCE, "privileged")
    if level in ("baseline", "restricted"):
        # Kubernetes pod-security-admission: baseline adds no capability beyond its default set (no IPC_LOCK).
        lines.append(Line("warning", f"namespace {namespace} enforces Pod Security {level}: launch.ipc_lock "
                                     "(RDMA, EFA) is refused there; ask for privileged or leave it off"))  # fmt: skip
    if level == "restricted" and trainjob_fields is not None and "runtimePatches" not in trainjob_fields:
        lines.append(Line("blocks", (
            f"namespace {namespace} enforces Pod Security restricted and Trainer v2.1's TrainJob cannot give "
            "its node pods a securityContext: they are refused; install Trainer v2.2 or later or use "
            "launch.api: pytorchjob"
        )))  # fmt: skip
    return lines


def check_argo(read: _Reader, kfp_namespace: str) -> list[Line]:
    cm = read.configmap(kfp_namespace, ARGO_CONFIGMAP)
    if not isinstance(cm, dict):
        why = "not found" if cm is None else f"HTTP {cm}"
        return [Line("warning", f"cannot read {kfp_namespace}/{ARGO_CONFIGMAP} ({why}): the Workflow TTL and "
                                "retry policy are unknown (--kfp-namespace)")]  # fmt: skip
    defaults = yaml.safe_load((cm.get("data") or {}).get("workflowDefaults") or "") or {}
    spec = defaults.get("spec") or {}
    lines: list[Line] = []
    ttl = spec.get("ttlStrategy") or {}
    if not ttl:
        lines.append(Line("warning", (
            "Argo sets no Workflow TTL (workflowDefaults.spec.ttlStrategy): finished runs are never deleted, so "
            "a multi-node job whose step died is not garbage-collected with its run; the CronJob "
            "paravt-job-reaper (manifests/base) deletes it within 10 minutes of its run's end or its step's last "
            "attempt; add a ttlStrategy (as KFP 2.17's manifests do) to delete the finished runs too"
        )))  # fmt: skip
    else:
        lines.append(Line("ok", f"Workflow TTL {ttl}"))
    retry = (spec.get("templateDefaults") or {}).get("retryStrategy") or {}
    policy = retry.get("retryPolicy") or ARGO_DEFAULT_RETRY_POLICY
    where = (
        "workflowDefaults"
        if retry.get("retryPolicy")
        else "Argo's default: no workflowDefaults retryStrategy"
    )
    if policy == "OnFailure":
        lines.append(Line("warning", f"retry policy {policy} ({where}): a step pod deleted by a drain or a "
                                     "preemption is an error and is not retried; set retryPolicy: Always"))  # fmt: skip
    elif policy == "OnError":
        lines.append(Line("warning", f"retry policy {policy} ({where}): a step pod the kubelet terminates "
                                     "(node-pressure eviction, node shutdown) is a failure and is not retried; "
                                     "set retryPolicy: Always"))  # fmt: skip
    else:
        lines.append(Line("ok", f"retry policy {policy} ({where})"))
    return lines


def diagnose(api_client: Any, namespace: str, kfp_namespace: str = "kubeflow") -> list[Line]:
    read = _Reader(api_client)
    lines, fields = check_crds(read)
    return lines + check_namespace(read, namespace, fields) + check_argo(read, kfp_namespace)


def current_namespace() -> str:
    """The kubeconfig context's namespace, else this pod's, else ``default``."""
    from paravt_core.launch.trainjob import in_cluster_namespace

    try:
        from kubernetes import config

        _, current = config.list_kube_config_contexts(config_file=os.environ.get("KUBECONFIG"))
        return (current or {}).get("context", {}).get("namespace") or in_cluster_namespace()
    except Exception:  # noqa: BLE001 (no kubeconfig: in a pod)
        return in_cluster_namespace()


def doctor(
    namespace: str = "", kfp_namespace: str = "kubeflow", api_client: Any = None, out: Any = print
) -> int:
    """Print the lines and a summary; 1 when something blocks, else 0."""
    import urllib3
    from kubernetes.config import ConfigException

    from paravt_core.launch.trainjob import api_client as make_client

    namespace = namespace or current_namespace()
    try:
        lines = diagnose(api_client if api_client is not None else make_client(), namespace, kfp_namespace)
    except (ConfigException, urllib3.exceptions.HTTPError) as err:  # no kubeconfig, no API server
        out(
            f"blocks: cannot reach the cluster ({type(err).__name__}: {err}); check KUBECONFIG and the context"
        )
        return 1
    for line in lines:
        out(str(line))
    blocking = sum(line.level == "blocks" for line in lines)
    warnings = sum(line.level == "warning" for line in lines)
    out(f"doctor: {blocking} blocking, {warnings} warnings (namespace {namespace}, KFP in {kfp_namespace})")
    return 1 if blocking else 0
