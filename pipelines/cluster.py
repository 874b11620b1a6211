"""Talk to a Kubeflow Pipelines server: submit a run, schedule a recurring run, retry, status.

Everything goes through ``kfp.Client`` (and its generated ``kfp_server_api`` services for the calls the
client does not wrap, like retry). The bearer token is read from an environment variable and handed to
the client; it is never printed, logged or put in an error message.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from paravt_core.user_errors import ParavtUserError

DEFAULT_TOKEN_ENV = "KFP_TOKEN"
# Run states in which a retry makes no sense: still going, or nothing failed.
_NOT_RETRYABLE = {"PENDING", "RUNNING", "CANCELING", "PAUSED", "SUCCEEDED"}


class ClusterError(ParavtUserError, RuntimeError):
    """A request the user has to fix (bad parameters, bad cron, a run that cannot be retried...)."""


class ClusterUsageError(ClusterError):
    """A mistake in the command line itself (a cron with the wrong field count, an unknown pipeline parameter
    or pipeline name, parameters that are not a mapping): exit status 2, like every usage mistake."""


@dataclass
class Connection:
    """Where the KFP API is and how to authenticate. The token is looked up, never stored here."""

    host: str
    namespace: str = "kubeflow"
    token_env: str = DEFAULT_TOKEN_ENV
    ui_host: str = ""

    def run_url(self, run_id: str) -> str:
        return f"{(self.ui_host or self.host).rstrip('/')}/#/runs/details/{run_id}"

    def recurring_run_url(self, recurring_run_id: str) -> str:
        return f"{(self.ui_host or self.host).rstrip('/')}/#/recurringrun/details/{recurring_run_id}"


@dataclass
class TaskStatus:
    name: str
    state: str
    error: str = ""


@dataclass
class RunStatus:
    run_id: str
    name: str
    state: str
    url: str
    error: str = ""
    tasks: list[TaskStatus] = field(default_factory=list)

    def render(self) -> str:
        lines = [f"run {self.run_id} ({self.name}): {self.state}", f"  {self.url}"]
        if self.error:
            lines.append(f"  error: {self.error}")
        for task in self.tasks:
            lines.append(f"  {task.state:<10} {task.name}" + (f"  ({task.error})" if task.error else ""))
        return "\n".join(lines)


@contextlib.contextmanager
def _quiet_kfp() -> Iterator[None]:
    """kfp.Client prints links and warns on stdout; keep our stdout to the one line we print."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
        warnings.simplefilter("ignore", FutureWarning)
        yield


def client(conn: Connection):
    """A ``kfp.Client`` for ``conn`` with the token from ``$<token_env>`` (absent: no auth header)."""
    import kfp

    token = os.environ.get(conn.token_env) or None
    with _quiet_kfp():
        return kfp.Client(host=conn.host, namespace=conn.namespace, existing_token=token)


def check_cron(cron: str) -> str:
    """KFP (robfig/cron) wants 6 fields, seconds first; a 5-field crontab line would shift every field."""
    fields = cron.split()
    if len(fields) != 6:
        raise ClusterUsageError(
            f"cron {cron!r} has {len(fields)} fields; KFP needs 6, seconds first (nightly at 02:00: '0 0 2 * * *')"
        )
    return " ".join(fields)


def load_parameters(path: str | None) -> dict[str, Any]:
    """Pipeline parameters from a YAML mapping file (``None``: no parameters)."""
    if not path:
        return {}
    data = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(data, dict):
        raise ClusterUsageError(f"{path}: parameters must be a YAML mapping of pipeline parameter -> value")
    return data


def pipeline_parameters(package: str) -> set[str]:
    """Names of the pipeline's input parameters, read from the compiled IR."""
    spec = next(yaml.safe_load_all(Path(package).read_text()))
    return set(spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {}))


def check_parameters(package: str, params: dict[str, Any]) -> None:
    known = pipeline_parameters(package)
    unknown = sorted(set(params) - known)
    if unknown:
        raise ClusterUsageError(
            f"unknown pipeline parameter(s) {', '.join(unknown)}; the pipeline takes: {', '.join(sorted(known))}"
        )


def as_declared_strings(package: str, params: dict[str, Any]) -> dict[str, Any]:
    """Numbers given for STRING pipeline parameters, as text (``sft_gpus: 4`` in a params file):
    KFP 2.17's driver reads a GPU count placeholder with ``GetStringValue()`` (backend/src/v2/driver/
    resolve.go), so a number would silently request no GPU."""
    spec = next(yaml.safe_load_all(Path(package).read_text()))
    types = {
        k: v.get("parameterType")
        for k, v in spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {}).items()
    }
    return {
        k: str(v)
        if types.get(k) == "STRING" and isinstance(v, int | float) and not isinstance(v, bool)
        else v
        for k, v in params.items()
    }


def check_pinned(package: str) -> None:
    """``--strict``: every image of the package referenced by digest."""
    from pipelines.compile import unpinned_images

    if unpinned := unpinned_images(package):
        raise ClusterError(
            f"images not pinned by digest: {', '.join(unpinned)}; push them and compile with "
            "PARAVT_IMAGE_SFT/_RL/_EVAL=registry/name@sha256:... (or leave out --strict)"
        )


def warn_unpinned(pipeline: str, package: str) -> None:
    """The compile warning about images not pinned by digest, given once the parameters are known good."""
    from pipelines.compile import warn_unpinned as warn

    warn(Path(pipeline).stem, package)


@contextlib.contextmanager
def package_path(pipeline: str) -> Iterator[str]:
    """A compiled package for ``pipeline``: a known pipeline name (compiled now, with the recipes it is meant
    to run as its configs' defaults: ``pipelines/compile.py`` ``RECIPES``) or a YAML path."""
    from pipelines.compile import compile_pipeline, pipelines, recipe_configs

    if pipeline in pipelines():
        with tempfile.TemporaryDirectory() as tmp:
            yield compile_pipeline(
                pipeline, str(Path(tmp) / f"{pipeline}.yaml"), warn=False, **recipe_configs(pipeline)
            )
    elif Path(pipeline).is_file():
        yield pipeline
    else:
        raise ClusterUsageError(
            f"{pipeline!r} is neither a pipeline name ({', '.join(sorted(pipelines()))}) nor a compiled YAML file"
        )


def submit(
    conn: Connection,
    pipeline: str,
    *,
    experiment: str,
    run_name: str,
    params: dict[str, Any],
    pipeline_root: str | None = None,
    service_account: str | None = None,
    strict: bool = False,
) -> str:
    """Create one run of ``pipeline`` in ``experiment`` (created if missing); return the run URL. The
    parameter names and the stage configs the run would load (``pipelines/config_check.py``) are checked
    before the host is contacted. ``strict``: refuse a package whose images are not pinned by digest (before
    any API call)."""
    from pipelines.config_check import check_configs

    with package_path(pipeline) as package:
        if strict:
            check_pinned(package)
        check_parameters(package, params)
        check_configs(package, params)
        if not strict:
            warn_unpinned(pipeline, package)
        params = as_declared_strings(package, params)
        kfp_client = client(conn)
        with _quiet_kfp():
            result = kfp_client.create_run_from_pipeline_package(
                package,
                arguments=params,
                run_name=run_name,
                experiment_name=experiment,
                namespace=conn.namespace,
                pipeline_root=pipeline_root,
                service_account=service_account,
            )
    return conn.run_url(result.run_id)


SPEC_MARK = "paravt-spec-sha256:"  # in a recurring run's description: what it was created from


def spec_fingerprint(package: str, settings: dict[str, Any]) -> str:
    """sha256 over the compiled package (pipeline and platform spec: every image reference, every default)
    and the recurring run's settings (parameters, cron, account, root): what the deployed nightly is. KFP
    keeps the spec as a protobuf Struct (numbers become doubles), so comparing a hash we wrote beats
    comparing the spec the server gives back."""
    import hashlib
    import json

    docs = [d for d in yaml.safe_load_all(Path(package).read_text()) if d is not None]
    text = json.dumps({"package": docs, **settings}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def schedule(
    conn: Connection,
    pipeline: str,
    *,
    experiment: str,
    name: str,
    cron: str,
    params: dict[str, Any],
    enabled: bool = True,
    pipeline_root: str | None = None,
    service_account: str | None = None,
    exist_ok: bool = False,
    sync: bool = False,
    strict: bool = False,
) -> str:
    """Create a recurring run: one run at a time, no catch-up of missed slots; return its id.

    A recurring run of the same name in the experiment is an error, or with ``exist_ok`` the answer. With
    ``sync`` (the manifests' CronJob) the answer only while it was made from this very pipeline, images,
    parameters, cron, account and root; otherwise the new one is created and then the old ones retired
    (``retire_recurring_run``; KFP 2.17 cannot update a recurring run: backend/api/v2beta1/
    recurring_run.proto has no Update)."""
    import json

    cron = check_cron(cron)
    if strict:
        with package_path(pipeline) as package:
            check_pinned(package)
    kfp_client = client(conn)
    with _quiet_kfp():
        experiment_id = kfp_client.create_experiment(experiment, namespace=conn.namespace).experiment_id
        same_name = json.dumps(
            {"predicates": [{"operation": "EQUALS", "key": "display_name", "stringValue": name}]}
        )
        existing = kfp_client.list_recurring_runs(experiment_id=experiment_id, filter=same_name)
    old = list(existing.recurring_runs or [])
    if old and not sync:
        if exist_ok:
            return old[0].recurring_run_id
        raise ClusterError(
            f"a recurring run named {name!r} already exists in experiment {experiment!r} "
            f"(id {old[0].recurring_run_id}); disable it or pick another --name"
        )
    from pipelines.config_check import check_configs

    with package_path(pipeline) as package:
        check_parameters(package, params)
        check_configs(package, params)  # what every night's first GPU step would refuse
        if not strict:
            warn_unpinned(pipeline, package)
        params = as_declared_strings(package, params)
        settings = {
            "params": params,
            "cron": cron,
            "service_account": service_account,
            "pipeline_root": pipeline_root,
            "enabled": enabled,
        }
        mark = SPEC_MARK + spec_fingerprint(package, settings)
        current = [r for r in old if mark in (r.description or "")]
        if current:
            kept = current[0].recurring_run_id
        else:
            with _quiet_kfp():
                kept = kfp_client.create_recurring_run(
                    experiment_id=experiment_id,
                    job_name=name,
                    description=mark,
                    cron_expression=cron,
                    # A nightly eval that overruns must not pile up, and a paused schedule must not
                    # replay every missed night when re-enabled.
                    max_concurrency=1,
                    no_catchup=True,
                    params=params,
                    pipeline_package_path=package,
                    enabled=enabled,
                    pipeline_root=pipeline_root,
                    service_account=service_account,
                ).recurring_run_id
    # Created first, retired after: a failure in between leaves two (the next sync removes the old one),
    # never none.
    replaced = [run for run in old if run.recurring_run_id != kept]
    can_orphan = bool(replaced) and server_can_orphan(kfp_client)
    for run in replaced:
        retire_recurring_run(kfp_client, run, experiment_id, kept, can_orphan)
    return kept


# The first KFP release whose DeleteRecurringRunRequest has propagation_policy (backend/api/v2beta1/
# recurring_run.proto: 2.15.0 has only recurring_run_id, 2.16.0 adds the field).
_ORPHAN_SINCE = (2, 16)
# Run states whose Workflow still exists and may still be working (backend/api/v2beta1/run.proto,
# RuntimeState); SUCCEEDED, SKIPPED, FAILED and CANCELED are final.
ACTIVE_RUN_STATES = ("PENDING", "RUNNING", "CANCELING", "PAUSED")


def server_can_orphan(kfp_client: Any) -> bool:
    """Whether the KFP API server honours ``propagation_policy=ORPHAN`` on a recurring run's delete, from
    its healthz ``tag_name``. The API itself cannot tell: KFP 2.15.0's gateway handler for the delete reads
    only the path (no query parameter is parsed), so ORPHAN is dropped and the delete succeeds anyway.
    kfp.Client's own healthz model keeps only ``multi_user``, hence the raw body. A tag that is not a
    version (2.15.0's release images say "unknown": no TAG_NAME build arg before 2.16.0) counts as no."""
    import json
    import re

    import kfp_server_api

    try:
        with _quiet_kfp():
            raw = kfp_client._healthz_api.healthz_service_get_healthz(_preload_content=False).data
        tag = str(json.loads(raw).get("tag_name") or "")
    except (kfp_server_api.ApiException, ValueError, AttributeError):
        return False  # unknown: the path that is safe on every release
    found = re.match(r"v?(\d+)\.(\d+)\.", tag)
    return bool(found) and (int(found[1]), int(found[2])) >= _ORPHAN_SINCE


def active_runs(kfp_client: Any, experiment_id: str, recurring_run_id: str) -> list[Any]:
    """The runs of ``recurring_run_id`` whose state is not final (every page)."""
    import json

    only_this = json.dumps(
        {"predicates": [{"operation": "EQUALS", "key": "recurring_run_id", "stringValue": recurring_run_id}]}
    )
    found: list[Any] = []
    token = ""
    while True:
        with _quiet_kfp():
            page = kfp_client.list_runs(
                page_token=token, page_size=100, experiment_id=experiment_id, filter=only_this
            )
        found += [r for r in page.runs or [] if str(r.state or "") in ACTIVE_RUN_STATES]
        token = page.next_page_token or ""
        if not token:
            return found


def retire_recurring_run(kfp_client: Any, run: Any, experiment_id: str, kept: str, can_orphan: bool) -> None:
    """Delete a replaced recurring run without stopping a nightly in progress. Its Workflows are owned by its
    ScheduledWorkflow (controller ref), so a plain delete has the garbage collector remove a running one.
    Where the server takes ORPHAN (KFP >= 2.16), delete with it. Elsewhere disable it first (no new run
    starts), delete it only while none of its runs is active, and otherwise leave it disabled for the next
    sync (the manifests' CronJob, daily at 01:30 UTC) to delete."""
    old_id = run.recurring_run_id
    if can_orphan:
        with _quiet_kfp():
            kfp_client._recurring_run_api.recurring_run_service_delete_recurring_run(
                old_id, propagation_policy="ORPHAN"
            )
        print(f"recurring run {old_id}: replaced by {kept}", file=sys.stderr)
        return
    if str(run.status or "") != "DISABLED":
        with _quiet_kfp():
            kfp_client.disable_recurring_run(old_id)
    busy = active_runs(kfp_client, experiment_id, old_id)
    if busy:
        names = ", ".join(f"{r.run_id} ({r.state})" for r in busy)
        print(
            f"recurring run {old_id}: replaced by {kept}, disabled but not deleted: its run {names} is still "
            "active and this KFP server cannot delete a recurring run without stopping its runs (no "
            "propagation_policy before KFP 2.16); the next --sync deletes it once none is active",
            file=sys.stderr,
        )
        return
    with _quiet_kfp():
        kfp_client.delete_recurring_run(old_id)
    print(f"recurring run {old_id}: replaced by {kept}", file=sys.stderr)


def set_schedule_enabled(conn: Connection, recurring_run_id: str, enabled: bool) -> None:
    kfp_client = client(conn)
    with _quiet_kfp():
        if enabled:
            kfp_client.enable_recurring_run(recurring_run_id)
        else:
            kfp_client.disable_recurring_run(recurring_run_id)


def _error_text(error: Any) -> str:
    return (getattr(error, "message", None) or "") if error is not None else ""


def status(conn: Connection, run_id: str) -> RunStatus:
    kfp_client = client(conn)
    with _quiet_kfp():
        run = kfp_client.get_run(run_id)
    tasks = []
    for task in (run.run_details.task_details or []) if run.run_details else []:
        tasks.append(TaskStatus(task.display_name or "", str(task.state or ""), _error_text(task.error)))
    return RunStatus(
        run_id=run.run_id,
        name=run.display_name or "",
        state=str(run.state or ""),
        url=conn.run_url(run.run_id),
        error=_error_text(run.error),
        tasks=tasks,
    )


def retry(conn: Connection, run_id: str) -> str:
    """KFP's retry of a failed run: failed tasks rerun in place, and our stages resume from their
    checkpoints. Returns the run URL."""
    kfp_client = client(conn)
    with _quiet_kfp():
        run = kfp_client.get_run(run_id)
    state = str(run.state or "")
    if state in _NOT_RETRYABLE:
        raise ClusterError(f"run {run_id} is {state}; only a failed run can be retried")
    with _quiet_kfp():
        kfp_client.runs.run_service_retry_run(run_id=run_id)
    return conn.run_url(run_id)


def api_error_message(err: Exception, host: str = "") -> str:
    """One line for a failed KFP call: status and the server's message (the request, with its
    Authorization header, is never part of it); ``host`` is named when it cannot be reached."""
    import json

    status_code = getattr(err, "status", None)
    if status_code is None:  # connection refused, DNS, TLS...
        at = f" at {host}" if host else ""
        return f"cannot reach the KFP API{at} ({type(err).__name__}); check --host / KF_PIPELINES_ENDPOINT"
    message = ""
    body = getattr(err, "body", None)
    if body:
        try:
            payload = json.loads(body)
            message = payload.get("message") or payload.get("error") or ""
        except (ValueError, AttributeError):
            message = str(body)[:300]
    return f"KFP API error {status_code} {getattr(err, 'reason', '') or ''}: {message}".rstrip(": ")
