"""Mutation testing of decorated functions, which mutmut 3 leaves alone: the KFP components
(``@dsl.component``) of ``components/multinode.py``.

mutmut swaps a function's body through a trampoline it adds beside the function; it skips every decorated
function (a decorator runs at definition time and may read the function, as KFP's does: it ships the body's
source text into the pipeline spec). So the mutants here are whole files: mutmut's own operators
(``mutmut.mutation.mutators.mutation_operators``, the same as ``make mutation`` applies) on each node inside a
decorated function, one change per mutant. Each mutant is written into a scratch copy of the repository
(``build/mutation/<label>-decorated/``: the mutated file's folder copied, every other entry linked) and the
module's test files are run there (``pytest -x``); a mutant whose tests fail, or run past ``--timeout``, is
killed. Written by hand because no maintained tool mutates decorated functions.

    make mutation PLATFORM=1 MODULES=components/multinode.py       # scripts/mutation.py calls run() here
    .venv/bin/python scripts/mutation_decorated.py --mutants 16,48   # these mutants again (after new tests)
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import libcst as cst
from mutmut.mutation.mutators import mutation_operators

ROOT = Path(__file__).resolve().parent.parent
SCRATCH = ROOT / "build" / "mutation"

# the modules whose code is all in decorated functions (scripts/mutation.py hands them to run() below)
DECORATED = ("components/multinode.py",)


class _Nodes(cst.CSTVisitor):
    """Every node inside the body of a decorated top-level function (not its decorators or signature)."""

    def __init__(self) -> None:
        self.nodes: list[cst.CSTNode] = []
        self.depth = 0

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        if node.decorators and self.depth == 0:
            self.depth += 1
            node.body.visit(_Collect(self.nodes))
            self.depth -= 1
        return False


class _Collect(cst.CSTVisitor):
    def __init__(self, nodes: list[cst.CSTNode]) -> None:
        self.nodes = nodes

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.nodes.append(node)
        return True


def sampling_note(step: int, total: int) -> str:
    """How a run sampled its mutants, for the table: "every 3rd of 220" or "all 220"."""
    if step <= 1:
        return f"all {total}"
    suffix = "th" if 10 <= step % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(step % 10, "th")
    return f"every {step}{suffix} of {total}"


def mutants(source: str) -> list[str]:
    """Every one-change mutant of ``source``'s decorated functions (whole files), in source order."""
    module = cst.parse_module(source)
    visitor = _Nodes()
    module.visit(visitor)
    out: list[str] = []
    for node in visitor.nodes:
        for kind, operator in mutation_operators:
            if not isinstance(node, kind):
                continue
            for changed in operator(node):  # type: ignore[arg-type]
                code = module.deep_replace(node, changed).code
                if code != source and code not in out:
                    out.append(code)
    return out


def _scratch(label: str, path: str) -> Path:
    root = scratch_of(label)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    # copied: the mutated file's folder, and what pytest resolves its rootdir and ``pythonpath`` from (a
    # linked tests/ or pyproject.toml would put the repository itself first on sys.path)
    copied = {path.split("/", 1)[0], "tests", "pyproject.toml"}
    for entry in ROOT.iterdir():
        if entry.name in ("build", ".git", "mutants") or entry.name in copied:
            continue
        (root / entry.name).symlink_to(entry)
    for name in copied:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copyfile(ROOT / name, root / name)
    return root


def scratch_of(label: str) -> Path:
    return SCRATCH / (label.replace("/", "-").replace(".", "-") + "-decorated")


def run(
    label: str,
    path: str,
    tests: tuple[str, ...],
    sample: int,
    timeout_s: float,
    only: list[int] | None = None,
) -> Path:
    """Run the mutants of ``path`` with ``tests`` (every k-th for ``sample``; ``only``: these indices, e.g. the
    survivors of a run, after new tests were written for them); the results in ``scratch_of(label)``."""
    source = (ROOT / path).read_text()
    every = mutants(source)
    step = max(1, math.ceil(len(every) / sample)) if sample else 1
    chosen = only if only is not None else list(range(0, len(every), step))
    root = _scratch(label, path)
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1", "HYPOTHESIS_PROFILE": "mutation"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly", "-p", "no:cacheprovider", *tests]
    results = []
    baseline = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    if baseline.returncode != 0:
        raise SystemExit(f"the tests fail with no mutant:\n{baseline.stdout[-3000:]}")
    for i in chosen:
        (root / path).write_text(every[i])
        try:
            done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s)
            status = "survived" if done.returncode == 0 else "killed"
        except subprocess.TimeoutExpired:
            status = "timeout"
        diff = [
            line
            for line in difflib.unified_diff(source.splitlines(), every[i].splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))
        ]
        results.append({"mutant": i, "status": status, "diff": diff})
        print(f"  mutant {i}: {status}  {' | '.join(diff)[:160]}", flush=True)
    (root / path).write_text(source)
    sampling = sampling_note(step, len(every))
    if only is not None:
        sampling = f"{len(only)} named of {len(every)}"
    out = root / "results.json"
    out.write_text(
        json.dumps({"label": label, "mutants": len(every), "sampling": sampling, "results": results})
    )
    return out


def row(label: str) -> tuple[int, int, int, list[str], str] | None:
    """(mutants, run, killed, survivors as their diffs, sampling) of the last run of ``label``; None: not run."""
    found = scratch_of(label) / "results.json"
    if not found.is_file():
        return None
    data = json.loads(found.read_text())
    res = data["results"]
    alive = [f"mutant {r['mutant']}: " + " | ".join(r["diff"]) for r in res if r["status"] == "survived"]
    return data["mutants"], len(res), len(res) - len(alive), alive, data["sampling"]


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import mutation

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=DECORATED[0], choices=DECORATED, help="module label")
    ap.add_argument(
        "--mutants", required=True, help="comma-separated indices to run (as the report names them)"
    )
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per mutant's tests (then: killed)")
    args = ap.parse_args(argv)
    m = next(p for p in mutation.PLATFORM if p.label == args.only)
    run(m.label, m.path, m.tests, 0, args.timeout, [int(i) for i in args.mutants.split(",")])
    return mutation.report_platform([m])


if __name__ == "__main__":
    sys.exit(main())
