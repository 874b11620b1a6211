"""`make demo` installs only what the demo needs: ffmpeg and the venv, not Ceph (the test
S3 server) nor the SGLang / lmms-eval / router side sites, which `make test` still installs. Read from
`make -n` (GNU make prints the recipes and runs none) and the script's own ``--plan`` (prints the steps and
runs nothing): nothing is installed here."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from tests.support.paths import ROOT

REPO = ROOT


def _setup_steps(target: str) -> list[str]:
    recipes = subprocess.run(
        ["make", "-n", "-C", str(REPO), target],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    ).stdout.splitlines()
    setup = [shlex.split(line) for line in recipes if line.startswith("scripts/setup.sh")]
    assert len(setup) == 1, recipes
    if "--plan" not in (REPO / "scripts/setup.sh").read_text():  # never run a setup that would install
        pytest.fail(
            "scripts/setup.sh has no --plan mode: cannot tell what it would install without running it"
        )
    argv = [str(REPO / setup[0][0]), "--plan", *setup[0][1:]]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.splitlines()


def test_make_demo_sets_up_ffmpeg_and_the_venv_only() -> None:
    assert _setup_steps("demo") == ["debian ffmpeg", "venv"]


def test_make_test_still_sets_up_everything() -> None:
    assert _setup_steps("test") == [
        "debian ffmpeg ceph-mon ceph-osd radosgw e2fsprogs",
        "venv",
        "vllm_site",  # in the background, beside the steps after it
        "sglang_site",
        "lmms_site",
        "router_site",
        "qwen_site",
        "mlflow_site",
        "wandb_site",
        "tf517_site",
    ]


def test_an_unknown_mode_is_a_usage_error() -> None:
    if "--plan" not in (REPO / "scripts/setup.sh").read_text():  # never run a setup that would install
        pytest.fail("scripts/setup.sh has no --plan mode")
    proc = subprocess.run(
        [str(REPO / "scripts/setup.sh"), "--plan", "everything"], capture_output=True, text=True
    )
    assert (proc.returncode, proc.stderr) == (
        2,
        "scripts/setup.sh: unknown mode 'everything' (demo or all)\n",
    )
