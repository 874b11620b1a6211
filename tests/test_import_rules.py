"""The package layering rules of the team's design, checked on the source (lazy imports inside functions count):
production code never imports ``paravt_core.synth`` (only the ``paravt synth`` verb of the CLI front-end, which
is the synthetic-data tool itself), and nothing in ``paravt_core`` imports ``kfp``."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "paravt_core"
# The CLI's `paravt synth` verb is the tool that writes synthetic data (and eval fixtures) for users.
SYNTH_ALLOWED = {PACKAGE / "cli.py"}


def _imports(path: Path, package: Path = PACKAGE) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the module's package
                base = path.relative_to(package.parent).with_suffix("").parts[: -node.level]
                module = ".".join(base + ((node.module,) if node.module else ()))
            else:
                module = node.module or ""
            names += [module] + [f"{module}.{a.name}" for a in node.names]
    return names


def _sources() -> list[Path]:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 50  # the walk found the package
    return files


def _is(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_production_code_never_imports_synth() -> None:
    offenders = {
        str(p.relative_to(PACKAGE.parent)): [n for n in _imports(p) if _is(n, "paravt_core.synth")]
        for p in _sources()
        if PACKAGE / "synth" not in p.parents and p not in SYNTH_ALLOWED
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_no_kfp_inside_paravt_core() -> None:
    offenders = {
        str(p.relative_to(PACKAGE.parent)): [n for n in _imports(p) if _is(n, "kfp")] for p in _sources()
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_check_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    # A checker that cannot fail proves nothing: the forms used before this fix are found.
    package = tmp_path / "paravt_core"
    fake = package / "eval" / "probe.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("def f():\n    from paravt_core.synth import Event\n    from ..synth import scenes\n")
    found = _imports(fake, package)
    assert [n for n in found if _is(n, "paravt_core.synth")] == [
        "paravt_core.synth",
        "paravt_core.synth.Event",
        "paravt_core.synth",
        "paravt_core.synth.scenes",
    ]
