"""A real HTTP server on loopback speaking the KFP v2beta1 REST endpoints that ``paravt pipeline`` calls.

Paths and bodies follow kfp_server_api 2.17 (the generated client kfp.Client uses): healthz,
experiments (list with a display_name filter, create), runs (create, list by recurring_run_id, get,
``:retry``), recurring runs (create, list, delete, ``:enable``, ``:disable``). It keeps state like the real
server (ids, run states, schedule modes), answers errors in the server's JSON shape, and records every
request so tests can assert on methods, paths, query strings, headers and bodies. ``tag_name`` picks the
release it answers as where releases differ (the delete's propagation policy, from KFP 2.16.0 on).
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

API = "/apis/v2beta1"


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    body: Any


@dataclass
class KfpState:
    token: str | None = None  # when set, every request must carry "Authorization: Bearer <token>"
    experiments: dict[str, dict] = field(default_factory=dict)
    runs: dict[str, dict] = field(default_factory=dict)
    recurring_runs: dict[str, dict] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    # Multi-user mode: the (resource, verb) pairs of pipelines.kubeflow.org the caller is granted;
    # None = no authorization (single-user). See ``required_permission``.
    grants: set[tuple[str, str]] | None = None
    # What healthz reports as tag_name (backend/src/apiserver/main.go, the /apis/v2beta1/healthz handler).
    # KFP 2.15.0's release images say "unknown" (built without the TAG_NAME build arg until 2.16.0).
    tag_name: str = "2.17.0"
    # Runs whose Workflow the garbage collector removed with their recurring run: a delete without
    # ORPHAN deletes the ScheduledWorkflow, which owns its Workflows by controller reference.
    deleted_workflows: list[str] = field(default_factory=list)

    def calls(self, method: str, path_suffix: str = "") -> list[Request]:
        return [r for r in self.requests if r.method == method and r.path.endswith(path_suffix)]

    def orphans(self) -> bool:
        """KFP 2.16.0 added DeleteRecurringRunRequest.propagation_policy; 2.15.0's gateway handler for the
        delete parses no query parameter, so the policy is dropped and the delete goes ahead."""
        major, minor = (
            (int(x) for x in self.tag_name.split(".")[:2]) if self.tag_name[:1].isdigit() else (0, 0)
        )
        return (major, minor) >= (2, 16)

    def scheduled_run(self, recurring_run_id: str, state: str = "RUNNING") -> str:
        """A run the ScheduledWorkflow controller started for an enabled recurring run, as the persistence
        agent reports it (``recurring_run_id`` set: the run's JobUUID); returns its id."""
        job = self.recurring_runs[recurring_run_id]
        assert job["status"] == "ENABLED", "a disabled recurring run starts no run"
        run_id = str(uuid.uuid4())
        self.runs[run_id] = {
            "run_id": run_id,
            "display_name": job["display_name"],
            "experiment_id": job["experiment_id"],
            "recurring_run_id": recurring_run_id,
            "state": state,
        }
        return run_id


def _display_name_filter(query: dict[str, list[str]], key: str = "display_name") -> str | None:
    """The one filter kfp.Client sends here: ``key`` EQUALS (operation 1 or "EQUALS"); display_name, or
    recurring_run_id for runs (backend/src/apiserver/model/run.go, runAPIToModelFieldMap)."""
    if "filter" not in query:
        return None
    predicates = json.loads(query["filter"][0])["predicates"]
    (predicate,) = predicates
    assert predicate["key"] == key and predicate["operation"] in (1, "EQUALS"), predicate
    return predicate["stringValue"]


def required_permission(method: str, route: str) -> tuple[str, str] | None:
    """What multi-user KFP 2.17.0 checks (SubjectAccessReview on pipelines.kubeflow.org) before each
    call this server answers, read from backend/src/apiserver/server/{experiment,run,job}_server.go
    (the Verb of each canAccess* / IsAuthorized call) and common/const.go (resource names: recurring
    runs are ``jobs``). None: not authorized per resource (healthz)."""
    if route == "/healthz":
        return None
    if route == "/experiments":
        return ("experiments", "list" if method == "GET" else "create")
    if route == "/runs":
        return ("runs", "list" if method == "GET" else "create")
    if route.startswith("/runs/"):
        action = route.partition(":")[2]
        return ("runs", action or "get")
    if route == "/recurringruns":
        return ("jobs", "list" if method == "GET" else "create")
    if route.startswith("/recurringruns/"):
        action = route.partition(":")[2]
        return ("jobs", action or ("delete" if method == "DELETE" else "get"))
    return None


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def _reply(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, code: int, message: str) -> None:
        self._reply(status, {"error": message, "code": code, "message": message, "details": []})

    def _handle(self, method: str) -> None:
        state = self.server.state
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        query = parse_qs(url.query)
        state.requests.append(
            Request(method, url.path, query, {k.lower(): v for k, v in self.headers.items()}, body)
        )
        if state.token is not None and self.headers.get("Authorization") != f"Bearer {state.token}":
            return self._error(401, 16, "unauthenticated")
        if not url.path.startswith(API):
            return self._error(404, 5, f"no route {url.path}")
        route = url.path[len(API) :]
        needed = required_permission(method, route)
        if state.grants is not None and needed is not None and needed not in state.grants:
            resource, verb = needed
            return self._error(403, 7, f"PermissionDenied: no {verb} on {resource}.pipelines.kubeflow.org")
        with self.server.lock:
            return self._route(method, route, query, body)

    def _route(self, method: str, route: str, query: dict, body: Any) -> None:
        state = self.server.state
        if (method, route) == ("GET", "/healthz"):
            # The handler's JSON (backend/src/apiserver/main.go), not the proto's GetHealthzResponse.
            health = {"commit_sha": "unknown", "tag_name": state.tag_name, "multi_user": False}
            return self._reply(200, {**health, "pipeline_store": "database"})
        if (method, route) == ("GET", "/experiments"):
            name = _display_name_filter(query)
            found = [e for e in state.experiments.values() if name is None or e["display_name"] == name]
            return self._reply(200, {"experiments": found, "total_size": len(found)} if found else {})
        if (method, route) == ("POST", "/experiments"):
            exp = dict(body, experiment_id=str(uuid.uuid4()), storage_state="AVAILABLE")
            state.experiments[exp["experiment_id"]] = exp
            return self._reply(200, exp)
        if (method, route) == ("POST", "/runs"):
            if body.get("experiment_id") not in state.experiments:
                return self._error(404, 5, f"experiment {body.get('experiment_id')} not found")
            run = dict(body, run_id=str(uuid.uuid4()), state="PENDING")
            state.runs[run["run_id"]] = run
            return self._reply(200, run)
        if (method, route) == ("GET", "/runs"):
            job_id = _display_name_filter(query, "recurring_run_id")
            experiment = query.get("experiment_id", [None])[0]
            found = [
                r
                for r in state.runs.values()
                if (job_id is None or r.get("recurring_run_id") == job_id)
                and (experiment is None or r["experiment_id"] == experiment)
            ]
            start = int(query.get("page_token", ["0"])[0] or 0)
            size = int(query.get("page_size", ["10"])[0])
            page: dict[str, Any] = {"runs": found[start : start + size], "total_size": len(found)}
            if start + size < len(found):
                page["next_page_token"] = str(start + size)
            return self._reply(200, page if found else {})
        if route.startswith("/runs/"):
            run_id, _, action = route[len("/runs/") :].partition(":")
            run = state.runs.get(run_id)
            if run is None:
                return self._error(404, 5, f"run {run_id} not found")
            if method == "GET" and not action:
                return self._reply(200, run)
            if method == "POST" and action == "retry":
                if run["state"] not in ("FAILED", "CANCELED"):
                    return self._error(400, 9, f"run {run_id} is {run['state']}: cannot retry")
                run["state"] = "RUNNING"
                return self._reply(200, {})
        if (method, route) == ("POST", "/recurringruns"):
            if body.get("experiment_id") not in state.experiments:
                return self._error(404, 5, f"experiment {body.get('experiment_id')} not found")
            enabled = body.get("mode") != "DISABLE"  # api_converter.go, toApiRecurringRun: both from Enabled
            job = dict(body, recurring_run_id=str(uuid.uuid4()), status="ENABLED" if enabled else "DISABLED")
            job["mode"] = "ENABLE" if enabled else "DISABLE"
            state.recurring_runs[job["recurring_run_id"]] = job
            return self._reply(200, job)
        if (method, route) == ("GET", "/recurringruns"):
            name = _display_name_filter(query)
            experiment = query.get("experiment_id", [None])[0]
            found = [
                j
                for j in state.recurring_runs.values()
                if (name is None or j["display_name"] == name)
                and (experiment is None or j["experiment_id"] == experiment)
            ]
            return self._reply(200, {"recurringRuns": found, "total_size": len(found)} if found else {})
        if route.startswith("/recurringruns/") and method == "POST":
            job_id, _, action = route[len("/recurringruns/") :].partition(":")
            job = state.recurring_runs.get(job_id)
            if job is None:
                return self._error(404, 5, f"recurring run {job_id} not found")
            if action in ("enable", "disable"):
                job["mode"] = action.upper()
                job["status"] = job["mode"] + "D"
                return self._reply(200, {})
        if route.startswith("/recurringruns/") and method == "DELETE":
            job_id = route[len("/recurringruns/") :]
            if state.recurring_runs.pop(job_id, None) is None:
                return self._error(404, 5, f"recurring run {job_id} not found")
            if not (state.orphans() and query.get("propagation_policy") == ["ORPHAN"]):
                state.deleted_workflows += [
                    i for i, r in state.runs.items() if r.get("recurring_run_id") == job_id
                ]
            return self._reply(200, {})
        return self._error(404, 5, f"no route {method} {route}")

    def do_GET(self) -> None:  # noqa: N802
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._handle("DELETE")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: KfpState) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state
        self.lock = threading.Lock()


class KfpTestServer:
    """``with KfpTestServer(token="t") as kfp: ... kfp.url ... kfp.state.requests``."""

    def __init__(self, token: str | None = None, grants: set[tuple[str, str]] | None = None) -> None:
        self.state = KfpState(token=token, grants=grants)
        self._server = _Server(self.state)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> KfpTestServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
