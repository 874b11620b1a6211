"""Delete the multi-node jobs of this namespace that no pipeline step will follow again.

Why: a multi-node step deletes its TrainJob/PyTorchJob when it ends (``trainjob.py``: on completion, on
failure, on SIGTERM unless Argo reruns the step), but a step pod killed hard (SIGKILL, a lost node) sends
no DELETE. The job is owned by the run's Argo Workflow, so the garbage collector removes it with the
Workflow; KFP 2.17's Argo config deletes finished Workflows after 1 h (``workflowDefaults.ttlStrategy``),
KFP 2.15.0's has no ``workflowDefaults`` (tests/fixtures/k8s/argo-workflow-controller-configmap.kfp-2.15.0.yaml)
and nothing deletes the Workflow: the job would run to its deadline, days of 16 GPUs. This runs as a
CronJob (manifests/base/job-reaper.yaml), ``python -m paravt_core.launch.reaper``.

The rule, per job carrying our labels (``trainjob.labels``: never another tool's job):

- no Workflow owner (made outside a KFP step): kept, not ours to judge;
- the owning Workflow is gone (or replaced: another uid): deleted;
- the Workflow has finished, phase ``Succeeded``, ``Failed`` or ``Error`` (Argo v3.7.3 and v4.0.5,
  pkg/apis/workflow/v1alpha1/workflow_phase.go, ``WorkflowPhase.Completed``): no step of it runs again,
  deleted (a later ``paravt pipeline retry`` of the run creates the job again; the stage resumes from its
  checkpoints);
- the Workflow still runs (a failed step ends the Workflow only when its DAG ends: Argo's DAG stops
  scheduling new tasks and waits for the running ones, ``DAGTemplate.FailFast``): the job names the
  outermost Workflow node that may start its step again (``trainjob.argo_node``: the retry node of KFP's
  executor, or of an enclosing DAG where workflowDefaults give every template a retryStrategy, as KFP 2.17
  and manifests/options/argo-retry-always do). Deleted only when that node is fulfilled, ``Succeeded``,
  ``Failed``, ``Error``, ``Skipped`` or ``Omitted`` (workflow_types.go, ``NodePhase.Fulfilled``), and no pod
  under it is still running. Argo's ``processNodeRetries``
  (workflow/controller/operator.go) gives a retry node its last attempt's phase only once it starts no
  further attempt; while an attempt runs, or a retry waits out its backoff, the node stays ``Running`` and
  the job is kept for the attempt that re-attaches to it. This reads Argo's own decision instead of
  predicting it (``trainjob.argo_retry`` answers "no rerun" where it cannot tell, which is the safe side
  for a SIGTERM but the unsafe one here); the node unknown (not in the status, the job names none) keeps it.

One log line per job; ``--dry-run`` decides and deletes nothing. A delete carries the job's uid as a
precondition, so a job of the same name created since the listing (a rerun) is never the one deleted.

``--rollout-servers`` (manifests/components/rollout-server adds it): the rollout server idles at 0 replicas
and the multi-node RL step scales it up (``trainjob.wake_rollout_server``, stamping
``ROLLOUT_WANTED_ANNOTATION``). Each pass stamps it again while an RL job of ours lives, and scales a
Deployment labelled ``paravt.io/scale-to-zero=true`` back to 0 once no RL job has lived for
``--rollout-grace-s`` (retries and the next attempt's start fall inside it). Only a Deployment a step
stamped is scaled down; the patch carries the resourceVersion read, so a step's wake-up in between wins
(409, kept).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Callable, Iterable
from typing import Any

from paravt_core.launch.trainjob import (
    ARGO_NODE_ANNOTATION,
    KINDS,
    NODE_NAME_ANNOTATION,
    ROLLOUT_WANTED_ANNOTATION,
    api_client,
    in_cluster_namespace,
    say,
)

# Our jobs only (trainjob.labels): the API server filters, so another tool's job is never even read.
SELECTOR = "app.kubernetes.io/managed-by=paravt,paravt.io/run,paravt.io/stage"
WORKFLOW = ("argoproj.io", "v1alpha1", "workflows")
WORKFLOW_FINISHED = frozenset({"Succeeded", "Failed", "Error"})  # WorkflowPhase.Completed
NODE_FULFILLED = frozenset({"Succeeded", "Failed", "Error", "Skipped", "Omitted"})  # NodePhase.Fulfilled
# Argo labels every pod of a Workflow with its name (workflow/common/common.go, LabelKeyWorkflow).
WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
POD_DONE = frozenset({"Succeeded", "Failed"})
ROLLOUT_SELECTOR = "paravt.io/scale-to-zero=true"  # the rollout server's Deployment (its component)
ROLLOUT_GRACE_S = 3600.0


@dataclasses.dataclass(frozen=True)
class Decision:
    delete: bool
    why: str


def workflow_ref(job: dict[str, Any]) -> dict[str, Any] | None:
    """The job's owner reference to an Argo Workflow (``trainjob.workflow_owner`` wrote it), or None."""
    for ref in (job.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "Workflow" and str(ref.get("apiVersion", "")).startswith("argoproj.io/"):
            return ref
    return None


def node_pods(pods: Iterable[Any], node: str) -> list[Any]:
    """The pods under ``node``: Argo's node-name annotation is the node itself, or an attempt "(n)" of it
    and what that attempt runs ("<node>(n).<task>...")."""
    attempt = re.compile(re.escape(node) + r"(\(\d+\)(\..*)?)?")
    return [
        p
        for p in pods
        if attempt.fullmatch(
            ((p.metadata.annotations if p.metadata else None) or {}).get(NODE_NAME_ANNOTATION, "")
        )
    ]


def decide(
    job: dict[str, Any], workflow: dict[str, Any] | None, pods: Callable[[str, str], list[Any]]
) -> Decision:
    """Whether to delete ``job``, given its owning Workflow as read now (None: not found) and ``pods``
    (Workflow name, node name) -> that node's pods, asked only when the answer decides."""
    ref = workflow_ref(job)
    if ref is None:
        return Decision(False, "no owning Workflow (not made by a pipeline step): not ours to judge")
    name = ref.get("name", "")
    if workflow is None:
        return Decision(True, f"its Workflow {name} is gone")
    if (workflow.get("metadata") or {}).get("uid") != ref.get("uid"):
        return Decision(
            True, f"its Workflow {name} is gone (a Workflow of that name with another uid exists)"
        )
    phase = (workflow.get("status") or {}).get("phase") or ""
    if phase in WORKFLOW_FINISHED:
        return Decision(True, f"its Workflow {name} has finished ({phase}): no step of it runs again")
    node = ((job.get("metadata") or {}).get("annotations") or {}).get(ARGO_NODE_ANNOTATION, "")
    if not node:
        return Decision(
            False, f"its Workflow {name} is {phase or 'not started'}; the job names no Workflow node"
        )
    found = [n for n in ((workflow.get("status") or {}).get("nodes") or {}).values() if n.get("name") == node]
    if not found:
        return Decision(False, f"its Workflow {name} is {phase}; node {node} is not in its status")
    node_phase = found[0].get("phase") or "Pending"
    if node_phase not in NODE_FULFILLED:
        return Decision(False, f"node {node} is {node_phase}: Argo may still run the step, which re-attaches")
    live = [
        p.metadata.name for p in pods(name, node) if (p.status.phase if p.status else None) not in POD_DONE
    ]
    if live:
        return Decision(False, f"node {node} is {node_phase} but its pod {live[0]} still runs")
    message = found[0].get("message")
    return Decision(
        True,
        f"node {node} ended {node_phase}" + (f" ({message})" if message else "")
        + f" and Argo starts no further attempt; Workflow {name} is still {phase}",
    )  # fmt: skip


def rollout_decision(
    replicas: int, wanted_at: str | None, rl_jobs: list[str], now: float, grace_s: float
) -> tuple[str, str]:
    """(action, why) for a rollout server's Deployment: "stamp" (an RL job lives), "scale" (to 0) or "keep"."""
    if rl_jobs:
        return "stamp", f"RL job {rl_jobs[0]} lives"
    if replicas == 0:
        return "keep", "at 0 replicas"
    try:
        idle = now - float(wanted_at or "")
    except ValueError:
        return "keep", f"not scaled up by a pipeline step (no {ROLLOUT_WANTED_ANNOTATION})"
    if idle < grace_s:
        return "keep", f"last wanted {idle:.0f}s ago, within the {grace_s:.0f}s grace"
    return "scale", f"no RL job of ours for {idle:.0f}s (grace {grace_s:.0f}s)"


class Reaper:
    """One pass over this namespace's jobs, through the ``kubernetes`` client."""

    def __init__(
        self, client: Any, namespace: str, *, dry_run: bool = False, log: Callable[[str], None] = say,
        rollout_servers: bool = False, rollout_grace_s: float = ROLLOUT_GRACE_S,
    ) -> None:  # fmt: skip
        from kubernetes import client as k8s

        self.custom, self.core = k8s.CustomObjectsApi(client), k8s.CoreV1Api(client)
        self.apps = k8s.AppsV1Api(client)
        self.namespace, self.dry_run, self.log = namespace, dry_run, log
        self.rollout_servers, self.rollout_grace_s = rollout_servers, rollout_grace_s
        self._workflows: dict[str, dict[str, Any] | None] = {}
        self._pods: dict[str, list[Any]] = {}

    def workflow(self, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        if name not in self._workflows:
            try:
                self._workflows[name] = self.custom.get_namespaced_custom_object(
                    *WORKFLOW[:2], self.namespace, WORKFLOW[2], name
                )
            except ApiException as err:
                if err.status != 404:
                    raise
                self._workflows[name] = None
        return self._workflows[name]

    def pods(self, workflow: str, node: str) -> list[Any]:
        if workflow not in self._pods:
            selector = f"{WORKFLOW_LABEL}={workflow}"
            self._pods[workflow] = self.core.list_namespaced_pod(
                self.namespace, label_selector=selector
            ).items
        return node_pods(self._pods[workflow], node)

    def run(self) -> list[tuple[str, str, Decision]]:
        """Decide (and unless ``dry_run``, act) on every job of ours; returns (kind, name, decision)."""
        from kubernetes.client.exceptions import ApiException

        done: list[tuple[str, str, Decision]] = []
        rl_jobs: list[str] = []  # RL jobs of ours that still live after this pass
        for group, version, plural, kind in KINDS.values():
            try:
                jobs = self.custom.list_namespaced_custom_object(
                    group, version, self.namespace, plural, label_selector=SELECTOR
                )["items"]
            except ApiException as err:
                if err.status != 404:
                    raise
                self.log(f"{kind}: no such resource in this cluster (HTTP 404); none to reap")
                continue
            for job in jobs:
                meta = job.get("metadata") or {}
                name = meta.get("name", "")
                if meta.get("deletionTimestamp"):
                    decision = Decision(False, "already being deleted")
                else:
                    ref = workflow_ref(job)
                    decision = decide(job, self.workflow(ref["name"]) if ref else None, self.pods)
                done.append((kind, name, decision))
                said = self._act(group, version, plural, meta, decision)
                self.log(f"{kind} {self.namespace}/{name}: {said}")
                rl = (meta.get("labels") or {}).get("paravt.io/stage") == "rl"
                if rl and not said.startswith(("deleted", "gone")):
                    rl_jobs.append(name)
        if self.rollout_servers:
            self.scale_rollout_servers(rl_jobs)
        return done

    def scale_rollout_servers(self, rl_jobs: list[str], now: float | None = None) -> None:
        """Stamp or scale to 0 each labelled rollout server (``rollout_decision``), one line each."""
        import time

        from kubernetes.client.exceptions import ApiException

        now = time.time() if now is None else now
        for dep in self.apps.list_namespaced_deployment(
            self.namespace, label_selector=ROLLOUT_SELECTOR
        ).items:
            meta = dep.metadata
            replicas = (dep.spec.replicas if dep.spec else None) or 0
            wanted = (meta.annotations or {}).get(ROLLOUT_WANTED_ANNOTATION)
            action, why = rollout_decision(replicas, wanted, rl_jobs, now, self.rollout_grace_s)
            said = f"kept at {replicas} replicas: {why}"
            if action != "keep" and self.dry_run:
                said = f"would {'stamp it' if action == 'stamp' else 'scale it to 0'} (dry run): {why}"
            elif action != "keep":
                # The resourceVersion read makes the patch conditional: a step's wake-up since wins (409).
                patch: dict[str, Any] = {"metadata": {"resourceVersion": meta.resource_version}}
                if action == "stamp":
                    patch["metadata"]["annotations"] = {ROLLOUT_WANTED_ANNOTATION: str(int(now))}
                else:
                    patch["spec"] = {"replicas": 0}
                try:
                    self.apps.patch_namespaced_deployment(meta.name, self.namespace, patch)
                    said = f"{'stamped as wanted' if action == 'stamp' else 'scaled to 0'}: {why}"
                except ApiException as err:
                    if err.status != 409:
                        raise
                    said = f"kept: changed since it was read (a step woke it; {why})"
            self.log(f"Deployment {self.namespace}/{meta.name}: {said}")

    def _act(self, group: str, version: str, plural: str, meta: dict[str, Any], decision: Decision) -> str:
        from kubernetes import client as k8s
        from kubernetes.client.exceptions import ApiException

        if not decision.delete:
            return f"kept: {decision.why}"
        if self.dry_run:
            return f"would delete (dry run): {decision.why}"
        body = k8s.V1DeleteOptions(
            propagation_policy="Foreground", preconditions=k8s.V1Preconditions(uid=meta.get("uid"))
        )
        try:
            self.custom.delete_namespaced_custom_object(
                group, version, self.namespace, plural, meta.get("name", ""), body=body
            )
        except ApiException as err:
            if err.status == 404:
                return f"gone already: {decision.why}"
            if (
                err.status == 409
            ):  # the uid precondition: a new job of that name (a rerun's) since the listing
                return f"kept: replaced by a new job since it was listed ({decision.why})"
            raise
        return f"deleted: {decision.why}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m paravt_core.launch.reaper",
        description="Delete this namespace's multi-node TrainJobs/PyTorchJobs (label app.kubernetes.io/"
        "managed-by=paravt) whose Argo Workflow has finished or is gone, or whose step Argo will not run again.",
    )
    parser.add_argument("--namespace", default="", help="namespace to clean (default: this pod's own)")
    parser.add_argument("--dry-run", action="store_true", help="decide and log each job, delete nothing")
    parser.add_argument(
        "--rollout-servers", action="store_true",
        help=f"also scale Deployments labelled {ROLLOUT_SELECTOR} to 0 when no RL job of ours lives",
    )  # fmt: skip
    parser.add_argument(
        "--rollout-grace-s", type=float, default=ROLLOUT_GRACE_S,
        help="seconds a rollout server stays up after an RL job was last seen (default: %(default)s)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    namespace = args.namespace or in_cluster_namespace()
    Reaper(
        api_client(), namespace, dry_run=args.dry_run, rollout_servers=args.rollout_servers,
        rollout_grace_s=args.rollout_grace_s,
    ).run()  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
