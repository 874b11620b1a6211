"""The package layering rules of the team's design, checked on the source (lazy imports inside functions count):
production code never imports ``paravt_core.synth`` (only the ``paravt synth`` verb of the CLI front-end, which
is the synthetic-data tool itself), and no ``paravt_core`` module reaches ``kfp``, ``pipelines`` or ``components``
through the import graph (directly or through other first-party modules); the CLI works without them."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import deque
from pathlib import Path

from tests.support.paths import ROOT

PACKAGE = ROOT / "paravt_core"
FIRST_PARTY = ("paravt_core", "pipelines", "components", "paravt_bench")
# What paravt_core sits below: the Kubeflow SDK and the packages that build pipelines and components on it.
ABOVE_CORE = ("kfp", "kfp_server_api", "pipelines", "components")
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


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(name: str, root: Path) -> list[str]:
    """The first-party modules importing ``name`` runs: the longest prefix that is a file, and its packages
    (``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first); a third-party name stays as it is."""
    parts = name.split(".")
    if parts[0] not in FIRST_PARTY:
        return [name]
    found = []
    for end in range(1, len(parts) + 1):
        base = root.joinpath(*parts[:end])
        if (base / "__init__.py").is_file() or base.with_suffix(".py").is_file():
            found.append(".".join(parts[:end]))
    return found or [name]


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the modules its source imports (anywhere in the file), for every first-party module under root."""
    graph: dict[str, set[str]] = {}
    for top in FIRST_PARTY:
        for path in sorted((root / top).rglob("*.py")):
            module = _module_name(path, root)
            graph[module] = {
                m for n in _imports(path, root / path.relative_to(root).parts[0]) for m in _resolve(n, root)
            }
            graph[module].discard(module)
    return graph


def path_to(graph: dict[str, set[str]], start: str, forbidden: tuple[str, ...]) -> list[str] | None:
    """The shortest import chain from ``start`` to a module in one of the ``forbidden`` packages, or None."""
    came_from: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        module = queue.popleft()
        if module != start and any(_is(module, f) for f in forbidden):
            chain = [module]
            while came_from[chain[-1]] is not None:
                chain.append(came_from[chain[-1]])
            return chain[::-1]
        for nxt in sorted(graph.get(module, ())):
            if nxt not in came_from:
                came_from[nxt] = module
                queue.append(nxt)
    return None


def test_no_kfp_inside_paravt_core() -> None:
    graph = import_graph(PACKAGE.parent)
    core = [m for m in graph if _is(m, "paravt_core")]
    assert len(core) > 50  # the walk found the package
    chains = {m: path_to(graph, m, ABOVE_CORE) for m in core}
    assert {m: " -> ".join(c) for m, c in chains.items() if c} == {}


def test_production_code_never_reaches_the_bench_support() -> None:
    # paravt_bench is what benchmarks, scripts and tests share; the images do not hold it.
    graph = import_graph(PACKAGE.parent)
    production = [m for m in graph if m.partition(".")[0] in ("paravt_core", "pipelines", "components")]
    chains = {m: path_to(graph, m, ("paravt_bench",)) for m in production}
    assert {m: " -> ".join(c) for m, c in chains.items() if c} == {}


def test_benchmarks_and_scripts_share_code_through_a_package_not_each_other() -> None:
    # What both need lives in paravt_bench; a runnable file of one folder is never a library of the other.
    root = PACKAGE.parent
    crossing = {
        str(path.relative_to(root)): [n for n in _imports(path, root / folder) if _is(n, other)]
        for folder, other in (("benchmarks", "scripts"), ("scripts", "benchmarks"))
        for path in sorted((root / folder).glob("*.py"))
    }
    assert {k: v for k, v in crossing.items() if v} == {}


def test_the_graph_check_follows_imports_through_the_core(tmp_path: Path) -> None:
    # A lazy import two modules away is found, with the chain that leads to it.
    (tmp_path / "paravt_core" / "eval").mkdir(parents=True)
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "paravt_core" / "__init__.py").write_text("")
    (tmp_path / "paravt_core" / "eval" / "__init__.py").write_text("")
    (tmp_path / "paravt_core" / "cli.py").write_text("def f():\n    from .eval import hub\n")
    (tmp_path / "paravt_core" / "eval" / "hub.py").write_text("def g():\n    import pipelines.compile\n")
    (tmp_path / "paravt_core" / "clean.py").write_text("import kfpx\nfrom paravt_core import eval\n")
    (tmp_path / "pipelines" / "__init__.py").write_text("")
    (tmp_path / "pipelines" / "compile.py").write_text("import kfp\n")
    graph = import_graph(tmp_path)
    assert path_to(graph, "paravt_core.cli", ABOVE_CORE) == [
        "paravt_core.cli",
        "paravt_core.eval.hub",
        "pipelines",
    ]
    assert path_to(graph, "paravt_core.clean", ABOVE_CORE) is None
    assert path_to(graph, "pipelines.compile", ("kfp",)) == ["pipelines.compile", "kfp"]


# Python run in a child: the pipelines package and kfp cannot be imported there, as in an install of the core.
_WITHOUT_PIPELINES = """
import importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("pipelines", "kfp", "kfp_server_api"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Refuse())
from paravt_core.cli import main
"""


def _core_cli(call: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT_PIPELINES + call],
        cwd=PACKAGE.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_cli_works_without_the_pipelines_package() -> None:
    done = _core_cli("sys.exit(main(['--help']))")
    assert done.returncode == 0, done.stderr
    verbs = done.stdout.split("{", 1)[1].split("}", 1)[0].split(",")
    assert verbs == ["data", "sft", "rl", "report", "eval", "config", "synth", "plan", "tiny-model", "agent"]
    done = _core_cli("sys.exit(main(['pipeline', 'status', 'r1']))")
    assert done.returncode == 2
    assert "paravt: error: argument command: invalid choice: 'pipeline'" in done.stderr


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
