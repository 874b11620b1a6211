"""One-line mutants applied by hand where mutmut reaches no code: a module of class bodies and decorated
methods (``paravt_core/eval/config.py``: pydantic fields, validators, properties).

A spec (JSON: ``label``, ``path``, ``tests``, ``mutants`` as ``[old, new]`` pairs, each ``old`` found once in
the file) names the mutants. Each is written into a copy of ``paravt_core`` in ``build/hand/<label>/`` (every
other entry of the repository linked), the tests run there (``pytest -x``), and the copy restored: the
repository's own files are never changed. Prints KILLED / SURVIVED per mutant with the first failing test.

    .venv/bin/python scripts/mutation_by_hand.py scripts/mutants_eval_config.json
    .venv/bin/python scripts/mutation_by_hand.py scripts/mutants_eval_config.json --tests tests/test_x.py
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def scratch(label: str) -> Path:
    """``build/hand/<label>/``: a copy of ``paravt_core``, links to every other entry."""
    work = ROOT / "build" / "hand" / label
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for entry in ROOT.iterdir():
        if entry.name not in ("paravt_core", "build", ".git", "mutants"):
            (work / entry.name).symlink_to(entry)
    shutil.copytree(ROOT / "paravt_core", work / "paravt_core", ignore=shutil.ignore_patterns("__pycache__"))
    return work


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("spec", help="JSON spec: label, path, tests, mutants ([old, new] pairs)")
    ap.add_argument("--tests", nargs="+", help="run these tests instead of the spec's")
    args = ap.parse_args(argv)
    spec = json.loads(Path(args.spec).read_text())
    tests = args.tests or spec["tests"]
    work = scratch(spec["label"])
    target = work / spec["path"]
    original = target.read_text()
    env = {**os.environ, "PYTHONPATH": str(work), "OMP_NUM_THREADS": "1"}  # the copy wins over the repository

    def run() -> subprocess.CompletedProcess[str]:
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            *tests,
        ]
        return subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)

    if run().returncode != 0:
        raise SystemExit(f"{tests} fail with no mutant: fix them first")
    killed = 0
    for i, (old, new) in enumerate(spec["mutants"], 1):
        if original.count(old) != 1:
            raise SystemExit(f"mutant {i}: {old!r} is not in {spec['path']} exactly once")
        target.write_text(original.replace(old, new))
        try:
            out = run()
        finally:
            target.write_text(original)
        first = next((x for x in out.stdout.splitlines() if x.startswith(("FAILED ", "ERROR "))), "")
        killed += out.returncode != 0
        verdict = "KILLED  " if out.returncode != 0 else "SURVIVED"
        print(f"{verdict} {i:2} {old.strip()!r} -> {new.strip()!r}  {first}".rstrip(), flush=True)
    print(f"{killed} of {len(spec['mutants'])} killed")
    return 0 if killed == len(spec["mutants"]) else 1


if __name__ == "__main__":
    sys.exit(main())
