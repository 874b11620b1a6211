"""Shared fixtures live in tests/fixtures/*; each module is registered here as a plugin.

Tiers: every test under tests/unit, tests/contract or tests/e2e gets that folder's marker (``-m unit`` etc.).
A unit test may not request a fixture that starts a server or needs a side site, nor import a support
module that does (``FORBIDDEN_IN_UNIT``): collection stops with the list of such tests, so the fast tier
stays fast and runs with only ``.venv`` (``make test-unit``).

Hypothesis profiles: ``ci`` (chosen when the ``CI`` environment variable is set) is derandomized, so a
property test explores the same examples on every run and a rare branch it reaches is reached every
time; it runs many examples and has no deadline (a loaded 2-core runner must not turn slowness into a
failure). ``dev`` (the local default) stays random, so local runs keep finding new examples.
``HYPOTHESIS_PROFILE=ci`` selects a profile explicitly. Tests that set ``max_examples`` themselves keep it.
"""

import os
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, settings

# One intra-op thread: the tiny model is ~10x faster and far steadier on 2 shared cores, and
# subprocesses (the KFP local runner, servers) inherit it. Set before anything imports torch.
os.environ.setdefault("OMP_NUM_THREADS", "1")

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=500,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=200, deadline=None)
# `make mutation` runs the tests once per mutant: the same few examples every time, so a verdict repeats.
settings.register_profile("mutation", derandomize=True, max_examples=50, deadline=None, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))

pytest_plugins = [
    "tests.fixtures.s3",
    "tests.fixtures.tiny_model",
    "tests.fixtures.synth",
    "tests.fixtures.sft",
    "tests.fixtures.eval",
    "tests.fixtures.sglang",
    "tests.fixtures.mlflow_server",
    "tests.fixtures.vllm_server",
    "tests.fixtures.rl",
    "tests.fixtures.agent",
    "tests.fixtures.gpu_check",
    "pytester",  # tests/unit/test_tiers.py runs the tier rule on a small tree of its own
]

TIERS = ("unit", "contract", "e2e")
# Fixtures that start a server (Ceph RGW, SGLang, MLflow, vLLM, router fleets, the KFP test server) or need
# a side site; a fixture named so in a test module counts too (kfp_server, kfp, fleet, vllm_parser).
FORBIDDEN_IN_UNIT = frozenset({
    "s3_server", "s3_env", "s3_bucket", "sglang_checker", "receiver", "mlflow_server", "vllm_server",
    "release_vllm_server", "push_server", "kfp_server", "kfp", "fleet", "vllm_parser",
})  # fmt: skip
# Support modules that are servers, emulators or side-site launchers: a unit test module may not import them.
FORBIDDEN_MODULES_IN_UNIT = frozenset({
    "tests.support.s3server", "tests.support.k8s_emulator", "tests.support.kfp_test_server",
    "tests.support.sglang_side", "tests.support.sglang_support", "tests.support.fleet_support",
    "tests.support.qwen_vl_utils_side", "tests.fixtures.vllm_server", "tests.fixtures.mlflow_server",
    "tests.fixtures.served",
})  # fmt: skip


def tier_of(path: Path) -> str | None:
    """The tier folder right below the last ``tests`` folder of ``path``; None for a test outside the tiers."""
    parts = path.parts
    if "tests" not in parts:
        return None
    below = parts[len(parts) - 1 - parts[::-1].index("tests") + 1 :]
    return below[0] if len(below) > 1 and below[0] in TIERS else None


def _forbidden_imports(module: ModuleType | None) -> set[str]:
    names = set()
    for value in vars(module).values() if module is not None else ():
        name = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", None)
        if name in FORBIDDEN_MODULES_IN_UNIT:
            names.add(name)
    return names


def unit_violations(items: Iterable[pytest.Item]) -> list[str]:
    """One line per unit-tier test that requests a forbidden fixture or whose module imports a forbidden one."""
    lines = []
    for item in items:
        if tier_of(item.path) != "unit":
            continue
        fixtures = sorted(FORBIDDEN_IN_UNIT.intersection(getattr(item, "fixturenames", ())))
        modules = sorted(_forbidden_imports(getattr(item, "module", None)))
        if fixtures or modules:
            lines.append(f"{item.nodeid}: {', '.join(fixtures + modules)}")
    return lines


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = tier_of(item.path)
        if tier:
            item.add_marker(getattr(pytest.mark, tier))
    bad = unit_violations(items)
    if bad:
        raise pytest.UsageError(
            "unit tests may not start servers or need side sites (tests/conftest.py FORBIDDEN_IN_UNIT); "
            "move these to tests/contract or tests/e2e:\n  " + "\n  ".join(bad)
        )
