"""Caches the images' user (uid 10001) can write, checked for real as that uid.

The rules: runc creates a mount destination that does not exist as root, mode 755, with every missing
parent (runc v1.3.6 libcontainer/rootfs_linux.go, createMountpoint: ``pathrs.MkdirAllInRoot(root, dest,
0o755)``), so the RL step's kernel-cache mount at ~/.cache/kernels made ~/.cache root's; csi-driver-nfs
v4.13.4 creates a volume's directory as root, mode 755 (pkg/nfs/controllerserver.go, chmod only with the
class's ``mountPermissions``); a fresh ephemeral volume's root is root's unless the pod has an fsGroup, which
KFP 2.17 does not set (backend/src/v2/compiler/argocompiler/argo.go, ``wf.Spec.SecurityContext``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from pipelines import platform
from tests.fixtures.served import unavailable
from tests.support.paths import ROOT

UID = 10001  # images/install.sh useradd --uid, the Dockerfiles' USER


def _as_user(script: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", script], user=UID, group=UID, extra_groups=[], capture_output=True,
                          text=True, env=env, timeout=60)  # fmt: skip


def _fresh_root(tmp: Path) -> Path:
    tmp.chmod(0o755)
    return tmp


def test_home_cache_is_the_users_so_a_mount_below_it_leaves_the_caches_writable():
    """The image's install step, run here on a stand-in home: then the runtime makes the kernel-cache
    mountpoint (as runc does) and uid 10001 creates the model, S3 and hub caches next to it."""
    script = (ROOT / "images/install.sh").read_text()
    (line,) = [
        ln.strip() for ln in script.splitlines() if re.match(r"\s*install -d .*/home/paravt/\.cache\b", ln)
    ]
    assert "-o 10001 -g 10001" in line
    for made_in_image in (True, False):
        base = _fresh_root(Path(tempfile.mkdtemp()))
        try:
            home = base / "home" / "paravt"
            home.mkdir(parents=True)
            os.chown(home, UID, UID)  # useradd --create-home
            if made_in_image:
                subprocess.run(["sh", "-c", line.replace("/home/paravt", str(home))], check=True)
            mountpoint = Path(str(home) + platform.KERNEL_CACHE_MOUNT_PATH.removeprefix("/home/paravt"))
            os.makedirs(mountpoint, mode=0o755, exist_ok=True)  # runc: root's, 755, parents included
            caches = " ".join(f"{home}/.cache/{d}" for d in ("paravt/models", "paravt/s3", "huggingface"))
            made = _as_user(f"mkdir -p {caches} && touch {home}/.cache/paravt/models/probe")
            assert (made.returncode == 0) == made_in_image, made.stderr  # without it: Permission denied
        finally:
            shutil.rmtree(base)


def test_the_kernel_cache_claim_is_given_to_the_images_user():
    """The one-off Job's script, run here on a directory made the way the NFS driver makes it."""
    job = yaml.safe_load((ROOT / "manifests/volumes/kernel-cache-owner.yaml").read_text())
    assert (
        "kernel-cache-owner.yaml"
        in yaml.safe_load((ROOT / "manifests/volumes/kustomization.yaml").read_text())["resources"]
    )
    pod = job["spec"]["template"]["spec"]
    ((container,), (volume,)) = pod["containers"], pod["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == platform.KERNEL_CACHE_PVC_NAME
    assert container["volumeMounts"] == [
        {"name": volume["name"], "mountPath": platform.KERNEL_CACHE_MOUNT_PATH}
    ]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {"CACHE": platform.KERNEL_CACHE_MOUNT_PATH, "OWNER": str(UID)}
    base = _fresh_root(Path(tempfile.mkdtemp()))
    try:
        cache = base / "kernels"
        cache.mkdir(mode=0o755)  # root's, 755: the driver's
        probe = f"mkdir -p {cache}/triton && touch {cache}/triton/probe"
        assert _as_user(probe).returncode != 0
        for _ in range(2):  # idempotent
            run = subprocess.run([*container["command"], *container["args"]], capture_output=True, text=True,
                                 env={**env, "CACHE": str(cache), "PATH": os.environ["PATH"]}, timeout=30)  # fmt: skip
            assert run.returncode == 0, run.stderr
            assert run.stdout.strip() == f"{cache}: owner {UID}:{UID}, mode 755"
        assert _as_user(probe).returncode == 0
    finally:
        shutil.rmtree(base)


def test_the_stage_falls_back_to_home_when_the_cache_volume_root_is_not_writable():
    """``settle_caches`` as uid 10001: on a volume whose root is root's (no fsGroup) the three variables are
    dropped with one line, so the code's defaults under ~/.cache apply; on a writable one they stay."""
    code = "import os; from paravt_core.launch.caches import settle_caches as s; print(s()); print(sorted(k for k in ('PARAVT_MODEL_CACHE', 'PARAVT_CACHE_DIR', 'HF_HOME') if k in os.environ))"  # noqa: E501
    for writable in (False, True, None):  # None: no volume mounted at all (a kfp.local run)
        volume = _fresh_root(Path(tempfile.mkdtemp()))  # the volume's root as mkfs leaves it: root's, 755
        try:
            if writable:
                os.chown(volume, UID, UID)  # what an fsGroup or a writable class gives
            env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "HOME": str(volume)}
            mount = str(volume if writable is not None else volume / "absent")
            env |= {k: v.replace(platform.CACHE_MOUNT_PATH, mount) for k, v in platform.CACHE_ENV.items()}
            # setpriv (util-linux): the interpreter lives where uid 10001 may not look it up by path
            user = ["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups"]
            run = subprocess.run([*user, sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                 timeout=60)  # fmt: skip
            assert run.returncode == 0, run.stderr
            lines = run.stdout.strip().splitlines()
            if writable is None:
                assert lines == ["['PARAVT_MODEL_CACHE', 'PARAVT_CACHE_DIR', 'HF_HOME']", "[]"]  # silently
                assert not (volume / "absent").exists()
            elif writable:
                assert lines == ["[]", "['HF_HOME', 'PARAVT_CACHE_DIR', 'PARAVT_MODEL_CACHE']"]
                assert (volume / "models").is_dir() and (volume / "huggingface").is_dir()
            else:
                assert lines[0].startswith(
                    f"caches: PARAVT_MODEL_CACHE, PARAVT_CACHE_DIR, HF_HOME not writable by uid {UID}"
                )
                assert lines[1:] == ["['PARAVT_MODEL_CACHE', 'PARAVT_CACHE_DIR', 'HF_HOME']", "[]"]
        finally:
            shutil.rmtree(volume)


def _ext4_root(tmp: Path) -> tuple[int, int, int]:
    """(uid, gid, mode) of a fresh ext4 filesystem's root inode, as a block CSI driver's mkfs leaves it:
    the image is made with e2fsprogs' mkfs.ext4 and read back with debugfs (no mount needed)."""
    image = tmp / "volume.ext4"
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image), "8M"], check=True, capture_output=True, timeout=60)
    stat = subprocess.run(["debugfs", "-R", "stat <2>", str(image)], check=True, capture_output=True,
                          text=True, timeout=60).stdout  # fmt: skip
    user = re.search(r"User:\s+(\d+)\s+Group:\s+(\d+)", stat)
    mode = re.search(r"Mode:\s+0?(\d+)", stat)
    assert user and mode, stat
    return int(user[1]), int(user[2]), int(mode[1], 8)


def _settle_as_user(volume: Path) -> list[str]:
    code = "from paravt_core.launch.caches import settle_caches as s; print(s())"
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "HOME": str(volume)}
    env |= {k: v.replace(platform.CACHE_MOUNT_PATH, str(volume)) for k, v in platform.CACHE_ENV.items()}
    user = ["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups"]
    run = subprocess.run(
        [*user, sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.strip().splitlines()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (to give the stand-in root's owner)")
def test_the_cache_volume_is_one_uid_10001_can_write_without_an_fsgroup(tmp_path, monkeypatch) -> None:
    """A block volume's fresh filesystem root is root's, 0755 (measured: mkfs.ext4 + debugfs), and KFP
    2.17 sets no fsGroup (backend/src/v2/compiler/argocompiler/argo.go: runAsNonRoot and seccomp only),
    so the generic ephemeral volume was never written: every stage fell back to the node's disk. An
    emptyDir's directory is made mode 0777 by kubelet (Kubernetes pkg/volume/emptydir/empty_dir.go,
    ``perm``, setupDir), which is the default now; a class of one's own stays possible."""
    from kfp import dsl

    from tests.support.platform_support import _compile, probe_op

    if not (shutil.which("mkfs.ext4") and shutil.which("debugfs")):
        unavailable("e2fsprogs (mkfs.ext4, debugfs) is not installed (scripts/setup.sh installs it)")
    uid, gid, mode = _ext4_root(tmp_path)
    assert (uid, gid, mode) == (0, 0, 0o755)
    base = _fresh_root(Path(tempfile.mkdtemp()))  # a parent uid 10001 may enter, as "/var/cache" is
    try:
        for volume_mode, writable in ((mode, False), (0o777, True)):  # the ext4 root; kubelet's emptyDir
            volume = base / f"root-{volume_mode:o}"
            volume.mkdir()
            os.chown(volume, uid, gid)
            volume.chmod(volume_mode)
            lines = _settle_as_user(volume)
            assert (lines == ["[]"]) == writable, lines  # [] = no variable dropped: the volume is used
            if not writable:
                assert lines[0].startswith(
                    f"caches: PARAVT_MODEL_CACHE, PARAVT_CACHE_DIR, HF_HOME not writable by uid {UID}"
                )
    finally:
        shutil.rmtree(base)

    def executor(storage_class: str | None) -> dict:
        if storage_class:
            monkeypatch.setenv(platform.CACHE_STORAGE_CLASS_ENV, storage_class)
        else:
            monkeypatch.delenv(platform.CACHE_STORAGE_CLASS_ENV, raising=False)

        @dsl.pipeline(name="caches")  # built here: the class is read while the pipeline is built
        def caches():
            platform.configure_task(probe_op(x="sft"), "sft")

        return _compile(caches, tmp_path, monkeypatch)[2]["exec-probe-op"]

    default = executor(None)
    assert {"volumeName": platform.CACHE_VOLUME_NAME, "mountPath": platform.CACHE_MOUNT_PATH,
            "sizeLimit": "64Gi"} in default["emptyDirMounts"]  # fmt: skip
    assert "genericEphemeralVolume" not in default
    (chosen,) = executor("nfs-writable")["genericEphemeralVolume"]
    assert chosen["storageClassName"] == "nfs-writable" and chosen["mountPath"] == platform.CACHE_MOUNT_PATH


def _kubelet_skips_the_walk(root: Path, fs_group: int) -> bool:
    """Kubernetes pkg/volume/volume_linux.go, skipPermissionChange under ``OnRootMismatch``: the root's group
    is the fsGroup, its mode holds rwx for the group (rwMask | execMask = 0o770 on a writable volume) and
    the setgid bit; otherwise kubelet chowns and chmods every file of the volume."""
    st = root.stat()
    return st.st_gid == fs_group and st.st_mode & 0o770 == 0o770 and bool(st.st_mode & 0o2000)


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the owner Job's chown as root, as the Job does")
def test_the_fsgroup_option_leaves_the_nfs_media_volume_alone(tmp_path) -> None:
    """csi-driver-nfs v4.13.4 declares ``fsGroupPolicy: File`` (deploy/csi-nfs-driverinfo.yaml): kubelet
    applies a pod's fsGroup to the NFS volume too, and under the default ``fsGroupChangePolicy: Always``
    walks the whole 500 GiB media tree at every pod start. The option says ``OnRootMismatch``, and the media
    root as the owner Job leaves it (10001:10001, 2775) is one kubelet then skips."""
    text = (ROOT / "manifests/options/argo-retry-always/workflow-controller-configmap-patch.yaml").read_text()
    commented = "\n".join(
        ln.replace("# ", "", 1)
        for ln in text.splitlines()
        if re.match(r"\s*#\s+(securityContext|  fsGroup)", ln)
    )
    context = yaml.safe_load(commented)["securityContext"]
    assert context == {"fsGroup": UID, "fsGroupChangePolicy": "OnRootMismatch"}
    owner = (ROOT / "manifests/volumes/media-owner.yaml").read_text()
    assert "fsGroup does not reach into NFS" not in owner and "fsGroupPolicy: File" in owner
    job = yaml.safe_load(owner)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    media = tmp_path / "media"
    media.mkdir(mode=0o755)
    assert not _kubelet_skips_the_walk(media, context["fsGroup"])  # as the driver makes it: walked
    env = {e["name"]: e["value"] for e in container["env"]} | {
        "MEDIA": str(media),
        "PATH": os.environ["PATH"],
    }
    run = subprocess.run([*container["command"], *container["args"]], env=env, capture_output=True, text=True,
                         timeout=30)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert _kubelet_skips_the_walk(media, context["fsGroup"])
