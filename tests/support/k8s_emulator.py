"""A Kubernetes API emulator on loopback, for the few endpoints the multi-node launcher calls.

No cluster can run here, so the launcher's real ``kubernetes`` client talks HTTP to this server instead:
custom objects (create / get / list / patch / delete, namespaced; a list filtered by ``labelSelector``, a
delete checked against its ``preconditions.uid``; apps/v1 Deployments take the same route), pods listed by an equality label selector,
read by name or watched (``watch_pods``), and a pod's log; ``latency_s`` delays every request. Like the API server, a create is validated against the CRD's ``openAPIV3Schema`` when one is
registered (HTTP 422 with the validator's message), a second create of a name answers 409, and unknown
objects 404.

Unknown fields (``fieldValidation=Strict``): the API server prunes every field of a custom object that the
CRD's structural schema does not declare (kubernetes/apiextensions-apiserver, pkg/apiserver/schema/pruning/
algorithm.go, ``prune``: ``properties`` declare fields, ``additionalProperties`` a map of any keys,
``x-kubernetes-preserve-unknown-fields: true`` keeps the unknown ones, arrays go by ``items``; ``apiVersion``,
``kind`` and ``metadata`` at the root are left to the ObjectMeta decoder, pkg/apiserver/schema/objectmeta/
coerce.go, ``GetObjectMetaWithOptions``, which reports the fields ObjectMeta's JSON does not have). Without
strict validation the job is stored without them, silently. A create with ``fieldValidation=Strict`` in its
query is refused instead (pkg/apiserver/customresource_handler.go, ``schemaCoercingDecoder.Decode``: one
``unknown field "<path>"`` per field, in a strict decoding error; HTTP 400 BadRequest): k8s.io/apimachinery
pkg/apis/meta/v1/types.go, ``CreateOptions.FieldValidation``, "Strict: This will fail the request with a
BadRequest error if any unknown fields would be dropped from the object". Read at apiextensions-apiserver
commit 1aa2717a (2026-07-22) and apimachinery commit eed236ce (2026-07-23); the field validation is GA
since Kubernetes 1.27. The paths are written as the pruner writes them: ``spec.a.b``, ``items[0].c``. The test plays the controller: it sets statuses, adds pods and appends to their logs.
Every request is recorded as (verb, resource) so tests can check RBAC against what was really called.

A custom-object list applies its ``labelSelector`` as the API server does (k8s.io/apimachinery
pkg/labels/selector.go, ``Parse``: ``k=v``/``k==v``, ``k!=v``, ``k`` exists, ``!k`` absent, comma = and;
the set forms are refused here, HTTP 400). A delete whose ``DeleteOptions.preconditions.uid`` differs from
the object's is refused with 409 Conflict and the object kept (k8s.io/apiserver pkg/storage/etcd3/store.go,
``checkPreconditions``: "Precondition failed: UID in precondition: ..., UID in object meta: ...", a
``StorageError`` of code ``ErrCodeInvalidObj``, which the registry turns into a Conflict). A plural in
``absent`` answers 404 to every request, as for a resource whose CRD is not installed.

Written by hand (rather than ``kmock``) to keep the emulator synchronous and tiny: the launcher's
client is the official synchronous one, and the endpoints are five.
"""

from __future__ import annotations

import copy
import json
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import jsonschema

_CUSTOM = re.compile(
    r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?$"
)
# ObjectMeta's and OwnerReference's JSON field names (k8s.io/apimachinery pkg/apis/meta/v1/types.go).
OBJECT_META = {
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
    "ownerReferences", "finalizers", "managedFields",
}  # fmt: skip
OWNER_REFERENCE = {"apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion"}
_ROOT_META = ("apiVersion", "kind", "metadata")
_PODS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods(?:/(?P<name>[^/]+)(?P<log>/log)?)?$")
# Read-only, for the pre-flight: CRDs (cluster-scoped), ConfigMaps and Namespaces by name.
_CRDS = re.compile(r"^/apis/apiextensions\.k8s\.io/v1/customresourcedefinitions(?:/(?P<name>[^/]+))?$")
_CONFIGMAP = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/configmaps/(?P<name>[^/]+)$")
_NAMESPACE = re.compile(r"^/api/v1/namespaces/(?P<name>[^/]+)$")


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def unknown_fields(
    obj: Any, schema: dict[str, Any] | None, path: str = "", root: bool = False, keep: bool = False
) -> list[str]:
    """The paths of the fields in ``obj`` that the structural ``schema`` does not declare (what the API
    server would prune); at the ``root``, ``metadata`` is checked against ObjectMeta's fields. ``keep``:
    under ``x-kubernetes-preserve-unknown-fields`` (the pruner's ``skipPrune``: declared fields are still
    checked, the others kept)."""
    schema = schema or {}
    keep = keep or bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    found: list[str] = []
    if isinstance(obj, dict):
        props, extra = schema.get("properties") or {}, schema.get("additionalProperties")
        embedded = root or bool(schema.get("x-kubernetes-embedded-resource"))
        for key, value in obj.items():
            if embedded and key in _ROOT_META:
                if key == "metadata" and root:
                    found += _unknown_meta(value, _join(path, key))
            elif key in props:
                found += unknown_fields(value, props[key], _join(path, key))
            elif isinstance(extra, dict):
                found += unknown_fields(value, extra, _join(path, key))
            elif not keep and extra is not True:
                found.append(_join(path, key))
    elif isinstance(obj, list):
        items = schema.get("items")
        if keep and not isinstance(items, dict):
            return []
        for i, value in enumerate(obj):
            found += unknown_fields(
                value, items if isinstance(items, dict) else None, f"{path}[{i}]", keep=keep
            )
    return found


def _unknown_meta(meta: Any, path: str) -> list[str]:
    if not isinstance(meta, dict):
        return []
    found = [_join(path, k) for k in meta if k not in OBJECT_META]
    for i, ref in enumerate(meta.get("ownerReferences") or []):
        found += [f"{path}.ownerReferences[{i}].{k}" for k in ref if k not in OWNER_REFERENCE]
    return found


class Emulator:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (plural, ns, name) -> object
        self.schemas: dict[str, dict[str, Any]] = {}  # plural -> openAPIV3Schema
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.logs: dict[tuple[str, str], bytes] = {}
        self.requests: list[tuple[str, str]] = []  # (verb, resource) as RBAC names them
        self.created = threading.Event()
        self.failures: list[int] = []  # status codes to answer the next custom-object GETs with
        # (verb, status, committed) to answer the next custom-object create/delete with; committed: the
        # change is made and the error still returned (an API server timing out after etcd's write)
        self.write_failures: list[tuple[str, int, bool]] = []
        self.field_validation: list[str] = []  # each custom-object create's fieldValidation ("" = none)
        self.crds: dict[str, dict[str, Any]] = {}  # metadata.name -> CustomResourceDefinition
        self.configmaps: dict[tuple[str, str], dict[str, Any]] = {}  # (ns, name) -> ConfigMap
        self.namespaces: dict[str, dict[str, Any]] = {}  # name -> Namespace
        self.forbidden: set[str] = set()  # resources answered 403 (no RBAC grant)
        self.absent: set[str] = set()  # custom-object plurals answered 404 (their CRD is not installed)
        self.selectors: list[tuple[str, str]] = []  # (plural, labelSelector) of each custom-object list
        self.latency_s = 0.0  # added to every request before it is handled (a slow API server or network)
        self.changed = threading.Condition(self.lock)  # a pod changed: open watches send it
        self.closing = False
        self.pod_version = 0  # the pods' resourceVersion counter
        emulator = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, code: int, body: Any, content_type: str = "application/json") -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> Any:
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n) or b"{}")

            def do_GET(self) -> None:
                time.sleep(emulator.latency_s)
                if emulator.watch_pods(self):
                    return
                self._send(*emulator.handle("GET", self.path, None))

            def do_POST(self) -> None:
                time.sleep(emulator.latency_s)
                self._send(*emulator.handle("POST", self.path, self._body()))

            def do_PATCH(self) -> None:
                time.sleep(emulator.latency_s)
                kind = (self.headers.get("Content-Type") or "").split(";")[0].strip()
                self._send(*emulator.handle("PATCH", self.path, self._body(), kind))

            def do_DELETE(self) -> None:
                body = self._body()  # read first: the request counts even if its client dies meanwhile
                time.sleep(emulator.latency_s)
                self._send(*emulator.handle("DELETE", self.path, body))

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                if not isinstance(sys.exc_info()[1], ConnectionError):  # a client killed mid-request: fine
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # --- lifecycle ------------------------------------------------------------------------------
    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Emulator:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        with self.changed:
            self.closing = True  # open watches end
            self.changed.notify_all()
        self.server.shutdown()
        self.server.server_close()

    def client(self) -> Any:
        """An ``ApiClient`` of the official client pointed at this emulator."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.host
        return client.ApiClient(cfg)

    def register_crd(self, crd: dict[str, Any]) -> None:
        version = crd["spec"]["versions"][0]
        self.schemas[crd["spec"]["names"]["plural"]] = version["schema"]["openAPIV3Schema"]
        self.crds[crd["metadata"]["name"]] = copy.deepcopy(crd)

    # --- HTTP -----------------------------------------------------------------------------------
    def handle(
        self, method: str, path: str, body: Any, content_type: str = ""
    ) -> tuple[int, Any] | tuple[int, Any, str]:
        url = urlparse(path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if m := _CUSTOM.match(url.path):
            if method == "PATCH":
                return self._patch(m["plural"], m["ns"], m["name"], body, content_type)
            return self._custom(method, m["plural"], m["ns"], m["name"], body, query)
        if m := _PODS.match(url.path):
            return self._pods(method, m["ns"], m["name"], bool(m["log"]), query)
        if method == "GET" and (m := _CRDS.match(url.path)):
            return self._read("customresourcedefinitions", self.crds, m["name"])
        if method == "GET" and (m := _CONFIGMAP.match(url.path)):
            return self._read("configmaps", self.configmaps, (m["ns"], m["name"]))
        if method == "GET" and (m := _NAMESPACE.match(url.path)):
            return self._read("namespaces", self.namespaces, m["name"])
        return 404, _status(404, "NotFound", f"no route {url.path}")

    def _custom(
        self, method: str, plural: str, ns: str, name: str | None, body: Any, query: dict[str, str]
    ) -> tuple[int, Any]:
        verb = {"GET": "get" if name else "list", "POST": "create", "DELETE": "delete"}[method]
        with self.lock:
            self.requests.append((verb, plural))
            if plural in self.absent:
                return 404, _status(404, "NotFound", "the server could not find the requested resource")
            planned = next((f for f in self.write_failures if f[0] == verb), None)
            if planned is not None:
                self.write_failures.remove(planned)
                if not planned[2]:
                    return planned[1], _status(planned[1], "InternalError", "etcdserver: request timed out")
            result = self._write(method, plural, ns, name, body, query) if method != "GET" else None
            if planned is not None:
                return planned[1], _status(planned[1], "InternalError", "etcdserver: request timed out")
            if result is not None:
                return result
            if method == "GET" and name and self.failures:
                code = self.failures.pop(0)
                return code, _status(code, "InternalError", "etcdserver: request timed out")
            if name is None:
                selector = query.get("labelSelector", "")
                self.selectors.append((plural, selector))
                try:
                    wanted = label_selector(selector)
                except ValueError as err:
                    return 400, _status(400, "BadRequest", f"unable to parse requirement: {err}")
                items = [
                    o
                    for (p, n, _), o in self.objects.items()
                    if p == plural and n == ns and wanted((o.get("metadata") or {}).get("labels") or {})
                ]
                return 200, {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}
            obj = self.objects.get((plural, ns, name))
            if obj is None:
                return 404, _status(404, "NotFound", f'{plural} "{name}" not found')
            return 200, obj

    def _patch(self, plural: str, ns: str, name: str | None, body: Any, content_type: str) -> tuple[int, Any]:
        """A merge patch (``application/merge-patch+json``, RFC 7386) or a strategic merge patch of maps and
        scalars only, where both merge alike (what the official client sends for a dict body); a JSON patch
        (a list) is not emulated (415). A ``metadata.resourceVersion`` in the patch must be the object's (409)."""
        with self.lock:
            self.requests.append(("patch", plural))
            if plural in self.absent:
                return 404, _status(404, "NotFound", "the server could not find the requested resource")
            if content_type not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                return 415, _status(415, "UnsupportedMediaType", f"{content_type}: not emulated")
            obj = self.objects.get((plural, ns, name or ""))
            if obj is None:
                return 404, _status(404, "NotFound", f'{plural} "{name}" not found')
            version = ((body or {}).get("metadata") or {}).get("resourceVersion")
            if version is not None and version != obj["metadata"].get("resourceVersion"):
                # a resourceVersion in the patch is a precondition (k8s.io/apiserver pkg/registry/generic/registry/
                # store.go, Update: a version unlike the stored one is a Conflict, OptimisticLockErrorMsg)
                return 409, _status(409, "Conflict", (
                    f'Operation cannot be fulfilled on {plural} "{name}": the object has been modified; '
                    "please apply your changes to the latest version and try again"
                ))  # fmt: skip
            _merge(obj, body)
            obj["metadata"]["resourceVersion"] = str(int(obj["metadata"].get("resourceVersion") or 0) + 1)
            return 200, copy.deepcopy(obj)

    def _write(
        self, method: str, plural: str, ns: str, name: str | None, body: Any, query: dict[str, str]
    ) -> tuple[int, Any]:
        """A create or a delete (the caller holds the lock)."""
        if method == "POST":
            name = body.get("metadata", {}).get("name", "")
            self.field_validation.append(query.get("fieldValidation", ""))
            strict = plural in self.schemas and query.get("fieldValidation") == "Strict"
            if unknown := unknown_fields(body, self.schemas[plural], root=True) if strict else []:
                kind, version = body.get("kind", ""), body.get("apiVersion", "").rpartition("/")[2]
                fields = ", ".join(f'unknown field "{f}"' for f in sorted(unknown))
                message = f'{kind} in version "{version}" cannot be handled as a {kind}: '
                return 400, _status(400, "BadRequest", message + f"strict decoding error: {fields}")
            if plural in self.schemas:
                try:
                    jsonschema.validate(body, self.schemas[plural])
                except jsonschema.ValidationError as err:
                    where = "/".join(map(str, err.absolute_path))
                    return 422, _status(
                        422, "Invalid", f"{plural} {name!r} is invalid: {where}: {err.message}"
                    )
            if (plural, ns, name) in self.objects:
                return 409, _status(409, "AlreadyExists", f'{plural} "{name}" already exists')
            obj = copy.deepcopy(body)
            obj["metadata"].update(uid=str(uuid.uuid4()), namespace=ns, resourceVersion="1")
            self.objects[(plural, ns, name)] = obj
            self.created.set()
            return 201, obj
        obj = self.objects.get((plural, ns, name))
        if obj is None:
            return 404, _status(404, "NotFound", f'{plural} "{name}" not found')
        uid = ((body or {}).get("preconditions") or {}).get("uid")
        if uid is not None and uid != obj["metadata"].get("uid"):
            message = (
                f'Operation cannot be fulfilled on {plural} "{name}": Precondition failed: UID in precondition: '
                f"{uid}, UID in object meta: {obj['metadata'].get('uid')}"
            )
            return 409, _status(409, "Conflict", message)
        del self.objects[(plural, ns, name)]
        return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}

    def _read(self, resource: str, store: dict[Any, dict[str, Any]], key: Any) -> tuple[int, Any]:
        """GET one object (or list CRDs: ``key`` None), or 403 when the resource is ``forbidden``."""
        with self.lock:
            self.requests.append(("get" if key is not None else "list", resource))
            if resource in self.forbidden:
                return 403, _status(403, "Forbidden", f"{resource} is forbidden: no RBAC grant")
            if key is None:
                return 200, {
                    "kind": "List",
                    "apiVersion": "v1",
                    "metadata": {},
                    "items": list(store.values()),
                }
            obj = store.get(key)
            if obj is None:
                name = key[-1] if isinstance(key, tuple) else key
                return 404, _status(404, "NotFound", f'{resource} "{name}" not found')
            return 200, copy.deepcopy(obj)

    def _pods(self, method: str, ns: str, name: str | None, log: bool, query: dict[str, str]) -> tuple:
        with self.lock:
            if log:
                self.requests.append(("get", "pods/log"))
                if (ns, name) not in self.pods:
                    return 404, _status(404, "NotFound", f'pods "{name}" not found')
                return 200, self.logs.get((ns, name), b""), "text/plain"
            self.requests.append(("get" if name else "list", "pods"))
            if name:  # one pod by name (a step reading its own pod)
                pod = self.pods.get((ns, name))
                return (200, pod) if pod else (404, _status(404, "NotFound", f'pods "{name}" not found'))
            wanted = dict(kv.split("=", 1) for kv in query.get("labelSelector", "").split(",") if kv)
            items = [
                p
                for (n, _), p in self.pods.items()
                if n == ns and all(p["metadata"]["labels"].get(k) == v for k, v in wanted.items())
            ]
            return 200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}

    # --- the controller's side (called by tests) -----------------------------------------------
    def get(self, plural: str, ns: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            return copy.deepcopy(self.objects.get((plural, ns, name)))

    def put(self, plural: str, ns: str, obj: dict[str, Any]) -> None:
        with self.lock:
            self.objects[(plural, ns, obj["metadata"]["name"])] = copy.deepcopy(obj)

    def set_status(self, plural: str, ns: str, name: str, status: dict[str, Any]) -> None:
        with self.lock:
            self.objects[(plural, ns, name)]["status"] = copy.deepcopy(status)

    def remove(self, plural: str, ns: str, name: str) -> None:
        with self.lock:
            self.objects.pop((plural, ns, name), None)

    def add_pod(
        self,
        ns: str,
        name: str,
        labels: dict[str, str],
        phase: str = "Running",
        container: str = "node",
        conditions: list[dict[str, Any]] | None = None,
    ) -> None:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"containers": [{"name": container, "image": "img"}]},
            "status": {"phase": phase, "conditions": conditions or []},
        }
        self.put_pod(pod)

    def put_pod(self, pod: dict[str, Any]) -> None:
        """A pod as given (owner references, deletionTimestamp, conditions: what the test needs), with a new
        ``resourceVersion``; open watches send it."""
        pod = copy.deepcopy(pod)
        with self.changed:
            self.pod_version += 1
            pod["metadata"]["resourceVersion"] = str(self.pod_version)
            self.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = pod
            self.changed.notify_all()

    def watch_pods(self, handler: BaseHTTPRequestHandler) -> bool:
        """Serve ``GET .../pods?watch=true`` (False for any other request): one JSON event per line, chunked,
        for each pod of the namespace matching ``fieldSelector`` (``metadata.name=``) and ``labelSelector``
        whose resourceVersion is newer than the one asked for (none: the current state first, as ADDED),
        until ``timeoutSeconds`` or the emulator closes. Recorded as ("watch", "pods")."""
        url = urlparse(handler.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        m = _PODS.match(url.path)
        if m is None or m["name"] or query.get("watch", "").lower() not in {"true", "1"}:
            return False
        selector = {**_selector(query.get("labelSelector", "")), **_selector(query.get("fieldSelector", ""))}
        since = int(query.get("resourceVersion") or 0)
        end = time.monotonic() + float(query.get("timeoutSeconds") or 60)
        with self.lock:
            self.requests.append(("watch", "pods"))
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        sent: dict[str, int] = {}
        try:
            while True:
                with self.changed:
                    events = []
                    for (ns, name), pod in self.pods.items():
                        version = int(pod["metadata"].get("resourceVersion") or 0)
                        if (
                            ns == m["ns"]
                            and _matches(pod, selector)
                            and version > max(since, sent.get(name, 0))
                        ):
                            kind = "MODIFIED" if since or name in sent else "ADDED"
                            events.append({"type": kind, "object": copy.deepcopy(pod)})
                            sent[name] = version
                    if not events:
                        left = end - time.monotonic()
                        if self.closing or left <= 0:
                            break
                        self.changed.wait(min(left, 0.5))
                        continue
                for event in events:
                    data = json.dumps(event).encode() + b"\n"
                    handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                handler.wfile.flush()
            handler.wfile.write(b"0\r\n\r\n")
        except ConnectionError:  # the watcher went away
            pass
        return True

    def append_log(self, ns: str, pod: str, text: str | bytes) -> None:
        """Text (UTF-8) or raw bytes, as a container may write them."""
        data = text.encode() if isinstance(text, str) else text
        with self.lock:
            self.logs[(ns, pod)] = self.logs.get((ns, pod), b"") + data

    def count(self, verb: str, resource: str) -> int:
        with self.lock:
            return sum(1 for r in self.requests if r == (verb, resource))


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386 in place: maps merge, null removes, anything else replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def label_selector(text: str) -> Any:
    """A predicate on a labels dict for a selector of equality and existence requirements."""
    reqs: list[tuple[str, str, str]] = []  # (operator, key, value)
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if " in " in part or " notin " in part or "(" in part:
            raise ValueError(f"{part!r}: set-based requirements are not emulated")
        if "!=" in part:
            key, value = part.split("!=", 1)
            reqs.append(("!=", key.strip(), value.strip()))
        elif "=" in part:
            key, value = part.replace("==", "=", 1).split("=", 1)
            reqs.append(("=", key.strip(), value.strip()))
        elif part.startswith("!"):
            reqs.append(("!", part[1:].strip(), ""))
        else:
            reqs.append(("exists", part, ""))

    def matches(labels: dict[str, str]) -> bool:
        held = {
            "=": lambda k, v: labels.get(k) == v,
            "!=": lambda k, v: labels.get(k) != v,
            "!": lambda k, v: k not in labels,
            "exists": lambda k, v: k in labels,
        }
        return all(held[op](key, value) for op, key, value in reqs)

    return matches


def _selector(text: str) -> dict[str, str]:
    """An equality selector (``a=b,c=d``) as a dict."""
    return dict(kv.split("=", 1) for kv in text.split(",") if kv)


def _matches(pod: dict[str, Any], selector: dict[str, str]) -> bool:
    """``selector``'s labels and fields (``metadata.name``, ``metadata.namespace``) all equal on ``pod``."""
    meta = pod["metadata"]
    fields = {"metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace")}
    return all(
        (fields[k] if k in fields else meta.get("labels", {}).get(k)) == v for k, v in selector.items()
    )
