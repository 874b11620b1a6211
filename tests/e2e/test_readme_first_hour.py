"""The README as a newcomer reads it: it starts with the two commands, the first hour comes
next, reference material lives in docs/, and the first hour's commands run in order after the demo."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT

REPO = ROOT
README = (REPO / "README.md").read_text()


def _blocks(text: str) -> list[list[str]]:
    """Fenced bash blocks as lists of commands (comments and blank lines dropped)."""
    out = []
    for body in re.findall(r"```bash\n(.*?)```", text, re.S):
        lines = [line.split("#", 1)[0].strip() for line in body.splitlines()]
        out.append([line for line in lines if line])
    return out


def _first_hour() -> str:
    return README.split("\n## First hour\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_starts_with_the_two_commands_then_the_first_hour() -> None:
    before_first_block = README.split("```", 1)[0]
    assert [line for line in before_first_block.splitlines() if line.strip()] == [
        "# paravt — ParaVT as a Kubeflow pipeline"
    ]
    assert _blocks(README)[0] == ["make demo", "make test"]
    assert re.findall(r"^## (.*)$", README, re.M)[0] == "First hour"
    assert len(README.splitlines()) < 120  # reference material is in docs/, not here


def test_every_local_link_of_the_readme_and_the_reference_resolves() -> None:
    for doc in (REPO / "README.md", REPO / "docs/reference.md"):
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
            if not target.startswith(("http://", "https://")):
                assert (doc.parent / target).exists(), f"{doc.name}: {target}"


@pytest.mark.timeout(2400)  # the demo and seven stage commands on the tiny model: minutes on 2 busy cores
def test_the_first_hour_commands_run_in_order_after_the_demo(tmp_path: Path) -> None:
    """`make demo`, then every command of the first hour's block, in order, from the same directory
    (`configs/` beside `demo-out/`, as in a clone): each exits 0, and the demo's report stays complete."""
    from paravt_core import storage

    (tmp_path / "configs").symlink_to(REPO / "configs")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    paravt = [sys.executable, "-m", "paravt_core.cli"]

    def run(argv: list[str]) -> None:
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, f"{shlex.join(argv)} -> {proc.returncode}\n{proc.stderr[-3000:]}"

    run([*paravt, "demo", "--out-dir", "demo-out"])  # what `make demo` runs after the setup
    commands = _blocks(_first_hour())[0]
    assert commands and all(c.startswith("paravt ") for c in commands), commands
    for line in commands:
        for part in line.split("&&"):
            run([*paravt, *shlex.split(part)[1:]])
    assert storage.is_complete(str(tmp_path / "demo-out/run/report"))
