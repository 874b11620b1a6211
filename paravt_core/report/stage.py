"""``paravt report``: the eval table of a run and the nightly trend, as HTML, Markdown, PNG and metrics.

Outputs under ``cfg.output``::

    report.html      self-contained page: eval table (with a link to each eval output's own report.html), the
                     SFT and RL numbers (one line of meaning each) and plots, one RL trajectory (the sampled
                     episode with the most tool calls in one turn), trend plot, table of nights with deltas;
                     a chain that descends from ``paravt tiny-model`` says that 0 % is its expected score
    report.md        the same in Markdown (the KFP UI renders it)
    trend.png        the trend plot (when there is a trend)
    metrics.json     flat numbers: this run's headline values, the latest night's values and deltas
    config.yaml, _COMPLETE

Nightly bookkeeping in the results prefix (``TrendConfig``): ``nights/<date>.json`` per night, written
RUNNING when the night starts (``start_night``) and with its final state by this stage.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from paravt_core import storage
from paravt_core.config import ReportConfig, TrendConfig
from paravt_core.report import render, trajectory
from paravt_core.report.trend import (
    FAILED,
    RUNNING,
    SUCCEEDED,
    BenchmarkResult,
    Night,
    eval_scores,
    latest_deltas,
    night_state,
    trend_table,
)
from paravt_core.stage import StageResult, StageRun, console
from paravt_core.user_errors import ParavtUserError

STAGE = "report"
NIGHTS_DIR = "nights"


def today_utc() -> str:
    return datetime.now(UTC).date().isoformat()


def night_uri(results_prefix: str, night: str) -> str:
    return storage.join(results_prefix, NIGHTS_DIR, f"{night}.json")


def benchmark_output(results_prefix: str, night: str, benchmark: str) -> str:
    """Where the nightly eval of ``benchmark`` writes (the eval stage's ``output``)."""
    return storage.join(results_prefix, night, benchmark)


def start_night(results_prefix: str, night: str, checkpoint: str, run_id: str = "") -> str:
    """Mark the night (``night``, or today UTC) RUNNING, so a run that dies before its final step still
    shows, as failed. Returns the night's date."""
    date = night or today_utc()
    summary = Night(date, RUNNING, checkpoint, run_id=run_id)
    storage.write_bytes(night_uri(results_prefix, date), json.dumps(summary.to_json(), indent=2).encode())
    return date


def find_night(results_prefix: str, run_id: str, recent: int = 3) -> str | None:
    """The date of the night run ``run_id`` started (among the most recent summaries): the final step
    of a run that crossed midnight still finishes the night it started."""
    if not run_id:
        return None
    for night in reversed(load_nights(results_prefix, recent)):
        if night.run_id == run_id:
            return night.date
    return None


def collect_benchmark(results_prefix: str, night: str, benchmark: str) -> BenchmarkResult:
    """A benchmark's result this night: its headline scores if its eval output is complete."""
    out = benchmark_output(results_prefix, night, benchmark)
    if not storage.is_complete(out):
        return BenchmarkResult(FAILED, error=f"no complete eval output at {out}")
    results = json.loads(storage.read_bytes(storage.join(out, "results.json")))
    scores = eval_scores(results, benchmark)
    if not scores:
        return BenchmarkResult(FAILED, error=f"{out}/results.json has no {benchmark} metrics")
    return BenchmarkResult(SUCCEEDED, scores)


def finish_night(trend: TrendConfig, night: str) -> Night:
    benches = {b: collect_benchmark(trend.results_prefix, night, b) for b in trend.benchmarks}
    state = night_state(trend.state, benches)
    result = Night(night, state, trend.checkpoint, benches, trend.error, trend.run_id)
    storage.write_bytes(
        night_uri(trend.results_prefix, night), json.dumps(result.to_json(), indent=2).encode()
    )
    return result


def load_nights(results_prefix: str, limit: int) -> list[Night]:
    """The ``limit`` most recent night summaries under the prefix (a summary that cannot be read is a
    failed night, not a missing one)."""
    uris = storage.list_uris(storage.join(results_prefix, NIGHTS_DIR), suffix=".json")[-limit:]
    nights = []
    for uri in uris:
        date = uri.rsplit("/", 1)[-1].removesuffix(".json")
        try:
            nights.append(Night.from_json(json.loads(storage.read_bytes(uri))))
        except (ValueError, KeyError, TypeError) as err:
            nights.append(Night(date, FAILED, error=f"unreadable night summary: {err}"))
    return nights


def _nightly_tensorboard(results_prefix: str) -> str:
    """Every night's headline values as one TensorBoard point per night (paravt_core/tracking/nightly.py)."""
    from paravt_core.tracking.nightly import write_nightly

    points = [
        (night.date, f"nightly/{bench}/{protocol}", value)
        for night in load_nights(results_prefix, 1_000_000)
        for bench, result in night.benchmarks.items()
        if result.state == SUCCEEDED
        for protocol, value in result.scores.items()
    ]
    return write_nightly(results_prefix, points)


def eval_table(eval_outputs: list[str]) -> list[dict]:
    """One row per benchmark and protocol over the given eval stage outputs."""
    rows = []
    for out in eval_outputs:
        results = json.loads(storage.read_bytes(storage.join(out, "results.json")))
        benches = sorted({b for per in results.get("protocols", {}).values() for b in per})
        for bench in benches:
            for protocol, value in sorted(eval_scores(results, bench).items()):
                rows.append({"benchmark": bench, "protocol": protocol, "value": value, "output": out})
    return rows


class ReportError(ParavtUserError, RuntimeError):
    """An input of the report is missing or incomplete; the message is complete for the user."""


def check_inputs(cfg: ReportConfig) -> None:
    """Every input the report reads is there, before it writes anything."""
    for out in cfg.eval_outputs:
        if not storage.exists(storage.join(out, "results.json")):
            raise ReportError(
                f"eval_outputs: {out} holds no results.json (not a `paravt eval` output); "
                "run the eval stage first or fix the path"
            )
    for field, out in (("sft_output", cfg.sft_output), ("rl_output", cfg.rl_output)):
        if out and not storage.exists(storage.join(out, "metrics.json")):
            raise ReportError(f"{field}: {out} holds no metrics.json (not a finished stage output)")


# How a section is headed, by the stage that wrote the folder (its _COMPLETE marker says which).
SECTION_NAMES = {"data": "Data", "sft": "SFT", "rl": "RL"}


def section_name(default: str, output: str) -> str:
    """The heading of a training section: the stage that wrote ``output`` (a data folder given as
    ``sft_output`` is shown as data, not as SFT); ``default`` when the marker does not say."""
    stage = ((storage.completion_info(output) or {}).get("info") or {}).get("stage")
    return SECTION_NAMES.get(str(stage), default)


def training_section(name: str, output: str) -> dict:
    """A training stage's summary numbers (its ``metrics.json``) and its plots (``*.png`` at the top of
    its output), as the stage wrote them."""
    summary = json.loads(storage.read_bytes(storage.join(output, "metrics.json")))
    numbers = {k: v for k, v in summary.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    plots = {
        uri.rsplit("/", 1)[-1]: storage.read_bytes(uri)
        for uri in storage.list_uris(output, suffix=".png")
        if uri.rsplit("/", 1)[0].rstrip("/") == output.rstrip("/")
    }
    return {"name": name, "output": output, "metrics": numbers, "plots": plots}


def _model_of(output: str) -> str:
    """The model a stage output was trained or evaluated from, as its ``config.yaml`` names it."""
    import yaml

    uri = storage.join(output, "config.yaml")
    if not storage.exists(uri):
        return ""
    model = (yaml.safe_load(storage.read_bytes(uri)) or {}).get("model") or ""
    return str(model.get("uri", "") if isinstance(model, dict) else model)


def tiny_base_model(outputs: list[str], hops: int = 4) -> str:
    """The ``paravt tiny-model`` folder the given stage outputs descend from (following each output's model
    back through ``<stage output>/final`` checkpoints), or "" when they come from another model."""
    from paravt_core.models import TINY_MARKER

    for output in outputs:
        model = _model_of(output)
        for _ in range(hops):
            if not model:
                break
            if storage.exists(storage.join(model, TINY_MARKER)):
                return model
            parent, _, leaf = model.rstrip("/").rpartition("/")
            model = _model_of(parent) if leaf == "final" and parent else ""
    return ""


TINY_NOTE = (
    "The model descends from the tiny, randomly initialised Qwen3-VL of `paravt tiny-model` ({model}), tuned "
    "for a few dozen steps on synthetic videos: 0 % (or chance) is the expected score. This report shows every "
    "stage running end to end, not a model that has learned the task."
)


def eval_report_links(report_output: str, eval_outputs: list[str]) -> list[tuple[str, str]]:
    """(benchmarks, location) of each eval output's own ``report.html`` (per benchmark, with its plots and
    breakdowns): a path relative to the report for local outputs, the URI on object storage."""
    import os

    links = []
    for out in eval_outputs:
        uri = storage.join(out, "report.html")
        if not storage.exists(uri):
            continue
        results = json.loads(storage.read_bytes(storage.join(out, "results.json")))
        benches = ", ".join(sorted({b for per in results.get("protocols", {}).values() for b in per}))
        where = uri if storage.is_s3(uri) else os.path.relpath(uri, os.path.abspath(report_output))
        links.append((benches or out, where))
    return links


def run(cfg: ReportConfig) -> StageResult:
    life = StageRun.open(STAGE, cfg.output)  # never reused: the nights and inputs it reads move on
    check_inputs(cfg)
    life.begin(cfg)
    table = eval_table(cfg.eval_outputs)
    metrics: dict[str, float] = {f"{r['benchmark']}.{r['protocol']}": r["value"] for r in table}
    outputs = {
        "html": storage.join(cfg.output, "report.html"),
        "markdown": storage.join(cfg.output, "report.md"),
    }
    markdown = [f"# {cfg.title}\n"]
    tiny = tiny_base_model([o for o in (cfg.sft_output, cfg.rl_output, *cfg.eval_outputs) if o])
    note = TINY_NOTE.format(model=tiny) if tiny else ""
    if note:
        markdown.append(note + "\n")
    links = eval_report_links(cfg.output, cfg.eval_outputs)
    if table:
        markdown.append(render.eval_markdown(table))
    markdown.extend(f"Per-benchmark eval report ({name}): [{where}]({where})\n" for name, where in links)
    sections = (("SFT", cfg.sft_output), ("RL", cfg.rl_output))
    training = [training_section(section_name(n, o), o) for n, o in sections if o]
    for section in training:
        markdown.append(render.training_markdown(section))
        metrics.update({f"{section['name'].lower()}.{k}": float(v) for k, v in section["metrics"].items()})
    shown = trajectory.pick(trajectory.load_samples(cfg.rl_output)) if cfg.rl_output else None
    extra_html = ""
    if shown is not None:
        markdown.append(trajectory.trajectory_markdown(shown))
        extra_html = trajectory.trajectory_html(shown)

    trend = png = None
    today = today_utc()
    if cfg.trend.results_prefix:
        night = cfg.trend.night or find_night(cfg.trend.results_prefix, cfg.trend.run_id) or today

        this = finish_night(cfg.trend, night)
        console.print(f"night {night}: {this.state.lower()}")
        nights = load_nights(cfg.trend.results_prefix, cfg.trend.max_nights)
        trend = trend_table(nights, today)
        png = render.trend_png(*trend, today)
        storage.write_bytes(storage.join(cfg.output, "trend.png"), png)
        outputs["trend_png"] = storage.join(cfg.output, "trend.png")
        outputs["night"] = night_uri(cfg.trend.results_prefix, night)
        metrics.update({f"trend.{k}": v for k, v in latest_deltas(nights, today).items()})
        outputs["tensorboard"] = _nightly_tensorboard(cfg.trend.results_prefix)
        markdown.append(f"## Nightly trend ({len(nights)} nights)\n\n" + render.trend_markdown(*trend, today))

    page = render.report_html(
        cfg.title,
        eval_table=table,
        training=training,
        trend=trend,
        trend_png_bytes=png,
        today=today,
        extra_html=extra_html,
        note=note,
        links=links,
    )
    storage.write_bytes(outputs["html"], page.encode())
    storage.write_bytes(outputs["markdown"], "\n".join(markdown).encode())
    storage.write_bytes(storage.join(cfg.output, "metrics.json"), json.dumps(metrics, indent=2).encode())
    result = life.done(outputs, metrics)
    console.print(f"report: {outputs['html']}")
    return result
