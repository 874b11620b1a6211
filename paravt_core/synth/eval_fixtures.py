"""Fixture copies of every benchmark: each benchmark's own fixture files (a few hand-written rows in its real
schema and file layout, ``Benchmark.fixture``), and the synthetic videos whose events make the gold answers true.

``write_fixtures(root)`` writes, under ``root``, for every registry benchmark with a ``Fixture``: its files
under its directory (e.g. ``mmvu/validation.json``), its videos (one of the two schedules ``VIDEO_A``,
``VIDEO_B`` each), and for ``paravt synth``'s own benchmark (``synthesized``) the synth output (4 videos x 8 s)
with its media extracted to ``<directory>/media``; then ``benchmarks.json`` (the eval stage's ``DEMO_MANIFEST``:
the ``benchmarks`` config entries that evaluate them, paths relative to ``root``), and returns those entries
with absolute paths. The eval stage's ``demo_data`` reads only that manifest: production code never imports
``paravt_core.synth``, so the fixtures are written by whoever runs the tiny eval (``paravt synth DIR
--eval-fixtures``, ``paravt demo``, the tests). Every video is 8 s at 8 fps: 64 frames, the count the release's
overview samples (``preset=release``), at 128 x 96 (the synthetic benchmark's at 160 x 128).
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

from paravt_core.eval.benchmarks import DEMO_MANIFEST, fixture_entries
from paravt_core.eval.benchmarks.demo import with_fixtures
from paravt_core.eval.benchmarks.fixture_files import FPS, SECONDS, SIZE
from paravt_core.synth.dataset import synthesize
from paravt_core.synth.scenes import Event, write_video

# A: red circle [1, 3) s, then blue square [4.5, 6.5) s.  B: green triangle [0.5, 2.5) s, yellow circle [5, 7) s.
VIDEO_A = (
    Event("circle", "red", 1.0, 3.0, (10, 10, 60, 60)),
    Event("square", "blue", 4.5, 6.5, (50, 20, 110, 80)),
)
VIDEO_B = (
    Event("triangle", "green", 0.5, 2.5, (20, 10, 80, 70)),
    Event("circle", "yellow", 5.0, 7.0, (40, 20, 100, 80)),
)
# The schedules a benchmark's ``Fixture.videos`` name.
SCHEDULES: dict[str, tuple[Event, ...]] = {"A": VIDEO_A, "B": VIDEO_B}
MARKER = "_FIXTURES_COMPLETE"


def entries(root: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """``benchmarks`` config entries for the fixtures under ``root`` (every registry benchmark with a fixture);
    with ``root="."`` the paths are relative (as the manifest stores them)."""
    return fixture_entries(root)


def _write_files(root: Path) -> None:
    for _, fixture in with_fixtures():
        for rel, content in (fixture.files() if fixture.files else {}).items():
            path = root / fixture.directory / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)


def _write_videos(root: Path) -> None:
    written: dict[tuple[str, ...], Path] = {}
    for _, fixture in with_fixtures():
        for rel, schedule in fixture.videos:
            events = SCHEDULES[schedule]
            path = root / fixture.directory / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            key = tuple(e.label for e in events)
            if key in written:  # same schedule: copy the bytes instead of encoding again
                path.write_bytes(written[key].read_bytes())
            else:
                write_video(path, list(events), SECONDS, FPS, SIZE)
                written[key] = path


def _synthesize(root: Path) -> None:
    """``paravt synth``'s own dataset for each benchmark that is it, its media extracted to ``<dir>/media``."""
    for _, fixture in with_fixtures():
        if not fixture.synthesized:
            continue
        result = synthesize(str(root / fixture.directory), videos=4, seconds=SECONDS, seed=0, fps=FPS)
        for archive in result.archives:  # archives we wrote ourselves: plain extraction
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(root / fixture.directory / fixture.media_root)


def write_fixtures(root: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Write (once) every fixture benchmark under ``root``; returns their config entries."""
    r = Path(root).resolve()
    if not (r / MARKER).exists():
        r.mkdir(parents=True, exist_ok=True)
        _write_files(r)
        _write_videos(r)
        _synthesize(r)
        (r / DEMO_MANIFEST).write_text(json.dumps(entries("."), indent=1) + "\n")  # relative paths
        (r / MARKER).write_text("ok\n")
    return entries(r)
