"""The report: published numbers beside ours for a published checkpoint, flat KFP metrics, the plots."""

from __future__ import annotations

import pytest

from paravt_core.eval import report
from paravt_core.eval.metrics import benchmark_metrics
from paravt_core.eval.report import comparability, plots

CHECKSUM = "sha256:" + "ab12" * 16


def _results(
    model: str | None, preset: str = "release", checksum: str = CHECKSUM, rule: str = "paravt"
) -> dict:
    ok = {"status": "ok", "meta": {"duration": "short"}, "tool_calls": 2}
    records = {
        "agentic": {
            "videomme": [
                {**ok, "score": 1.0},
                {**ok, "score": 1.0},
                {**ok, "score": 0.0},
                {**ok, "score": 1.0},
            ],
            "charades": [
                {**ok, "score": 0.4},
                {"status": "error", "score": None, "error": {"reason": "video_error"}},
            ],
        },
        "direct": {
            "videomme": [{**ok, "score": 0.0, "tool_calls": 0}, {**ok, "score": 1.0, "tool_calls": 0}]
        },
    }
    protocols = {
        p: {b: benchmark_metrics(b, recs, rule) for b, recs in benches.items()}
        for p, benches in records.items()
    }
    for p, benches in protocols.items():
        for m in benches.values():
            m["provenance"] = {
                "preset": preset,
                "protocol": p,
                "prompt_set": "paravt-v1",
                "prompt_checksum": checksum,
            }
    results = {
        "model": "ParaVT/ParaVT-8B",
        "published_model": model,
        "reader": "release" if rule == "release" else "robust",
        "config": {"engine": {"kind": "openai"}, "agent": {"frame_path": "qwen-vl-utils"}},
        "preset": preset,
        "prompt_protocol": "paravt-v1",
        "prompt_checksum": checksum,
        "error_rule": rule,
        "protocols": protocols,
        "totals": {"samples": 8, "scored": 7, "errors": 1, "error_share": 1 / 8},
        "errors_by_reason": {"video_error": 1},
        "gate": {"max_error_share": 0.05, "passed": False, "failing": {"agentic.charades": 0.5}},
    }
    return results, records


def test_published_model_detection():
    assert report.published_model("auto", "ParaVT/ParaVT-8B") == "ParaVT-8B"
    assert report.published_model("auto", "s3://ckpt/qwen3-vl-8b-instruct") == "Qwen3-VL-8B"
    assert report.published_model("auto", "build/tiny-model") is None
    assert report.published_model("", "ParaVT/ParaVT-8B") is None
    with pytest.raises(ValueError, match="known: Qwen3-VL-8B, LongVT-RFT-7B, ParaVT-8B"):
        report.published_model("GPT-5", "x")


def test_html_shows_published_numbers_and_differences():
    results, records = _results("ParaVT-8B", checksum=report.release_checksum(), rule="release")
    html = report.render_html(results, report.plots(results, records))
    # agentic videomme: 3 of 4 = 75.0; docs/method.md §7 ParaVT-8B VMME 62.1 -> +12.9, comparable (preset, prompts, rule)
    assert "<b>75.0</b>" in html and "<td>62.1</td>" in html and "+12.9" in html
    assert html.count(report.COMPARABLE) == 1  # videomme only
    # charades mIoU: 0.4 over the 1 scored sample = 40.0 (a video_error stays out under the release's rule
    # too); published 50.1 but no difference: the release's input was video_url
    assert "<b>40.0</b>" in html and "-10.1" not in html and "1 scored · 1 errors" in html
    assert "not comparable: the release feeds Charades as video_url" in html
    assert "exceeds max_error_share 5.0% in agentic.charades 50.0%" in html
    assert html.count("data:image/png;base64,") == 3


def test_every_number_names_preset_protocol_and_prompt_checksum_and_paravt_is_not_compared():
    """Our protocol's numbers are not set against the release's published ones; each headline
    cell says which preset / protocol and prompt set (checksum) produced it."""
    results, records = _results("ParaVT-8B", preset="paravt")
    html = report.render_html(results, {})
    table = html.split("<h2>Headline")[1].split("</table>")[0]
    assert "+12.9" not in table and "not comparable: preset=paravt, not release" in table
    # 3 cells (agentic videomme, agentic charades, direct videomme), each with its provenance
    assert table.count("paravt-v1 sha256:ab12ab12ab12") == 3
    assert "paravt/agentic" in table and "paravt/direct" in table
    assert CHECKSUM in html  # in full in the header


def test_no_published_columns_for_an_unpublished_model():
    results, records = _results(None)
    html = report.render_html(results, {})
    assert "published" not in html.split("<h2>Headline")[1].split("</table>")[0]


def test_kfp_metrics_are_flat_floats():
    results, _ = _results(None)
    metrics = report.kfp_metrics(results)
    assert metrics["agentic.videomme.accuracy"] == 75.0
    assert metrics["agentic.videomme.accuracy_short"] == 75.0
    assert metrics["direct.videomme.accuracy"] == 50.0
    assert metrics["agentic.charades.miou"] == pytest.approx(40.0)
    assert metrics["agentic.charades.r_at_0.3"] == 100.0 and metrics["agentic.charades.r_at_0.5"] == 0.0
    assert metrics["total.error_share"] == 0.125
    assert all(isinstance(v, float) for v in metrics.values())


def test_an_all_zero_accuracy_chart_is_left_out_and_the_page_says_why():
    """The tiny model's 0 % everywhere draws a chart with no bar: it is left out, with one line saying why;
    one non-zero headline brings it back."""
    results, records = _results(None)
    for per in records.values():
        for recs in per.values():
            for r in recs:
                r["score"] = 0.0 if r["status"] == "ok" else None
    results["protocols"] = {
        p: {b: benchmark_metrics(b, recs, "paravt") for b, recs in benches.items()}
        for p, benches in records.items()
    }
    images = report.plots(results, records)
    assert "accuracy" not in images and "tool_calls" in images
    page = report.render_html(results, images)
    assert "The accuracy chart is left out: every headline above is 0 (or missing)" in page

    records["direct"]["videomme"][0]["score"] = 1.0  # direct videomme: 1 of 2 = 50.0
    results["protocols"]["direct"]["videomme"] = benchmark_metrics(
        "videomme", records["direct"]["videomme"], "paravt"
    )
    images = report.plots(results, records)
    assert "accuracy" in images and "left out" not in report.render_html(results, images)


PRESET = "preset=paravt, not release (the published numbers come from the release's driver)"


RULE = "error_rule=paravt: errors left out of the denominator (the release scores them wrong)"


READER = "reader=robust: answers read by ours, not the release's extract_letter"


ENGINE = "engine.kind=transformers, not a server (the release queries a vLLM server)"


SUFFIX = "agent.question_suffix=false (the release appends the video path to every agentic question)"


DEMO = "rows from demo_data fixtures, not the benchmark"


MMVU_F1 = "MMVU open-ended items scored by token F1, not the judge or the release's reader"


CHARADES = "the release feeds Charades as video_url (vLLM decodes the whole video server-side); ours sends 64 labelled frames"  # fmt: skip


ALIGNED = "subtitles aligned to the sampled frames (lmms-eval's), not every cue as the release gave them"


def _release(**over):
    """Results the release's in everything comparability checks (no config: the config checks are skipped)."""
    return {"preset": "release", "error_rule": "release", "reader": "release",
            "prompt_checksum": report.release_checksum(), "protocols": {}, **over}  # fmt: skip


def test_comparability_defaults_of_an_old_results_file_name_ours_in_order():
    # a results.json written before these keys existed: preset paravt, no checksum (prompts None, digest ""),
    # error rule paravt, reader robust; joined by "; " after one "not comparable: "
    assert comparability({"protocols": {}}, "videomme") == (
        f"not comparable: {PRESET}; prompts None () are not the release's release-v1; {RULE}; {READER}"
    )


def test_comparability_charades_subtitles_and_mmvu_lines_are_whole():
    assert comparability(_release(), "videomme") == ""
    assert comparability(_release(), "charades") == f"not comparable: {CHARADES}"
    aligned = _release(protocols={"agentic": {"videomme_wsub": {"subtitles": "aligned"}}})
    assert comparability(aligned, "videomme_wsub") == f"not comparable: {ALIGNED}"
    f1 = {"oe_scored_by": ["f1"], "oe_comparable": False}
    # named once even when two protocols scored MMVU's open-ended items by token F1
    two = _release(protocols={"direct": {"mmvu": f1}, "agentic": {"mmvu": dict(f1)}})
    assert comparability(two, "mmvu") == f"not comparable: {MMVU_F1}"
    # the judge (comparable) or no open-ended item scored: nothing to name; the MMVU rule is MMVU's only
    assert (
        comparability(_release(protocols={"agentic": {"mmvu": {**f1, "oe_comparable": True}}}), "mmvu") == ""
    )
    assert comparability(_release(protocols={"agentic": {"mmvu": {"oe_comparable": False}}}), "mmvu") == ""
    assert comparability(_release(protocols={"agentic": {"videomme": f1}}), "videomme") == ""


def test_config_differences_lines_are_whole_and_read_only_this_benchmarks_rows():
    config = {
        # no engine section: transformers, the default engine
        "benchmarks": [{"name": "mlvu"}, {"name": "videomme", "limit": 5, "split": "dev"}],
        "demo_data": "/fixtures",
        "agent": {"question_suffix": False, "frame_path": "qwen-vl-utils"},
    }
    rows = "rows overridden (limit=5, split=dev): the release runs the registry's whole split"
    assert report._config_differences(config, "videomme", "ParaVT-8B") == [ENGINE, rows, DEMO, SUFFIX]
    assert (
        comparability(_release(config=config), "videomme")
        == f"not comparable: {ENGINE}; {rows}; {DEMO}; {SUFFIX}"
    )
    # the other benchmark's overrides are not this one's (and mlvu's entry, first, has none)
    other = {**config, "benchmarks": [{"name": "mlvu", "limit": 3}, {"name": "videomme"}]}
    assert report._config_differences(other, "videomme", None) == [ENGINE, DEMO, SUFFIX]


@pytest.mark.parametrize("engine", [{}, {"kind": None}, None])
def test_config_differences_without_an_engine_kind_name_transformers(engine):
    config = {"engine": engine, "agent": {"frame_path": "qwen-vl-utils"}}
    expected = (
        [ENGINE]
        if engine != {"kind": None}
        else ["engine.kind=None, not a server (the release queries a vLLM server)"]
    )
    assert report._config_differences(config, "videomme", None) == expected


def test_no_charades_plot_when_charades_was_not_evaluated() -> None:
    results = {"protocols": {"agentic": {"videomme": {"headline": "accuracy", "accuracy": 0.5}}}}
    records = {"agentic": {"videomme": [{"status": "ok", "score": 1.0, "tool_calls": 1}]}}
    assert "charades_iou" not in plots(results, records)
    records["agentic"]["charades"] = [{"status": "ok", "score": 0.4, "tool_calls": 0}]
    results["protocols"]["agentic"]["charades"] = {"headline": "miou", "miou": 0.4}
    assert "charades_iou" in plots(results, records)
