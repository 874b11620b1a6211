"""Benchmarks as plug-ins: every hub (metrics, the report, ``--list-benchmarks``, the nightly default, the demo
fixtures) reads the registry, so a benchmark declared outside the library and put into ``REGISTRY`` shows up
in each of them; and what the registry holds for the shipped benchmarks (docs/method.md §7's published table, the
fixture layout), written out by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from paravt_core.cli_help import list_benchmarks
from paravt_core.eval import benchmarks as registry
from paravt_core.eval import report
from paravt_core.eval.benchmarks import Benchmark, Breakdown, Context, Fixture, Metrics, Published, Sample
from paravt_core.eval.benchmarks import fixture_files as files
from paravt_core.eval.benchmarks.base import media, need
from paravt_core.eval.metrics import benchmark_metrics
from paravt_core.eval.tally import grouped_accuracy


def _toy_row(row: dict[str, Any], ctx: Context) -> Sample:
    return Sample(benchmark="", id=str(need(row, "id")), video=media(ctx, need(row, "clip")),
                  question=str(need(row, "ask")), gold=str(need(row, "gold")), letters="AB",
                  meta={"colour": row.get("colour")})  # fmt: skip


def _toy_breakdown(records: list[dict[str, Any]], shared: Any, error_rule: str) -> Breakdown:
    reds = sum((r.get("meta") or {}).get("colour") == "red" for r in records)
    return Breakdown({"by_colour": grouped_accuracy(records, "colour"), "reds": reds}, (f"{reds} red rows",))


def _mirrored(results: Any, name: str) -> str:
    return "" if results.get("toy_mirror_ok") else f"{name}: the toy videos are mirrored"


TOY = Benchmark(
    "toy",
    "org/toy-videos",
    "test",
    _toy_row,
    ("id",),
    answers="which colour (A-B)",
    prepare=lambda rows: [r for r in rows if not r.get("skip")],
    metrics=Metrics(breakdown=_toy_breakdown, scalars=("reds",), grouped="by_colour", details=("by_colour",)),
    published=Published({"ParaVT-8B": 42.0}, caveat="toy caveat", rules=(_mirrored,)),
    fixture=Fixture(
        "toy",
        source="rows",
        files=lambda: {
            "rows/test.json": files.json_file([{"id": "t1", "clip": "v.mp4", "ask": "?", "gold": "A"}])
        },
        videos=(("v.mp4", "B"),),
    ),
)
SPAN = Benchmark(
    "toyspan", "", "", _toy_row, ("id",), nightly=False, title="Toy-STA", metrics=Metrics("miou")
)


@pytest.fixture
def toys(monkeypatch: pytest.MonkeyPatch) -> None:
    """The two toy benchmarks in the registry, as one line each in ``registry.BENCHMARKS`` would put them."""
    monkeypatch.setitem(registry.REGISTRY, "toy", TOY)
    monkeypatch.setitem(registry.REGISTRY, "toyspan", SPAN)


def _ok(score: float, colour: str) -> dict[str, Any]:
    return {"status": "ok", "score": score, "qtype": "mcq", "gold": "A", "meta": {"colour": colour}}


RECORDS = [_ok(1.0, "red"), _ok(0.0, "red"), _ok(1.0, "blue"), {"status": "error", "error": {"reason": "x"}}]


def test_a_registered_benchmark_is_listed_converted_and_in_the_nightly_default(toys) -> None:
    line = next(ln for ln in list_benchmarks().splitlines() if ln.startswith("toy "))
    assert line.split() == ["toy", "org/toy-videos", "test", "which", "colour", "(A-B)", "42.0"]
    assert registry.nightly()[-1] == "toy" and "toyspan" not in registry.nightly()
    rows = [{"id": "a", "clip": "c.mp4", "ask": "q?", "gold": "B"}, {"id": "b", "skip": True}, {"id": "c"}]
    kept, broken = registry.to_samples("toy", rows, Context("/media"))  # the prepare hook drops row b
    assert (kept.benchmark, kept.id, kept.video, kept.gold, kept.error) == (
        "toy",
        "a",
        "/media/c.mp4",
        "B",
        None,
    )
    assert (broken.id, broken.error) == ("c", "row_error: missing field 'clip'")


def test_a_registered_benchmarks_breakdown_reaches_its_metrics_and_the_kfp_metrics(toys) -> None:
    m = benchmark_metrics("toy", RECORDS)
    # 2 of 3 scored right; red 1 of 2, blue 1 of 1; 2 red rows (the error row has no colour)
    assert (m["accuracy"], m["by_colour"], m["reds"], m["notes"]) == (
        pytest.approx(200 / 3),
        {"blue": 100.0, "red": 50.0},
        2,
        ["2 red rows"],
    )
    flat = report.kfp_metrics({"protocols": {"agentic": {"toy": m}},
                               "totals": {"samples": 4, "scored": 3, "errors": 1, "error_share": 0.25}})  # fmt: skip
    assert flat["agentic.toy.reds"] == 2.0
    assert (flat["agentic.toy.accuracy_red"], flat["agentic.toy.accuracy_blue"]) == (50.0, 100.0)
    # a time-span benchmark: mIoU headline, the IoU keys, its own histogram named after its title
    span = [{"status": "ok", "score": 0.6}, {"status": "ok", "score": 0.2}]
    ms = benchmark_metrics("toyspan", span)
    assert (ms["headline"], ms["miou"], ms["r@0.5"], ms["miou_robust"]) == ("miou", 40.0, 50.0, 40.0)
    images = report.plots({"protocols": {"agentic": {"toyspan": ms}}}, {"agentic": {"toyspan": span}})
    assert "toyspan_iou" in images and images["toyspan_iou"][:4] == b"\x89PNG"


def test_a_registered_benchmarks_published_number_caveat_and_rule_reach_the_report(toys) -> None:
    m = benchmark_metrics("toy", RECORDS)
    results = {"preset": "paravt", "protocols": {"agentic": {"toy": m}}, "model": "x", "published_model": "ParaVT-8B",
               "totals": {"samples": 4, "scored": 3, "errors": 1, "error_share": 0.25}, "errors_by_reason": {},
               "gate": {"passed": True}}  # fmt: skip
    assert report.published_value("ParaVT-8B", "toy") == 42.0
    assert report.comparability(results, "toy").endswith("; toy: the toy videos are mirrored")
    assert "mirrored" not in report.comparability({**results, "toy_mirror_ok": True}, "toy")
    html = report.render_html(results, {})
    row = next(r for r in html.split("<tr>") if r.startswith("<th>toy "))
    assert "<th>toy <small>(acc.)</small></th>" in row and "<td>42.0</td>" in row
    assert "by_colour: {blue: 100.0, red: 50.0}; accuracy_errors_as_wrong: 50.0" in html
    assert "toy caveat" not in html  # the caveat stands beside a difference; not comparable: no difference


def test_a_registered_benchmarks_fixture_is_written_into_demo_data(toys, tmp_path: Path) -> None:
    from paravt_core.synth.eval_fixtures import write_fixtures

    entries = write_fixtures(tmp_path)
    toy = next(e for e in entries if e["name"] == "toy")
    assert toy == {"name": "toy", "source": str(tmp_path / "toy/rows"), "media_root": str(tmp_path / "toy")}
    assert json.loads((tmp_path / "toy/rows/test.json").read_text())[0]["id"] == "t1"
    assert (tmp_path / "toy/v.mp4").read_bytes() == (tmp_path / "videomme/data/fxSynthB002.mp4").read_bytes()
    manifest = json.loads((tmp_path / registry.DEMO_MANIFEST).read_text())
    assert {"name": "toy", "source": "toy/rows", "media_root": "toy"} in manifest
    assert "toyspan" not in {e["name"] for e in manifest}  # no fixture: not in demo_data


# ---------------------------------------------------------------------------------------------------------
# What the shipped registry holds


def test_published_numbers_are_spec_tables_rows() -> None:
    # docs/method.md §7's table of the with-tool protocol (accuracy %, Charades mIoU), one row per checkpoint
    table = {
        "Qwen3-VL-8B": [59.9, 68.4, 52.2, 33.1, 58.3, 68.0, 49.3],
        "LongVT-RFT-7B": [59.5, 66.0, 54.7, 37.9, 59.4, 63.4, 23.4],
        "ParaVT-8B": [62.1, 69.4, 60.4, 39.8, 65.0, 68.6, 50.1],
    }
    columns = ["videomme", "videomme_wsub", "longvideobench", "lvbench", "mlvu", "mmvu", "charades"]
    for model, row in table.items():
        assert [registry.REGISTRY[b].published.numbers[model] for b in columns] == row
    assert registry.nightly() == columns
    assert set(report.PUBLISHED_MODELS) == set(table)
    assert registry.REGISTRY["synthetic"].published.numbers == {}
    assert {b.name for b in registry.REGISTRY.values() if b.metrics.headline == "miou"} == {"charades"}


def test_fixture_entries_put_synths_own_dataset_first_with_paths_under_each_directory() -> None:
    assert registry.fixture_entries(".") == [
        {"name": "synthetic", "source": "synthetic/eval", "media_root": "synthetic/media"},
        {"name": "videomme", "source": "videomme/videomme", "media_root": "videomme"},
        {"name": "videomme_wsub", "source": "videomme/videomme", "media_root": "videomme",
         "subtitles": "videomme/subtitle"},
        {"name": "longvideobench", "source": "longvideobench", "media_root": "longvideobench"},
        {"name": "lvbench", "source": "lvbench", "media_root": "lvbench"},
        {"name": "mlvu", "source": "mlvu", "media_root": "mlvu"},
        {"name": "mmvu", "source": "mmvu", "media_root": "mmvu"},
        {"name": "charades", "source": "charades/data", "media_root": "charades"},
    ]  # fmt: skip


def test_fixture_file_formats() -> None:
    assert files.srt([(0.5, 2.9, "hi"), (3661.25, 3662.0, "yo")]) == (
        b'1\n00:00:00,500 --> 00:00:02,900\n<font color="white" size=".72c">hi</font>\n\n'
        b'2\n01:01:01,250 --> 01:01:02,000\n<font color="white" size=".72c">yo</font>\n'
    )
    assert files.jsonl([{"a": 1}, {"b": [2]}]) == b'{"a": 1}\n{"b": [2]}\n'
    schema = pa.schema([("t", pa.list_(pa.float16()))])
    table = pq.read_table(pa.BufferReader(files.parquet([{"t": [1.5, 3.0]}], schema)))
    assert table.schema.field("t").type == pa.list_(pa.float16())


def test_grouped_accuracy_lists_the_given_order_first_then_the_rest_sorted() -> None:
    recs = [_ok(1.0, "z"), _ok(0.0, "long"), _ok(1.0, "a"), _ok(1.0, "long"), {"status": "error", "meta": {}}]
    recs += [{"status": "ok", "score": 0.0, "meta": {}}]  # no colour: the group "None"
    out = grouped_accuracy(recs, "colour", ("short", "long"))
    assert list(out.items()) == [("long", 50.0), ("None", 0.0), ("a", 100.0), ("z", 100.0)]
