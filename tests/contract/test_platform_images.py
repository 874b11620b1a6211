"""The three Dockerfiles: pinned base, Python 3.11 venv on PATH, dependencies before code with the lock as
constraints, OCI labels with the code version, non-root numeric USER, an entrypoint script (images/entrypoint.sh), no
secrets; and every stage command the components' images serve runs in the project venv.

Real builds are `make images-smoke` (podman, minutes, several GB): out of the test suite.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.paths import ROOT

FAMILIES = ("sft", "rl", "eval")


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs: comments dropped, backslash continuations joined."""
    logical, current = [], ""
    for line in path.read_text().splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    out = []
    for line in logical:
        word, _, rest = line.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def _one(instrs: list[tuple[str, str]], word: str) -> list[str]:
    return [args for w, args in instrs if w == word]


def dockerfile_env(family: str) -> dict[str, str]:
    """The ENV instruction's NAME=value pairs (one ENV per Dockerfile)."""
    (env,) = _one(instructions(ROOT / f"Dockerfile.{family}"), "ENV")
    return dict(pair.split("=", 1) for pair in env.split())


# Written out by hand: the venv (install.sh: `python3.11 -m venv /opt/paravt`) holds the CUDA wheels under
# site-packages/nvidia/cu13 (cuda-toolkit 13's layout: bin, include, lib); /usr/local/nvidia is where
# managed clusters (GKE) mount the driver; the driver must support CUDA 13.0 (torch's cuda-toolkit==13.0.3).
CUDA_HOME = "/opt/paravt/lib/python3.11/site-packages/nvidia/cu13"
IMAGE_ENV = {
    "PATH": f"/opt/paravt/bin:{CUDA_HOME}/bin:/usr/local/nvidia/bin:$PATH",
    "VIRTUAL_ENV": "/opt/paravt",
    "PYTHONUNBUFFERED": "1",
    "CUDA_HOME": CUDA_HOME,
    "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64:/usr/local/nvidia/lib",
    "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    "NVIDIA_REQUIRE_CUDA": "cuda>=13.0",
}


@pytest.mark.parametrize("family", FAMILIES)
def test_dockerfile_structure(family: str) -> None:
    instrs = instructions(ROOT / f"Dockerfile.{family}")
    words = [w for w, _ in instrs]

    # Base: a build argument declared before FROM, defaulting to the Debian 12 base that
    # scripts/base-image.sh makes and pushes (paravt-base), by digest, on the registry images-smoke runs.
    assert words[:2] == ["ARG", "FROM"]
    name, _, default = instrs[0][1].partition("=")
    assert name == "BASE_IMAGE"
    # Fully qualified (registry host first): podman/buildah resolve a short name only through
    # `unqualified-search-registries` in /etc/containers/registries.conf, which Debian's podman ships
    # empty ("short-name ... did not resolve to an alias", seen with podman 4.3 here).
    assert re.fullmatch(r"localhost:5055/paravt-base@sha256:[0-9a-f]{64}", default), default
    assert instrs[1][1] == "${BASE_IMAGE}"
    assert words.count("FROM") == 1

    # OCI labels carry the code version and revision from build args; the default version is the package's.
    labels = " ".join(_one(instrs, "LABEL"))
    assert f'org.opencontainers.image.title="paravt-{family}"' in labels
    assert 'org.opencontainers.image.version="${PARAVT_VERSION}"' in labels
    assert 'org.opencontainers.image.revision="${VCS_REF}"' in labels
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert f"PARAVT_VERSION={version}" in _one(instrs, "ARG")

    # The venv's bin first on PATH: `paravt`, and the `python3` KFP lightweight components run; then the
    # CUDA wheels' bin (nvcc in the RL image) and the managed clusters' driver tools; the CUDA variables.
    (env,) = _one(instrs, "ENV")
    assert dockerfile_env(family) == IMAGE_ENV

    # Dependencies before code: the deps layer's inputs are pyproject.toml and images/ requirement
    # files only, so a code edit changes no input of that layer and rebuilds only what follows it.
    runs = _one(instrs, "RUN")
    # The build's own toolchain checks run in the code phase (images/toolchain_check.py); the RL image
    # also checks nvcc and SGLang's JIT toolchain.
    code_run = "sh /src/images/install.sh code" + (" --sglang" if family == "rl" else "")
    # the eval image's vLLM server (build arg VLLM_VERSION, the pipelines' default eval config launches it;
    # empty: nothing installed), between the deps and the code, in a venv of its own
    optional = ['sh /src/images/install.sh vllm "${VLLM_VERSION}"'] if family == "eval" else []
    assert runs == [runs[0], *optional, code_run]
    if family == "eval":
        assert "VLLM_VERSION=0.32.0" in _one(instrs, "ARG")  # the version the tests serve (.venv-vllm)
    assert runs[0].startswith("sh /src/images/install.sh deps")
    assert ("-r /src/images/rl-requirements.txt" in runs[0]) == (family == "rl")
    assert ("--lock-override /src/images/rl-lock-overrides.txt" in runs[0]) == (family == "rl")
    deps_at = next(i for i, (w, a) in enumerate(instrs) if w == "RUN" and a == runs[0])
    code_at = next(i for i, (w, a) in enumerate(instrs) if w == "RUN" and a == runs[-1])
    before = [a.split()[:-1] for w, a in instrs[:deps_at] if w == "COPY"]
    sources_before = {src for srcs in before for src in srcs}
    assert sources_before == {
        "pyproject.toml",
        "images/install.sh",
        "images/requirements.lock",
        "images/rl-requirements.txt",
        "images/rl-lock-overrides.txt",
    }
    after = {src for w, a in instrs[deps_at:code_at] if w == "COPY" for src in a.split()[:-1]}
    # Everything the build context allows (.dockerignore) is copied; the code only after the deps.
    assert {
        "paravt_core",
        "components",
        "pipelines",
        "configs",
        "README.md",
        "images/entrypoint.sh",
        "images/toolchain_check.py",
    } <= after
    assert all(w != "COPY" for w, _ in instrs[code_at:])

    # Runs as a fixed non-root numeric uid, set after the (root) install; entrypoint in exec form.
    (user,) = _one(instrs, "USER")
    uid, _, gid = user.partition(":")
    assert int(uid) > 0 and int(gid) > 0
    assert words.index("USER") > code_at
    (entrypoint,) = _one(instrs, "ENTRYPOINT")
    assert json.loads(entrypoint) == ["/opt/paravt/bin/paravt-entrypoint"]

    # No secret-looking build args or env, no secret baked in.
    declared = [a.split("=")[0] for a in _one(instrs, "ARG")] + re.findall(r"(\w+)=", env)
    assert not [d for d in declared if re.search(r"SECRET|TOKEN|PASSWORD|AWS_|KEY", d, re.I)]
    assert "AWS_SECRET_ACCESS_KEY" not in (ROOT / f"Dockerfile.{family}").read_text()


def test_install_script_phases() -> None:
    script = (ROOT / "images" / "install.sh").read_text()
    deps, _, code = script.partition('elif [ "$phase" = code ]')
    assert "python3.11 -m venv /opt/paravt" in deps
    # The deps phase installs pyproject's dependencies and build backend with the lock as constraints.
    assert 'project["build-system"]["requires"] + project["project"]["dependencies"]' in deps
    assert '$PIP install -c "$constraints" -r /tmp/requirements.txt "$@"' in deps
    assert "constraints=/src/images/requirements.lock\n" in deps
    assert "useradd --uid 10001" in deps  # the uid the Dockerfiles' USER names
    # The code phase resolves nothing (no network, seconds): paravt alone, on the deps layer's backend.
    assert "$PIP install --no-deps --no-build-isolation /src" in code
    assert "rm -rf /src" in code  # the source tree does not stay in the image
    assert "/opt/paravt/bin/paravt-entrypoint" in code


def test_rl_extra_is_sglang_its_router_and_nvcc_pinned() -> None:
    lines = [
        line.strip()
        for line in (ROOT / "images" / "rl-requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines == ["sglang==0.5.23", "sglang-router==0.3.2", "cuda-toolkit[nvcc,cccl]==13.0.3.0"]


def test_cuda_version_is_the_one_torch_locks() -> None:
    """nvcc (the RL image's cuda-toolkit extras), the lock and NVIDIA_REQUIRE_CUDA all name the CUDA version
    the installed torch 2.14.1 wheel requires (its own Requires-Dist: cuda-toolkit[...]==13.0.3)."""
    from importlib.metadata import requires, version

    assert version("torch") == "2.14.1"
    (req,) = [r for r in requires("torch") if r.startswith("cuda-toolkit[")]
    torch_cuda = re.search(r"==([\d.]+)", req).group(1)
    assert torch_cuda == "13.0.3"
    lock = _pins(ROOT / "images" / "requirements.lock")
    assert lock["cuda-toolkit"] == "13.0.3.0"  # the same release (PEP 440: 13.0.3 == 13.0.3.0)
    assert "cuda-toolkit[nvcc,cccl]==13.0.3.0" in (ROOT / "images" / "rl-requirements.txt").read_text()
    major_minor = ".".join(torch_cuda.split(".")[:2])
    for family in FAMILIES:
        assert dockerfile_env(family)["NVIDIA_REQUIRE_CUDA"] == f"cuda>={major_minor}"


def _apt_packages(script: str) -> list[str]:
    """The packages of install.sh's `apt-get install` line (continuations joined)."""
    joined = script.replace("\\\n", " ")
    return re.search(r"apt-get install -y -q --no-install-recommends (.*)", joined).group(1).split()


def test_install_script_system_packages_and_cuda_links() -> None:
    script = (ROOT / "images" / "install.sh").read_text()
    deps, _, code = script.partition('elif [ "$phase" = code ]')
    # Python headers and C/C++ compilers (Triton's launcher, SGLang's host code), ffmpeg, CA bundle, and
    # the InfiniBand userspace (verbs library and its providers) that NCCL's IB transport loads.
    assert _apt_packages(deps) == [
        "python3.11",
        "python3.11-venv",
        "python3.11-dev",
        "gcc",
        "g++",
        "libc6-dev",
        "ffmpeg",
        "ca-certificates",
        "libibverbs1",
        "ibverbs-providers",
    ]
    # The links the CUDA toolkit layout has and the wheels lack, after the wheels are installed.
    links = deps[deps.index('$PIP install -c "$constraints"') :]
    assert 'test -f "$CUDA_HOME/lib/libcudart.so.13"' in links
    assert 'ln -sfn lib "$CUDA_HOME/lib64"' in links
    assert 'ln -sf libcudart.so.13 "$CUDA_HOME/lib/libcudart.so"' in links
    assert 'ln -sf "$multiarch/libcuda.so.1" "$CUDA_HOME/lib/stubs/libcuda.so"' in links
    assert 'ln -sf libcuda.so.1 "$multiarch/libcuda.so"' in links
    # The build's checks, after paravt is installed, with the Dockerfile's arguments (--sglang in RL).
    assert code.index('$PY /src/images/toolchain_check.py "$@"') > code.index("$PIP install --no-deps")


def _toolchain_check(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "images" / "toolchain_check.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_toolchain_check_builds_with_triton_and_fails_without_a_compiler(tmp_path) -> None:
    """The in-image check run here with Triton's own code: it compiles and imports an extension against
    Python.h; with no C compiler on PATH it fails with Triton's own message."""
    env = {k: v for k, v in os.environ.items() if k not in {"CC", "CXX"}}
    ok = _toolchain_check(env)
    assert ok.returncode == 0, ok.stderr
    assert "Triton builds with" in ok.stdout and "Python.h" in ok.stdout
    empty = tmp_path / "bin"
    empty.mkdir()
    bad = _toolchain_check({**env, "PATH": str(empty)})
    assert bad.returncode == 1
    assert "Failed to find C compiler" in bad.stderr


def test_toolchain_check_sglang_fails_without_nvcc_at_cuda_home(tmp_path) -> None:
    """SGLang 0.5.23's own toolchain discovery (kernels/jit/utils/compile/toolchain.py) resolves nvcc at
    $CUDA_HOME/bin/nvcc: where there is none, the check fails and names it."""
    from tests.support.sglang_support import sglang_site, side_env

    env = {**side_env(sglang_site()), "CUDA_HOME": str(tmp_path)}
    bad = _toolchain_check(env, "--sglang")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert f"SGLang resolves nvcc to {tmp_path}/bin/nvcc, not an executable" in bad.stderr


def test_base_image_script_is_debian_12_from_the_debian_archive() -> None:
    script = (ROOT / "scripts" / "base-image.sh").read_text()
    assert "SUITE=bookworm" in script
    assert "MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}" in script
    assert 'debootstrap --variant=minbase "$SUITE"' in script
    # Pushed under the name the Dockerfiles pin, and that reference printed.
    assert '"docker://$push/paravt-base:$SUITE"' in script
    assert 'ref="$push/paravt-base@$(cat "$WORK/digest")"' in script
    # A digest exists only once pushed: --pin alone is a usage error (exit 2), before anything runs.
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "base-image.sh"), "--pin"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "--pin needs --push" in proc.stderr
    # images-smoke builds on the Dockerfiles' pinned base, from the loopback registry base-image.sh pushes to.
    smoke = (ROOT / "scripts" / "images-smoke.sh").read_text()
    assert "BASE_KIND=${IMAGES_SMOKE_BASE:-pinned}" in smoke
    assert "REGISTRY=${IMAGES_SMOKE_REGISTRY:-localhost:5055}" in smoke
    assert "BASE=$(sed -n 's/^ARG BASE_IMAGE=//p' Dockerfile.sft)" in smoke


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def test_rl_lock_overrides_replace_lock_pins() -> None:
    lock = _pins(ROOT / "images" / "requirements.lock")
    overrides = _pins(ROOT / "images" / "rl-lock-overrides.txt")
    assert overrides == {"numpy": "2.3.5", "cuda-bindings": "13.4.4"}
    for name, version in overrides.items():
        assert name in lock and lock[name] != version  # each override replaces a different lock pin


def test_dockerignore_is_an_allowlist() -> None:
    rules = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert rules[0] == "*"  # everything excluded first ...
    allowed = {r[1:].rstrip("/") for r in rules if r.startswith("!")}
    # ... then only what install.sh needs comes back: no .venv, tests, .git, outputs or .env files.
    assert allowed == {
        "pyproject.toml",
        "README.md",
        "paravt_core",
        "components",
        "pipelines",
        "configs",
        "images",
    }


def _component_stages() -> dict[str, str]:
    """Stage verb -> image of every component module in components/ (module name = stage verb)."""
    stages = {}
    for path in sorted((ROOT / "components").glob("*.py")):
        # multinode: the sft/rl steps as Kubeflow Trainer jobs; their nodes run `paravt sft|rl`, covered here;
        # eval_task, publish: helpers shared by the components, no component of their own;
        # ablations: the ablation DAG's ops run paravt_core.rl.launch and paravt_core.report.ablation (the
        # RL and report stages' code), no `paravt ablations` verb of their own
        if path.stem in {"__init__", "images", "locations", "publish", "multinode", "eval_task", "ablations"}:
            continue
        module = importlib.import_module(f"components.{path.stem}")
        ops = [v for k, v in vars(module).items() if k.endswith("_op") and hasattr(v, "component_spec")]
        assert ops, f"components/{path.name} defines no *_op component"
        for op in ops:
            stages[path.stem] = op.component_spec.implementation.container.image
    return stages


@pytest.mark.parametrize("stage", sorted(_component_stages()))
def test_every_component_stage_command_runs_in_the_venv(stage: str) -> None:
    from components.images import EVAL_IMAGE, RL_IMAGE, SFT_IMAGE

    image = _component_stages()[stage]
    assert image in {SFT_IMAGE, RL_IMAGE, EVAL_IMAGE}, (stage, image)
    if importlib.util.find_spec(f"paravt_core.{stage}") is None:
        pytest.skip(f"paravt_core.{stage} is not in this checkout yet (its component is written against it)")
    paravt = Path(sys.executable).parent / "paravt"  # the console script the image's ENTRYPOINT names
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [str(paravt), stage, "--help"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0, (stage, proc.stderr)
    assert proc.stdout.startswith(f"usage: paravt {stage}"), proc.stdout[:200]
    assert "--config" in proc.stdout


def test_components_cover_data_and_report() -> None:
    assert {"data", "report", "eval"} <= set(_component_stages())
