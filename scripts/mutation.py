"""`make mutation`: mutmut 3 over the pure modules, then the kill rate per module and every survivor.

mutmut (config: ``[tool.mutmut]`` in pyproject.toml) copies ``paravt_core`` into ``mutants/``, runs the
selected test files once to learn which tests reach which function, then runs each mutant against only those
tests. Modules run one after another in the order below (``rewards/accuracy.py`` last: it changes often);
``--only`` picks some. ``mutants/`` keeps the stats pass and the verdicts across runs (``--report`` prints
them); running a module again checks all of its mutants again.
Survivors are either killed by a new test or listed as equivalent in docs/mutation.md.

    .venv/bin/python scripts/mutation.py                      # everything (hours on 2 cores)
    .venv/bin/python scripts/mutation.py --only rl/gating.py  # one module
    .venv/bin/python scripts/mutation.py --report             # print the table from the last runs
    .venv/bin/python scripts/mutation.py --verify tests/test_x.py paravt_core.mod.x_f__mutmut_3 ...
                                               # does this test file kill these mutants? (after a run)
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTMUT = str(Path(sys.executable).with_name("mutmut"))

# (module, mutant-name globs). storage.py is mostly S3 I/O: only its path guard is in scope.
MODULES: list[tuple[str, list[str]]] = [
    ("rl/gating.py", ["paravt_core.rl.gating.*"]),
    ("rl/loss.py", ["paravt_core.rl.loss.*"]),
    ("rl/advantages.py", ["paravt_core.rl.advantages.*"]),
    ("rewards/tool.py", ["paravt_core.rewards.tool.*"]),
    ("rewards/format.py", ["paravt_core.rewards.format.*"]),
    ("rewards/compose.py", ["paravt_core.rewards.compose.*"]),
    ("video/timeparse.py", ["paravt_core.video.timeparse.*"]),
    ("video/sampling.py", ["paravt_core.video.sampling.*"]),
    (
        "storage.safe_join",
        ["paravt_core.storage.x_safe_join__mutmut_*", "paravt_core.storage.x_unsafe_name_reason__mutmut_*"],
    ),
    ("eval/records.py", ["paravt_core.eval.records.*"]),
    ("eval/metrics.py", ["paravt_core.eval.metrics.*"]),
    ("agent/parsing.py", ["paravt_core.agent.parsing.*"]),
    ("sft/packing.py", ["paravt_core.sft.packing.*"]),
    ("rewards/accuracy.py", ["paravt_core.rewards.accuracy.*"]),
]
KILLED = {"killed", "timeout", "segfault", "caught by type check"}
NOT_RUN = {"not checked", "skipped"}


def _env() -> dict[str, str]:
    # mutmut runs the tests inside mutants/: its copy of paravt_core must win over any installed one.
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT / "mutants"),
        "OMP_NUM_THREADS": "1",
        "HYPOTHESIS_PROFILE": "mutation",
    }


def statuses() -> dict[str, str]:
    """mutant name -> status, from ``mutmut results --all true`` (lines ``    name: status``)."""
    out = subprocess.run(
        [MUTMUT, "results", "--all", "true"], cwd=ROOT, env=_env(), capture_output=True, text=True, check=True
    ).stdout
    result = {}
    for line in out.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and name.startswith("paravt_core."):
            result[name] = status
    return result


def report(selected: list[tuple[str, list[str]]]) -> int:
    table = statuses()
    print(f"{'module':<22}{'mutants':>8}{'killed':>8}{'survived':>10}{'not run':>9}{'kill rate':>11}")
    survivors: list[tuple[str, str]] = []
    for module, globs in selected:
        names = [n for n in table if any(fnmatch.fnmatchcase(n, g) for g in globs)]
        run = [n for n in names if table[n] not in NOT_RUN]
        killed = [n for n in run if table[n] in KILLED]
        alive = sorted(n for n in run if table[n] not in KILLED)
        survivors += [(n, table[n]) for n in alive]
        rate = f"{100 * len(killed) / len(run):.1f} %" if run else "-"
        print(
            f"{module:<22}{len(names):>8}{len(killed):>8}{len(alive):>10}{len(names) - len(run):>9}{rate:>11}"
        )
    print(f"\nsurvivors ({len(survivors)}; `mutmut show NAME` prints the diff):")
    for name, status in survivors:
        print(f"  {name}: {status}")
    return 0


def verify(test_file: str, names: list[str]) -> int:
    """Run ``test_file`` against each named mutant of the last run (mutmut's trampolines pick the mutant from
    ``MUTANT_UNDER_TEST``) and print KILLED / SURVIVED per mutant: the check that a new test kills the
    survivor it was written for, in seconds, without a new stats pass. The file must pass with no mutant."""
    short = [n for n in names if not n.startswith("paravt_core.")]
    if short:  # a name that matches no module's prefix silently runs the original code
        raise SystemExit(
            f"mutant names are full (paravt_core.<module>.<name>, as --report prints them): {short}"
        )
    if not (ROOT / "mutants" / "paravt_core").is_dir():
        raise SystemExit("no mutants/ yet: run `make mutation MODULES=...` for the module first")
    # inside mutants/, where the mutated paravt_core is the one imported (a test's own helpers too)
    copy = ROOT / "mutants" / "tests" / f"_verify_{os.getpid()}_{Path(test_file).name}"
    shutil.copyfile(test_file, copy)
    try:

        def run(mutant: str) -> subprocess.CompletedProcess[str]:
            cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly", "-p", "no:cacheprovider"]
            env = {**_env(), "MUTANT_UNDER_TEST": mutant}
            return subprocess.run(
                [*cmd, str(copy)], cwd=ROOT / "mutants", env=env, capture_output=True, text=True
            )

        baseline = run("")
        if baseline.returncode != 0:
            print(baseline.stdout[-3000:])
            raise SystemExit(f"{test_file} fails with no mutant: fix it first")
        survived = 0
        for name in names:
            out = run(name)
            first = next(
                (line for line in out.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))), ""
            )
            verdict = "SURVIVED" if out.returncode == 0 else "KILLED  "
            survived += out.returncode == 0
            print(f"{verdict} {name}  {first.replace(copy.name, Path(test_file).name)}".rstrip(), flush=True)
        return 1 if survived else 0
    finally:
        copy.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", default=[], help="module label (repeatable), e.g. rl/loss.py")
    ap.add_argument("--report", action="store_true", help="only print the table of the last runs")
    ap.add_argument(
        "--verify", nargs="+", metavar=("TEST_FILE", "MUTANT"), help="run TEST_FILE against each named mutant"
    )
    args = ap.parse_args(argv)
    if args.verify:
        if len(args.verify) < 2:
            ap.error("--verify needs a test file and at least one mutant name")
        return verify(args.verify[0], args.verify[1:])
    known = {m for m, _ in MODULES}
    unknown = [m for m in args.only if m not in known]
    if unknown:
        ap.error(f"unknown module(s) {unknown}; known: {sorted(known)}")
    selected = [(m, g) for m, g in MODULES if not args.only or m in args.only]
    if not args.report:
        # PYTHONPATH names mutants/: it must exist before Python starts, or the import system caches its absence
        (ROOT / "mutants").mkdir(exist_ok=True)
        for module, globs in selected:
            print(f"== mutmut run: {module}", flush=True)
            subprocess.run(
                [MUTMUT, "run", *globs], cwd=ROOT, env=_env(), check=False, stdout=subprocess.DEVNULL
            )
    return report(selected)


if __name__ == "__main__":
    sys.exit(main())
