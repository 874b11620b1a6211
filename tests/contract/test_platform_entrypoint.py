"""images/entrypoint.sh, the images' ENTRYPOINT, run directly with the project venv's real ``paravt``
first on PATH (as /opt/paravt/bin is in the images): ``IMAGE data …`` and ``IMAGE paravt data …`` both
run the stage, and a program given as the first word (what kfp.local.DockerRunner passes as the
container's arguments: ``sh -c …`` / ``python3 …``) runs as given, its exit status passed through."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT

SCRIPT = ROOT / "images" / "entrypoint.sh"


def run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin", PYTHONPATH=str(ROOT))
    return subprocess.run(
        ["/bin/sh", str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )


@pytest.mark.parametrize("prefix", [[], ["paravt"]], ids=["bare-verb", "paravt-verb"])
def test_stage_verb_with_or_without_paravt(prefix: list[str]) -> None:
    proc = run(*prefix, "data", "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: paravt data")


def test_eval_is_the_stage_not_the_shell_builtin() -> None:
    proc = run("eval", "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: paravt eval")


def test_no_arguments_and_options_go_to_paravt() -> None:
    for args in ([], ["--help"]):
        proc = run(*args)
        assert proc.returncode == 0 and proc.stdout.startswith("usage: paravt"), (args, proc.stderr)


def test_a_program_runs_as_given_with_its_exit_status() -> None:
    proc = run("sh", "-c", "echo from-sh; exit 7")
    assert (proc.returncode, proc.stdout) == (7, "from-sh\n")
    proc = run("python3", "-c", "import sys; print(sys.prefix)")
    assert proc.returncode == 0 and proc.stdout.strip() == sys.prefix  # the venv's python3 (first on PATH)


def test_a_bad_stage_argument_fails_with_paravts_status() -> None:
    proc = run("data", "--no-such-flag")
    assert proc.returncode == 2 and "--no-such-flag" in proc.stderr
