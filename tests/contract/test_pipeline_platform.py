"""pipelines/platform.py: each reusable setting compiles to the expected KFP IR (kfp's real compiler).

Expected values are written out by hand from the settings applied (and the Kubernetes field names
kfp-kubernetes 2.17 uses); the compiled YAML must contain no secret value from the environment.
"""

from kfp import dsl

from pipelines import platform
from tests.support.platform_support import _compile, probe_op


def test_training_stage_settings(tmp_path, monkeypatch) -> None:
    @dsl.pipeline(name="probe")
    def probe(gpus: str = "8", media_pvc: str = "paravt-media"):
        configure = platform.configure_task
        configure(probe_op(x="a"), "sft", gpus=gpus, media_pvc=media_pvc)

    _, spec, k8s = _compile(probe, tmp_path, monkeypatch)
    task = spec["root"]["dag"]["tasks"]["probe-op"]
    assert task["taskInfo"]["name"] == "sft"
    # Retry with backoff: 60 s, x2 each time, within a window of 4 attempts of 48 h plus the waits
    # (60 + 120 + 240 s): 4 * 172800 + 420 = 691620 s.
    assert task["retryPolicy"] == {
        "maxRetryCount": 3,
        "backoffDuration": "60s",
        "backoffFactor": 2.0,
        "backoffMaxDuration": "691620s",
    }
    assert task["cachingOptions"] == {}  # enableCache false is omitted from the IR
    resources = spec["deploymentSpec"]["executors"]["exec-probe-op"]["container"]["resources"]
    # The GPU count is the pipeline parameter, resolved at run time.
    accelerator = resources["accelerator"]
    assert accelerator["resourceCount"] == "{{$.inputs.parameters['pipelinechannel--gpus']}}"
    assert accelerator["resourceType"] == "nvidia.com/gpu"
    assert (resources["resourceCpuRequest"], resources["resourceCpuLimit"]) == ("32", "32")
    assert (resources["resourceMemoryRequest"], resources["resourceMemoryLimit"]) == ("512G", "512G")

    exe = k8s["exec-probe-op"]
    assert exe["nodeSelector"] == {"labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}
    assert exe["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert exe["emptyDirMounts"] == [
        {"volumeName": "dshm", "mountPath": "/dev/shm", "medium": "Memory", "sizeLimit": "64Gi"},
        {"volumeName": "paravt-cache", "mountPath": "/var/cache/paravt", "sizeLimit": "64Gi"},  # no class set
    ]
    (pvc,) = exe["pvcMount"]
    assert pvc["mountPath"] == "/mnt/media"
    assert pvc["pvcNameParameter"] == {"componentInputParameter": "media_pvc"}
    (secret,) = exe["secretAsEnv"]
    assert secret["secretName"] == "paravt-s3"
    assert {(k["secretKey"], k["envVar"]) for k in secret["keyToEnv"]} == {
        ("AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY_ID"),
        ("AWS_SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY"),
    }
    (config,) = exe["configMapAsEnv"]
    assert config["configMapName"] == "paravt-s3-config"
    assert {(k["configMapKey"], k["envVar"]) for k in config["keyToEnv"]} == {
        ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL"),
        ("AWS_DEFAULT_REGION", "AWS_DEFAULT_REGION"),
    }
    assert exe["activeDeadlineSeconds"] == str(48 * 3600)  # 172800


def test_cpu_stage_has_no_gpu_shm_or_media(tmp_path, monkeypatch) -> None:
    @dsl.pipeline(name="probe")
    def probe():
        platform.configure_task(probe_op(x="a"), "report")

    _, spec, k8s = _compile(probe, tmp_path, monkeypatch)
    resources = spec["deploymentSpec"]["executors"]["exec-probe-op"]["container"]["resources"]
    assert "accelerator" not in resources
    assert resources["resourceCpuLimit"] == "1" and resources["resourceMemoryLimit"] == "2G"
    exe = k8s["exec-probe-op"]
    assert set(exe) == {"secretAsEnv", "configMapAsEnv", "activeDeadlineSeconds", "securityContext"}
    assert exe["activeDeadlineSeconds"] == "3600"


def test_custom_platform_with_tolerations_selectors_and_literal_gpus(tmp_path, monkeypatch) -> None:
    spot = platform.Toleration(key="cloud.example/spot", operator="Equal", value="true", effect="NoExecute")
    custom = platform.StagePlatform(
        cpu="500m",
        memory="1Gi",
        gpus=2,
        node_selector={"pool": "train-a"},
        tolerations=(spot,),
        retries=5,
        timeout_seconds=600,
        cache=True,
        media=False,
    )

    @dsl.pipeline(name="probe")
    def probe():
        platform.configure_task(probe_op(x="a"), "custom", platform=custom, display_name="custom stage")

    _, spec, k8s = _compile(probe, tmp_path, monkeypatch)
    task = spec["root"]["dag"]["tasks"]["probe-op"]
    assert task["taskInfo"]["name"] == "custom stage"
    assert task["retryPolicy"]["maxRetryCount"] == 5
    assert task["cachingOptions"] == {"enableCache": True}
    resources = spec["deploymentSpec"]["executors"]["exec-probe-op"]["container"]["resources"]
    accelerator = resources["accelerator"]
    assert (accelerator["resourceCount"], accelerator["resourceType"]) == ("2", "nvidia.com/gpu")
    exe = k8s["exec-probe-op"]
    # No gpu_product: no GPU-model selector, only the user's pool label.
    assert exe["nodeSelector"] == {"labels": {"pool": "train-a"}}
    assert exe["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "cloud.example/spot", "operator": "Equal", "value": "true", "effect": "NoExecute"},
    ]
    assert "emptyDirMounts" not in exe and "pvcMount" not in exe
    assert exe["activeDeadlineSeconds"] == "600"


def test_every_stage_has_a_platform_and_training_stages_get_shared_memory() -> None:
    assert set(platform.STAGES) == {"data", "sft", "rl", "eval", "report"}
    for name in ("sft", "rl"):
        assert platform.STAGES[name].gpus > 0 and platform.STAGES[name].shm
    assert all(s.retries >= 1 and not s.cache for s in platform.STAGES.values())


def test_image_pull_secrets_from_the_compiling_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PARAVT_IMAGE_PULL_SECRETS", "paravt-registry, mirror-creds")

    @dsl.pipeline(name="probe")
    def probe():
        platform.configure_task(probe_op(x="a"), "report")

    _, _, k8s = _compile(probe, tmp_path, monkeypatch)
    assert [s["secretName"] for s in k8s["exec-probe-op"]["imagePullSecret"]] == [
        "paravt-registry",
        "mirror-creds",
    ]


def test_rl_stage_mounts_the_kernel_cache_and_points_the_jit_caches_into_it(tmp_path, monkeypatch) -> None:
    @dsl.pipeline(name="probe")
    def probe(media_pvc: str = "paravt-media"):
        platform.configure_task(probe_op(x="a"), "rl", media_pvc=media_pvc)
        platform.configure_task(probe_op(x="b"), "sft", media_pvc=media_pvc)

    _, spec, k8s = _compile(probe, tmp_path, monkeypatch)
    rl, sft = k8s["exec-probe-op"], k8s["exec-probe-op-2"]
    media, cache = rl["pvcMount"]
    assert media["mountPath"] == "/mnt/media"
    assert cache["mountPath"] == "/home/paravt/.cache/kernels"
    assert cache["pvcNameParameter"] == {"runtimeValue": {"constant": "paravt-kernel-cache"}}
    env = spec["deploymentSpec"]["executors"]["exec-probe-op"]["container"]["env"]
    assert {e["name"]: e["value"] for e in env} == {
        "TRITON_CACHE_DIR": "/home/paravt/.cache/kernels/triton",
        "SGLANG_JIT_CACHE_DIR": "/home/paravt/.cache/kernels/sglang-jit",
        "FLASHINFER_WORKSPACE_BASE": "/home/paravt/.cache/kernels",
    } | platform.CACHE_ENV
    # Only the RL step compiles SGLang's kernels: the SFT step gets neither the claim nor the variables.
    assert [m["mountPath"] for m in sft["pvcMount"]] == ["/mnt/media"]
    sft_env = spec["deploymentSpec"]["executors"]["exec-probe-op-2"]["container"]["env"]
    assert {e["name"]: e["value"] for e in sft_env} == platform.CACHE_ENV


def test_gpu_stages_put_their_download_caches_on_a_sized_ephemeral_volume(tmp_path, monkeypatch) -> None:
    """Models from S3 (~16 GB at 8B), the hub's files and S3 objects go to a generic ephemeral volume the
    pod requests (kfp-kubernetes 2.17 add_ephemeral_volume -> KFP 2.17.0's driver builds
    ``volumes[].ephemeral.volumeClaimTemplate``, backend/src/v2/driver/k8s.go), with the three variables the
    code reads pointing into it; not to unreserved node disk. CPU stages get none."""
    monkeypatch.setenv("PARAVT_CACHE_STORAGE_CLASS", "gp3")

    @dsl.pipeline(name="probe")
    def probe():
        for stage in ("sft", "rl", "eval", "data", "report"):
            platform.configure_task(probe_op(x=stage), stage)

    _, spec, k8s = _compile(probe, tmp_path, monkeypatch)
    executors = ["exec-probe-op", "exec-probe-op-2", "exec-probe-op-3", "exec-probe-op-4", "exec-probe-op-5"]
    for name in executors[:3]:
        (volume,) = k8s[name]["genericEphemeralVolume"]
        assert volume == {"volumeName": "paravt-cache", "mountPath": "/var/cache/paravt",
                          "accessModes": ["ReadWriteOnce"], "storageClassName": "gp3", "size": "64Gi"}  # fmt: skip
        env = {e["name"]: e["value"] for e in spec["deploymentSpec"]["executors"][name]["container"]["env"]}
        assert {k: env[k] for k in ("PARAVT_MODEL_CACHE", "PARAVT_CACHE_DIR", "HF_HOME")} == {
            "PARAVT_MODEL_CACHE": "/var/cache/paravt/models",
            "PARAVT_CACHE_DIR": "/var/cache/paravt/s3",
            "HF_HOME": "/var/cache/paravt/huggingface",
        }
    for name in executors[3:]:
        assert "genericEphemeralVolume" not in k8s.get(name, {})


def test_kernel_cache_variables_are_the_ones_the_libraries_read(tmp_path) -> None:
    """Each variable moves its library's cache: Triton 3.8's knobs (triton/knobs.py, cache_knobs.dir) and
    SGLang 0.5.23's JIT cache root (sglang/kernels/jit/utils/compile/cache.py, cache_root), read by the
    libraries' own code with the variables the RL step sets."""
    import os
    import subprocess
    import sys

    from tests.support.sglang_support import sglang_site, side_env

    env = {**os.environ, **platform.KERNEL_CACHE_ENV}
    triton = subprocess.run(
        [sys.executable, "-c", "import triton; print(triton.knobs.cache.dir)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert triton.returncode == 0, triton.stderr
    assert triton.stdout.strip() == "/home/paravt/.cache/kernels/triton"
    site = sglang_site()
    code = "from sglang.kernels.jit.utils.compile.cache import cache_root; print(cache_root())"
    sglang = subprocess.run(
        [sys.executable, "-c", code],
        env={**side_env(site), **platform.KERNEL_CACHE_ENV},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert sglang.returncode == 0, sglang.stderr[-2000:]
    assert sglang.stdout.strip().splitlines()[-1] == "/home/paravt/.cache/kernels/sglang-jit"
