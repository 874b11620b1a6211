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
"""

from __future__ import annotations

import argparse
import fnmatch
import os
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", default=[], help="module label (repeatable), e.g. rl/loss.py")
    ap.add_argument("--report", action="store_true", help="only print the table of the last runs")
    args = ap.parse_args(argv)
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
