"""A ``demo_data`` directory: fixture copies of the benchmarks plus a manifest, ``benchmarks.json``, holding the
``benchmarks`` config entries that evaluate them with paths relative to the directory. Each benchmark's
``Fixture`` says where its copy lives; ``paravt_core/synth/eval_fixtures.py`` writes the files, the eval stage
reads the manifest (so nothing here imports ``paravt_core.synth``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .base import Benchmark, Fixture
from .registry import REGISTRY

DEMO_MANIFEST = "benchmarks.json"


def demo_entries(root: str) -> list[dict[str, Any]]:
    """The ``benchmarks`` entries of the ``demo_data`` directory ``root`` (local), paths made absolute."""
    path = os.path.join(root, DEMO_MANIFEST)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"demo_data {root} holds no benchmark fixtures ({DEMO_MANIFEST}); write them with "
            f"`paravt synth {root} --eval-fixtures` (`paravt demo` does) or leave demo_data empty"
        )
    with open(path) as f:
        listed = json.load(f)
    base = os.path.abspath(root)
    return [{k: v if k == "name" else os.path.join(base, v) for k, v in e.items()} for e in listed]


def with_fixtures() -> list[tuple[Benchmark, Fixture]]:
    """The benchmarks that have a fixture copy: ``paravt synth``'s own dataset first, then the registry's order."""
    pairs = [(b, b.fixture) for b in REGISTRY.values() if b.fixture is not None]
    return sorted(pairs, key=lambda pair: not pair[1].synthesized)


def fixture_entry(bench: Benchmark, fixture: Fixture, root: str | os.PathLike[str]) -> dict[str, str]:
    """The ``benchmarks`` config entry of ``bench``'s copy under ``root`` (``"."``: relative paths)."""
    base = Path(root) / fixture.directory
    entry = {
        "name": bench.name,
        "source": str(base / fixture.source),
        "media_root": str(base / fixture.media_root),
    }
    if fixture.subtitles:
        entry["subtitles"] = str(base / fixture.subtitles)
    return entry


def fixture_entries(root: str | os.PathLike[str]) -> list[dict[str, str]]:
    """The ``benchmarks`` config entries of every fixture copy under ``root``."""
    return [fixture_entry(b, fx, root) for b, fx in with_fixtures()]
