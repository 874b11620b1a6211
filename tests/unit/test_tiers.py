"""The tier rule of tests/conftest.py: markers by folder, and a unit test that would start a server or need a
side site stops collection; the unit tier and conftest import nothing from a side site (only ``.venv``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FORBIDDEN_IN_UNIT, tier_of
from tests.support.paths import ROOT

CONFTEST = """
import pytest
from tests.conftest import pytest_collection_modifyitems  # noqa: F401

@pytest.fixture
def s3_bucket():
    raise AssertionError("never set up: the rule stops collection first")

@pytest.fixture
def needs_s3(s3_bucket):
    return s3_bucket
"""
INI = """
[pytest]
addopts = --strict-markers -p no:cacheprovider
markers =
    unit: u
    contract: c
    e2e: e
"""


def _tree(pytester: pytest.Pytester, files: dict[str, str]) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makeini(INI)
    for rel, text in files.items():
        path = pytester.path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_tier_is_the_folder_below_the_last_tests_folder() -> None:
    assert tier_of(Path("/r/tests/unit/test_a.py")) == "unit"
    assert tier_of(Path("/r/tests/contract/test_a.py")) == "contract"
    assert tier_of(Path("/tests/x/tests/e2e/test_a.py")) == "e2e"
    assert tier_of(Path("/r/tests/test_a.py")) is None
    assert tier_of(Path("/r/tests/support/test_a.py")) is None
    assert tier_of(Path("/r/other/unit/test_a.py")) is None


def test_the_servers_and_side_sites_are_named_in_one_list() -> None:
    assert {"s3_server", "s3_bucket", "sglang_checker", "mlflow_server", "vllm_server", "kfp_server"} <= (
        FORBIDDEN_IN_UNIT
    )


def test_markers_follow_the_folder_and_select_the_tier(pytester: pytest.Pytester) -> None:
    _tree(pytester, {
        "tests/unit/test_u.py": "def test_u():\n    pass\n",
        "tests/contract/test_c.py": "def test_c(s3_bucket):\n    pass\n",
        "tests/e2e/test_e.py": "def test_e():\n    pass\n",
    })  # fmt: skip
    for tier, name in (("unit", "test_u"), ("contract", "test_c"), ("e2e", "test_e")):
        result = pytester.runpytest("--collect-only", "-q", "-m", tier)
        assert result.ret == pytest.ExitCode.OK
        collected = [line for line in result.outlines if "::" in line]
        assert collected == [f"tests/{tier}/{name[:6]}.py::{name}"]


def test_a_unit_test_requesting_a_server_fixture_stops_collection(pytester: pytest.Pytester) -> None:
    _tree(pytester, {
        "tests/unit/test_u.py": "def test_direct(s3_bucket):\n    pass\n\ndef test_through(needs_s3):\n    pass\n"
                                "\ndef test_fine(tmp_path):\n    pass\n",
        "tests/contract/test_c.py": "def test_c(s3_bucket):\n    pass\n",
    })  # fmt: skip
    result = pytester.runpytest("--collect-only", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.errlines
    assert "  tests/unit/test_u.py::test_direct: s3_bucket" in err
    assert "  tests/unit/test_u.py::test_through: s3_bucket" in err  # through another fixture
    assert not [line for line in err if "test_fine" in line or "test_c" in line]


def test_a_unit_test_module_importing_a_server_module_stops_collection(pytester: pytest.Pytester) -> None:
    _tree(pytester, {
        "tests/unit/test_u.py": "from tests.support.kfp_test_server import KfpTestServer\n\n"
                                "def test_u():\n    assert KfpTestServer\n",
    })  # fmt: skip
    result = pytester.runpytest("--collect-only", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "  tests/unit/test_u.py::test_u: tests.support.kfp_test_server" in result.errlines


# Every module that collecting tests/unit imports comes from .venv, the interpreter's own library or this
# repository: none from a side site (.venv-bench, .venv-router, .venv-vllm, .venv-wandb, .venv-mlflow).
_PROBE = """
import json, os, sys, sysconfig
import pytest
code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "tests/unit"])
roots = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, os.getcwd())}
roots |= {os.path.realpath(p) for p in sysconfig.get_paths().values()}
outside = sorted(
    name for name, mod in list(sys.modules.items())
    if getattr(mod, "__file__", None)
    and not any(os.path.realpath(mod.__file__).startswith(r + os.sep) for r in roots)
)
side = sorted(name for name in sys.modules if name.split(".")[0] in {"sglang", "sglang_router", "vllm", "lmms_eval",
              "qwen_vl_utils", "decord", "wandb"})
print(json.dumps({"code": int(code), "outside": outside, "side": side}))
"""


def test_collecting_the_unit_tier_imports_nothing_from_a_side_site() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.endswith("_SITE")}
    done = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600, check=False)  # fmt: skip
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"code": 0, "outside": [], "side": []}, done.stderr[-2000:]
