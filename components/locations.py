"""Where a pipeline run's stage outputs go, and how the big ones appear as typed KFP artifacts.

Default (no ``run_prefix``): the run's own directory under the pipeline root, which KFP 2.17's driver
puts into every output artifact URI it gives a task: ``<pipeline root>/<pipeline name>/<run id>/<task>/
<salt>/<output>`` (backend/src/v2/driver/driver.go, provisionOutputs; the pipeline root of a run is
``<root>/<pipeline name>/<run id>``, backend/src/v2/metadata/client.go). Cutting that URI after the run
id gives a location that is in object storage, the same for every task and every retry of the run, and
never inside a pod. (KFP 2.17's backend has no ``{{$.pipeline_root}}`` placeholder: its driver resolves
only the exact placeholders listed in backend/src/v2/driver/resolve.go.)

A stage's data or checkpoint directory is exposed as the task's ``Dataset`` / ``Model`` output by
setting that artifact's URI to the directory, so nothing is copied. KFP's launcher accepts a URI set by
the component only under the run's pipeline root (backend/src/v2/component/launcher_v2.go,
uploadOutputArtifacts -> objectstore Config.KeyFromURI, which fails the task otherwise); elsewhere (an
explicit ``run_prefix`` in another bucket) the URI is recorded in the artifact's metadata instead.

Imported inside the components' bodies (the package is installed in the images), no kfp import here.
"""

from __future__ import annotations

from typing import Any


def kfp_run_root(run_id: str, artifact_uri: str) -> str:
    """``<pipeline root>/<pipeline name>/<run id>`` read off an output artifact URI of this run, or ""
    (no run id, or a URI without it: kfp.local's layout)."""
    marker = f"/{run_id}/"
    if not run_id or marker not in artifact_uri:
        return ""
    return artifact_uri[: artifact_uri.index(marker) + len(marker) - 1]


def run_root(run_prefix: str, run_id: str, artifact_uri: str) -> str:
    """Where this run's stages write: ``run_prefix`` when given, else the run's directory under the
    pipeline root."""
    if run_prefix:
        return run_prefix.rstrip("/")
    root = kfp_run_root(run_id, artifact_uri)
    if not root:
        raise ValueError(
            f"no run_prefix and no run id {run_id!r} in the output URI {artifact_uri!r}: "
            "set the pipeline's run_prefix (a bucket URI such as s3://bucket/runs/<name>)"
        )
    return root


def location(artifact: Any) -> str:
    """The directory an input ``Dataset`` / ``Model`` stands for: ``metadata["uri"]`` as ``expose`` set
    it upstream (KFP 2.17 keeps an output's metadata as MLMD custom properties and hands them to the
    consumer: backend/src/v2/metadata/converter.go, toMLMDArtifact; driver/resolve.go), else its URI
    (an importer's artifact)."""
    return str(artifact.metadata.get("uri") or artifact.uri)


def expose(artifact: Any, location: str, run_id: str) -> str:
    """Make ``artifact`` (a KFP output artifact) point at ``location`` without copying: its URI when
    KFP's launcher accepts that (under the run's pipeline root), else ``metadata["uri"]``. Returns how
    it was exposed ("uri" or "metadata")."""
    artifact.metadata["uri"] = location
    root = kfp_run_root(run_id, artifact.uri)
    if root and location.startswith(root + "/"):
        artifact.uri = location
        return "uri"
    return "metadata"
