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

ROOT = Path(__file__).resolve().parents[1]
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


@pytest.mark.parametrize("family", FAMILIES)
def test_dockerfile_structure(family: str) -> None:
    instrs = instructions(ROOT / f"Dockerfile.{family}")
    words = [w for w, _ in instrs]

    # Base: a build argument declared before FROM, defaulting to a CUDA runtime image by digest.
    assert words[:2] == ["ARG", "FROM"]
    name, _, default = instrs[0][1].partition("=")
    assert name == "BASE_IMAGE"
    # Fully qualified (registry host first): podman/buildah resolve a short name such as `nvidia/cuda`
    # only through `unqualified-search-registries` in /etc/containers/registries.conf, which Debian's
    # podman ships empty ("short-name ... did not resolve to an alias and no unqualified-search
    # registries are defined", seen with podman 4.3 here); Docker alone implies docker.io.
    assert re.fullmatch(r"docker\.io/nvidia/cuda:[\w.-]*runtime[\w.-]*@sha256:[0-9a-f]{64}", default), default
    assert instrs[1][1] == "${BASE_IMAGE}"
    assert words.count("FROM") == 1

    # OCI labels carry the code version and revision from build args; the default version is the package's.
    labels = " ".join(_one(instrs, "LABEL"))
    assert f'org.opencontainers.image.title="paravt-{family}"' in labels
    assert 'org.opencontainers.image.version="${PARAVT_VERSION}"' in labels
    assert 'org.opencontainers.image.revision="${VCS_REF}"' in labels
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert f"PARAVT_VERSION={version}" in _one(instrs, "ARG")

    # The venv's bin first on PATH: `paravt`, and the `python3` KFP lightweight components run.
    (env,) = _one(instrs, "ENV")
    assert "PATH=/opt/paravt/bin:$PATH" in env.split()

    # Dependencies before code: the deps layer's inputs are pyproject.toml and images/ requirement
    # files only, so a code edit changes no input of that layer and rebuilds only what follows it.
    runs = _one(instrs, "RUN")
    assert len(runs) == 2 and runs[1] == "sh /src/images/install.sh code"
    assert runs[0].startswith("sh /src/images/install.sh deps")
    assert ("-r /src/images/rl-requirements.txt" in runs[0]) == (family == "rl")
    assert ("--lock-override /src/images/rl-lock-overrides.txt" in runs[0]) == (family == "rl")
    deps_at = next(i for i, (w, a) in enumerate(instrs) if w == "RUN" and a == runs[0])
    code_at = next(i for i, (w, a) in enumerate(instrs) if w == "RUN" and a == runs[1])
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
    assert {"paravt_core", "components", "pipelines", "configs", "README.md", "images/entrypoint.sh"} <= after
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


def test_rl_extra_is_sglang_and_its_router_pinned() -> None:
    lines = [
        line.strip()
        for line in (ROOT / "images" / "rl-requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines == ["sglang==0.5.23", "sglang-router==0.3.2"]


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
