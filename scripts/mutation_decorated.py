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

    .venv/bin/python scripts/mutation_decorated.py --only components/multinode.py [--sample 40]
    .venv/bin/python scripts/mutation_decorated.py --report
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

# label -> (file, its test files)
DECORATED: dict[str, tuple[str, tuple[str, ...]]] = {
    "components/multinode.py": (
        "components/multinode.py",
        (
            "tests/test_pipeline_multinode.py",
            "tests/test_hardware_defaults.py",
            "tests/test_tracking_manifests.py",
            "tests/test_multinode_steps.py",
            "tests/test_stage_retry.py",
            "tests/test_launch_trainjob_e2e.py",
        ),
    ),
}


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
    root = SCRATCH / (label.replace("/", "-").replace(".", "-") + "-decorated")
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


def run(label: str, sample: int, timeout_s: float, only: list[int] | None = None) -> Path:
    """Run the mutants of ``label`` (every k-th for ``sample``; ``only``: these indices, e.g. the survivors
    of a run, after new tests were written for them)."""
    path, tests = DECORATED[label]
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
    sampling = f"every {step}th of {len(every)}" if step > 1 else f"all {len(every)}"
    if only is not None:
        sampling = f"{len(only)} named of {len(every)}"
    out = root / "results.json"
    out.write_text(
        json.dumps({"label": label, "mutants": len(every), "sampling": sampling, "results": results})
    )
    return out


def report(labels: list[str]) -> int:
    print(f"{'module':<26}{'mutants':>8}{'run':>6}{'killed':>8}{'survived':>10}{'kill rate':>11}  sampling")
    for label in labels:
        found = SCRATCH / (label.replace("/", "-").replace(".", "-") + "-decorated") / "results.json"
        if not found.is_file():
            print(f"{label:<26}{'-':>8}{0:>6}{'-':>8}{'-':>10}{'not run':>11}")
            continue
        data = json.loads(found.read_text())
        res = data["results"]
        killed = [r for r in res if r["status"] != "survived"]
        rate = f"{100 * len(killed) / len(res):.1f} %" if res else "not run"
        print(f"{label:<26}{data['mutants']:>8}{len(res):>6}{len(killed):>8}{len(res) - len(killed):>10}"
              f"{rate:>11}  {data['sampling']}")  # fmt: skip
        for r in res:
            if r["status"] == "survived":
                print(f"    survived mutant {r['mutant']}: " + " | ".join(r["diff"]))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", default=[], choices=sorted(DECORATED), help="module label")
    ap.add_argument(
        "--sample", type=int, default=0, help="about N mutants, every k-th in source order (0: all)"
    )
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per mutant's tests (then: killed)")
    ap.add_argument("--report", action="store_true", help="only print the table of the last runs")
    ap.add_argument("--mutants", default="", help="comma-separated indices to run (as the report names them)")
    args = ap.parse_args(argv)
    labels = args.only or sorted(DECORATED)
    if not args.report:
        for label in labels:
            print(f"== decorated-function mutants: {label}", flush=True)
            only = [int(i) for i in args.mutants.split(",")] if args.mutants else None
            run(label, args.sample, args.timeout, only)
    return report(labels)


if __name__ == "__main__":
    sys.exit(main())
