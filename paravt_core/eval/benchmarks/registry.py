"""The registry: every benchmark, one line each, in the order ``--list-benchmarks``, the report's rows, the
nightly pipeline and the demo fixtures follow. A new benchmark is a module of its own (a ``Benchmark`` and
its converter) and its line here."""

from __future__ import annotations

from . import charades, longvideobench, lvbench, mlvu, mmvu, synthetic, videomme
from .base import Benchmark, Context, Metrics, Published, RowError, Sample

BENCHMARKS: tuple[Benchmark, ...] = (
    videomme.VIDEOMME,
    videomme.VIDEOMME_WSUB,
    longvideobench.LONGVIDEOBENCH,
    lvbench.LVBENCH,
    mlvu.MLVU,
    mmvu.MMVU,
    charades.CHARADES,
    synthetic.SYNTHETIC,
)
# What every hub iterates (metrics, report, --help, nightly, fixtures): name -> benchmark, in that order.
REGISTRY: dict[str, Benchmark] = {b.name: b for b in BENCHMARKS}


def get(name: str) -> Benchmark:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown benchmark {name!r}; known: {', '.join(REGISTRY)}") from None


def metrics_of(name: str) -> Metrics:
    """The metrics of benchmark ``name``; a name outside the registry gets the plain accuracy."""
    return REGISTRY[name].metrics if name in REGISTRY else Metrics()


def published_of(name: str) -> Published:
    """The published numbers of benchmark ``name`` (none for a name outside the registry)."""
    return REGISTRY[name].published if name in REGISTRY else Published()


def nightly() -> list[str]:
    """The nightly pipeline's default benchmarks."""
    return [b.name for b in REGISTRY.values() if b.nightly]


def to_samples(name: str, rows: list[dict], ctx: Context) -> list[Sample]:
    """Samples of ``rows``; a row the benchmark cannot use becomes a sample with ``error`` set. Ids are
    made unique (a repeated id gets ``#2``, ``#3``…) so exactly-once accounting is per row."""
    bench = get(name)
    if bench.prepare is not None:
        rows = bench.prepare(rows)
    samples: list[Sample] = []
    seen: dict[str, int] = {}
    for index, row in enumerate(rows):
        try:
            sample = bench.convert(row, ctx)
        except (RowError, KeyError, TypeError, ValueError, AttributeError) as err:
            key = next((str(row[k]) for k in bench.id_keys if row.get(k) not in (None, "")), f"row-{index}")
            sample = Sample(benchmark=name, id=key, error=f"row_error: {err}")
        sample.benchmark = name
        count = seen.get(sample.id, 0) + 1
        seen[sample.id] = count
        if count > 1:
            sample.id = f"{sample.id}#{count}"
        samples.append(sample)
    return samples
