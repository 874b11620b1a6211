"""The benchmarks as plug-ins: one ``Benchmark`` per benchmark, listed in ``registry``.

- ``base``: the ``Benchmark`` type (with its ``Metrics``, ``Published`` and ``Fixture`` parts), ``Sample``,
  ``Context`` and the helpers converters share;
- ``registry``: every benchmark, one line each; ``get``, ``to_samples``;
- ``demo``: the ``demo_data`` manifest (read by the eval stage, written by ``paravt synth --eval-fixtures``);
- ``fixture_files``: the bytes of fixture files in the datasets' formats;
- one module per benchmark: its converter (how one row of its published schema becomes a ``Sample``), its
  metrics beside the shared ones, its published numbers, caveat and comparability rules, its fixture rows.

Adding a benchmark: a module declaring its ``Benchmark``, its line in ``registry.BENCHMARKS``, and its test.
A row that lacks a field its benchmark needs becomes a sample with ``error`` set: it is recorded and counted
as an error, never run, never dropped.
"""

from .base import (
    LETTERS,
    VIDEO_EXTENSIONS,
    Benchmark,
    Breakdown,
    Context,
    Converter,
    Fixture,
    Metrics,
    Published,
    RowError,
    Sample,
)
from .demo import DEMO_MANIFEST, demo_entries, fixture_entries
from .registry import BENCHMARKS, REGISTRY, get, metrics_of, nightly, published_of, to_samples

__all__ = [
    "BENCHMARKS",
    "DEMO_MANIFEST",
    "LETTERS",
    "REGISTRY",
    "VIDEO_EXTENSIONS",
    "Benchmark",
    "Breakdown",
    "Context",
    "Converter",
    "Fixture",
    "Metrics",
    "Published",
    "RowError",
    "Sample",
    "demo_entries",
    "fixture_entries",
    "get",
    "metrics_of",
    "nightly",
    "published_of",
    "to_samples",
]
