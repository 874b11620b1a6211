"""What an eval run hands over: ``results.json``, a flat KFP metrics file, and an HTML report with plots.

- ``results.json``: per protocol and benchmark the metrics (``metrics.benchmark_metrics``), totals, errors by
  reason, tool use, elapsed time, the resolved config, code version, model URI and prompt-set checksum;
- ``metrics.json``: ``{"<protocol>.<benchmark>.<metric>": number}`` plus totals - exactly what a KFP
  ``Metrics`` artifact takes (``metrics.log_metric(name, value)`` per entry);
- ``report.html`` (+ ``plots/*.png``): a table of headline numbers per benchmark and protocol, with docs/method.md §7's
  published numbers and the difference when the model is a published checkpoint; accuracy per benchmark with
  and without the tool, tool calls per sample, an IoU histogram per time-span benchmark (Charades); errors by
  reason. What differs per benchmark (its metric, own numbers, published numbers, caveat, comparability rules)
  comes from its ``Benchmark`` (``eval/benchmarks/``).
"""

from __future__ import annotations

import base64
import html
import io
from collections import Counter
from typing import Any

from paravt_core.agent import frame_paths

from . import benchmarks as registry
from .metrics import headline
from .protocols import RELEASE_MAX_MODEL_LEN, WITH_TOOL

# docs/method.md §7's published checkpoints; each benchmark holds its own numbers of them (``Benchmark.published``).
PUBLISHED_MODELS = ("Qwen3-VL-8B", "LongVT-RFT-7B", "ParaVT-8B")
_ALIASES = {"paravt-8b": "ParaVT-8B", "qwen3-vl-8b": "Qwen3-VL-8B", "longvt-rft-7b": "LongVT-RFT-7B"}


def published_model(setting: str, model_uri: str) -> str | None:
    """The published checkpoint to compare with: the setting, or (``auto``) one named in the model URI."""
    if setting and setting != "auto":
        if setting not in PUBLISHED_MODELS:
            raise ValueError(f"published_model {setting!r} unknown; known: {', '.join(PUBLISHED_MODELS)}")
        return setting
    if setting == "auto":
        low = model_uri.lower()
        for alias, name in _ALIASES.items():
            if alias in low:
                return name
    return None


def published_value(model: str | None, benchmark: str) -> float | None:
    return registry.published_of(benchmark).numbers.get(model or "")


# The numbers every benchmark's metrics may hold that the KFP metrics log, around each benchmark's own
# (``Benchmark.metrics.scalars``).
KFP_HEADLINES = (
    "accuracy",
    "accuracy_errors_as_wrong",
    "miou",
    "miou_errors_as_zero",
    "r@0.3",
    "r@0.5",
    "r@0.7",
)
KFP_TOOL_USE = ("avg_tool_calls", "tool_use_rate")


def kfp_metrics(results: dict[str, Any]) -> dict[str, float]:
    """Flat name -> number (KFP ``Metrics`` takes floats only)."""
    out: dict[str, float] = {}
    for protocol, benches in results["protocols"].items():
        for bench, m in benches.items():
            spec = registry.metrics_of(bench)
            for key in (*KFP_HEADLINES, *spec.scalars, *KFP_TOOL_USE):
                if isinstance(m.get(key), int | float):
                    out[f"{protocol}.{bench}.{key.replace('@', '_at_')}"] = float(m[key])
            groups = (m.get(spec.grouped) or {}) if spec.grouped else {}
            for group, value in groups.items():
                if value is not None:
                    out[f"{protocol}.{bench}.accuracy_{group}"] = float(value)
            out[f"{protocol}.{bench}.errors"] = float(m["errors"])
    for key in ("samples", "scored", "errors", "error_share"):
        out[f"total.{key}"] = float(results["totals"][key])
    return out


# ---------------------------------------------------------------------------------------------------------
# Plots


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def accuracy_chart_empty(results: dict[str, Any]) -> bool:
    """Every headline of every protocol and benchmark is 0 or missing: the accuracy chart would have no bar."""
    return not any(headline(m) for per in results["protocols"].values() for m in per.values())


EMPTY_ACCURACY = (
    "The accuracy chart is left out: every headline above is 0 (or missing), so it would have no bar."
)


def _accuracy_chart(results: dict[str, Any], protocols: list[str], benches: list[str]) -> bytes:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(benches)), 3.6))
    width = 0.8 / max(1, len(protocols))
    for k, protocol in enumerate(protocols):
        values = [headline(results["protocols"][protocol].get(b, {})) or 0.0 for b in benches]
        xs = [i + (k - (len(protocols) - 1) / 2) * width for i in range(len(benches))]
        label = f"{protocol} ({'with' if protocol in WITH_TOOL else 'without'} tool)"
        ax.bar(xs, values, width, label=label)
    ax.set_xticks(range(len(benches)), benches, rotation=25, ha="right")
    ax.set_ylabel("accuracy % (Charades: mIoU)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8)
    ax.set_title("Headline per benchmark")
    png = _png(fig)
    plt.close(fig)
    return png


def plots(results: dict[str, Any], records: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, bytes]:
    """name -> PNG bytes. ``records``: protocol -> benchmark -> per-sample records."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out: dict[str, bytes] = {}
    protocols = list(results["protocols"])
    benches = sorted({b for p in protocols for b in results["protocols"][p]}, key=_order)

    if not accuracy_chart_empty(results):  # all-zero bars draw an empty frame: left out, the page says why
        out["accuracy"] = _accuracy_chart(results, protocols, benches)

    calls = [int(r.get("tool_calls") or 0) for p in protocols if p in WITH_TOOL
             for recs in records.get(p, {}).values() for r in recs if r.get("status") == "ok"]  # fmt: skip
    fig, ax = plt.subplots(figsize=(5, 3.2))
    counts = Counter(calls)
    top = max(counts, default=0)
    ax.bar(range(top + 1), [counts.get(i, 0) for i in range(top + 1)], color="#4c72b0")
    ax.set_xticks(range(top + 1))
    ax.set_xlabel("executed tool calls per sample (with-tool protocols)")
    ax.set_ylabel("samples")
    ax.set_title("Tool calls per sample")
    out["tool_calls"] = _png(fig)
    plt.close(fig)

    # an IoU histogram per time-span benchmark evaluated (one not evaluated: no empty plot)
    for bench in registry.REGISTRY.values():
        if bench.metrics.headline == "miou" and any(records.get(p, {}).get(bench.name) for p in protocols):
            title = bench.title or bench.name
            out[f"{bench.name}_iou"] = _iou_histogram(records, protocols, bench.name, title)
    return out


def _iou_histogram(records: dict[str, dict[str, list[dict[str, Any]]]], protocols: list[str], bench: str,
                   title: str) -> bytes:  # fmt: skip
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    for protocol in protocols:
        ious = [
            float(r["score"]) for r in records.get(protocol, {}).get(bench, []) if r.get("status") == "ok"
        ]
        if ious:
            ax.hist(ious, bins=10, range=(0, 1), alpha=0.6, label=protocol)
    ax.set_xlabel("temporal IoU")
    ax.set_ylabel("samples")
    ax.set_title(f"{title} IoU")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    png = _png(fig)
    plt.close(fig)
    return png


def _order(bench: str) -> int:
    names = list(registry.REGISTRY)
    return names.index(bench) if bench in names else len(names)


# ---------------------------------------------------------------------------------------------------------
# HTML


def _fmt(value: Any) -> str:
    return "–" if value is None else f"{value:.1f}" if isinstance(value, float) else html.escape(str(value))


def render_html(results: dict[str, Any], images: dict[str, bytes]) -> str:
    model = results.get("published_model")
    protocols = list(results["protocols"])
    benches = sorted({b for p in protocols for b in results["protocols"][p]}, key=_order)
    head = "".join(f"<th>{html.escape(p)}<br><small>{'with' if p in WITH_TOOL else 'without'} tool</small></th>"
                   for p in protocols)  # fmt: skip
    if model:
        head += f"<th>published<br><small>{html.escape(model)}</small></th><th>Δ (ours − published)</th>"
    rows = []
    for b in benches:
        cells = []
        for p in protocols:
            m = results["protocols"][p].get(b)
            if not m:
                cells.append("<td>–</td>")
                continue
            extra = (f"<br><small>{m['scored']} scored · {m['errors']} errors</small>{_denominators(m, b)}"
                     f"{_aside(m, b)}{_readers(m)}")  # fmt: skip
            cells.append(f"<td><b>{_fmt(headline(m))}</b> <small>{html.escape(str(m.get('headline')))}</small>"
                         f"{extra}{_provenance(m)}</td>")  # fmt: skip
        if model:
            pub = published_value(model, b)
            ours = next((headline(results["protocols"][p][b]) for p in protocols
                         if p in WITH_TOOL and b in results["protocols"][p]), None)  # fmt: skip
            why = comparability(results, b)
            diff = None if pub is None or ours is None or why else ours - pub
            sign = "" if diff is None else ("pos" if diff >= 0 else "neg")
            shown = (
                f"{diff:+.1f}<br><small class='cmp'>{COMPARABLE}</small>" if diff is not None
                else (f"<small class='cmp'>{html.escape(why)}</small>" if why and pub is not None else "")
            )  # fmt: skip
            note = registry.published_of(b).caveat if diff is not None else ""
            shown += f"<br><small>{html.escape(note)}</small>" if note else ""
            cells.append(f"<td>{_fmt(pub)}</td><td class='{sign}'>{shown}</td>")
        metric = "mIoU" if registry.metrics_of(b).headline == "miou" else "acc."
        subs = _subtitles_label(results, b)
        rows.append(f"<tr><th>{html.escape(b)} <small>({metric})</small>{subs}</th>{''.join(cells)}</tr>")

    details = []
    for p in protocols:
        for b in benches:
            m = results["protocols"][p].get(b)
            if not m:
                continue
            keys = [k for k in (*registry.metrics_of(b).details, *DETAILS) if k in m]
            parts = "; ".join(f"{k}: {_detail(m[k])}" for k in keys)
            parts += "".join(f"<br><small>{html.escape(n)}</small>" for n in m.get("notes") or [])
            details.append(f"<tr><td>{html.escape(p)}</td><td>{html.escape(b)}</td><td>{parts}</td></tr>")

    totals = results["totals"]
    errors = "".join(f"<tr><td>{html.escape(k)}</td><td>{v}</td></tr>"
                     for k, v in sorted(results["errors_by_reason"].items())) or "<tr><td colspan=2>none</td></tr>"  # fmt: skip
    figs = "".join(
        f"<figure><img alt='{n}' src='data:image/png;base64,{base64.b64encode(png).decode()}'></figure>"
        for n, png in images.items()
    )
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>paravt eval report</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; }}
table {{ border-collapse: collapse; margin: 12px 0; }}
th, td {{ border: 1px solid #ccc; padding: 4px 10px; text-align: center; vertical-align: top; }}
th {{ background: #f3f3f3; }}
td.pos {{ color: #1a7f37; }} td.neg {{ color: #b42318; }}
small {{ color: #666; }} figure {{ display: inline-block; margin: 8px; }}
.meta td {{ text-align: left; }}
.gate {{ background: #fde8e8; border: 1px solid #b42318; color: #b42318; padding: 6px 10px; display: inline-block; }}
</style></head><body>
<h1>paravt eval</h1>
{_gate_banner(results)}
<table class="meta">
<tr><th>model</th><td>{html.escape(str(results.get("model")))}</td></tr>
<tr><th>compared with</th><td>{html.escape(model or "no published checkpoint")}</td></tr>
<tr><th>samples</th><td>{totals["samples"]} ({totals["scored"]} scored, {totals["errors"]} errors,
 error share {100 * totals["error_share"]:.1f}%)</td></tr>
<tr><th>tool use</th><td>{_fmt(results.get("avg_tool_calls"))} executed calls per sample ·
 {_fmt(results.get("tool_use_rate"))}% of samples call the tool (with-tool protocols)</td></tr>
<tr><th>preset</th><td>{html.escape(str(results.get("preset", "paravt")))} · error rule
 {html.escape(str(results.get("error_rule", "paravt")))}</td></tr>
<tr><th>prompts</th><td>{html.escape(str(results.get("prompt_protocol")))} · {html.escape(str(results.get("prompt_checksum", "")))}</td></tr>
<tr><th>code</th><td>{html.escape(str(results.get("code_version")))} · {results.get("elapsed_s", 0):.1f} s</td></tr>
{_server_row(results)}</table>
<h2>Headline (accuracy %, Charades mIoU)</h2>
<table><tr><th>benchmark</th>{head}</tr>{"".join(rows)}</table>
<p><small>Errors (engine failures after retries, unreadable videos, bad rows, judge unavailable): under error
rule paravt counted apart and never scored as wrong answers; under error rule release (the released driver's)
a multiple-choice error is a wrong answer and a Charades engine failure IoU 0. Where errors make the two differ,
each cell shows both.</small></p>
<h2>Plots</h2>{_empty_note(results)}{figs}
<h2>Errors by reason</h2><table><tr><th>reason</th><th>samples</th></tr>{errors}</table>
<h2>Breakdowns</h2><table class="meta"><tr><th>protocol</th><th>benchmark</th><th>metrics</th></tr>{"".join(details)}</table>
</body></html>
"""


def _empty_note(results: dict[str, Any]) -> str:
    return f"<p>{html.escape(EMPTY_ACCURACY)}</p>" if accuracy_chart_empty(results) else ""


# The shared numbers of the breakdowns table, after each benchmark's own (``Benchmark.metrics.details``).
DETAILS = ("r@0.3", "r@0.5", "r@0.7", "accuracy_errors_as_wrong", "miou_errors_as_zero", "accuracy_release",
           "accuracy_robust", "miou_release", "miou_robust", "reader_differences", "avg_tool_calls",
           "tool_use_rate")  # fmt: skip
# (errors left out, errors scored as the release does) of each kind of headline
DENOMINATORS = {"accuracy": ("accuracy", "accuracy_errors_as_wrong"), "miou": ("miou", "miou_errors_as_zero")}


def _denominators(m: dict[str, Any], bench: str) -> str:
    """Both readings of a headline where errors make them differ: errors left out / scored as the release does."""
    if not m.get("errors"):
        return ""
    spec = registry.metrics_of(bench)
    ours, theirs = spec.denominators or DENOMINATORS[spec.headline]
    a, b = m.get(ours), m.get(theirs)
    if a is None or b is None or abs(a - b) < 1e-9:
        return ""
    worth = "IoU 0" if ours == "miou" else "wrong"
    return (f"<br><small class='denom'>errors left out: {_fmt(a)} · errors {worth} (release rule): {_fmt(b)}"
            "</small>")  # fmt: skip


SUBTITLES = {
    "all": "subtitles: every cue (as the release)",
    "aligned": "subtitles: aligned, only the cues covering the sampled frames (as lmms-eval)",
}


def _subtitle_mode(results: dict[str, Any], bench: str) -> str | None:
    for p in results["protocols"]:
        mode = (results["protocols"][p].get(bench) or {}).get("subtitles")
        if mode:
            return str(mode)
    return None


def _subtitles_label(results: dict[str, Any], bench: str) -> str:
    mode = _subtitle_mode(results, bench)
    return f"<br><small class='subs'>{html.escape(SUBTITLES.get(mode, mode))}</small>" if mode else ""


def _aside(m: dict[str, Any], bench: str) -> str:
    """The benchmark's labelled number under ours (MMVU: lmms-eval's mmvu_val over all items)."""
    aside = registry.metrics_of(bench).aside
    shown = aside(m) if aside is not None else None
    if shown is None:
        return ""
    css, text = shown
    return f"<br><small class='{css}'>{html.escape(text)}</small>"


def _readers(m: dict[str, Any]) -> str:
    """Both answer readers' headlines (the release's extract_letter and ours) and how many samples they read
    differently: a reader change is measured on every run."""
    base = "miou" if "miou" in m else "accuracy"
    if f"{base}_release" not in m:
        return ""
    return (f"<br><small class='readers'>release reader: {_fmt(m[f'{base}_release'])} · robust reader: "
            f"{_fmt(m[f'{base}_robust'])} ({m.get('reader_differences', 0)} read differently)</small>")  # fmt: skip


def _provenance(m: dict[str, Any]) -> str:
    """What produced a number: preset / protocol, prompt set and its checksum (first 12 hex digits)."""
    p = m.get("provenance") or {}
    if not p:
        return ""
    digest = str(p.get("prompt_checksum", "")).removeprefix("sha256:")[:12]
    text = f"{p.get('preset')}/{p.get('protocol')} · {p.get('prompt_set')} sha256:{digest}"
    return f"<br><small class='prov'>{html.escape(text)}</small>"


COMPARABLE = ("comparable: preset, prompts (release-v1), error rule, reader, engine, rows and frame path are the "
              "release's")  # fmt: skip
# Published models whose release protocol cannot be run: driver.py (cf55249) line 182 ships LongVT-RFT-7B's
# prompt as the placeholder "FILL_FROM_LONGVT" and _system_message (lines 372-380) refuses to run it.
NO_RELEASE_PROTOCOL = {"LongVT-RFT-7B": "its release prompt (agentic_longvt) is an unfilled placeholder"}


def release_checksum() -> str:
    """The checksum of the release's prompt texts (``release-v1``)."""
    from paravt_core.agent.prompts import load_prompt_set

    from .protocols import RELEASE_PROMPT_SET

    return load_prompt_set(RELEASE_PROMPT_SET).checksum


def _config_differences(config: dict[str, Any], bench: str, model: str | None) -> list[str]:
    """What the run's config (``results["config"]``) changes from the release's run of ``bench``."""
    why = []
    engine = (config.get("engine") or {}).get("kind", "transformers")
    if engine not in (
        "openai",
        "vllm",
    ):  # the release queries a vLLM server (utils.py launch_servers, run_shard)
        why.append(f"engine.kind={engine}, not a server (the release queries a vLLM server)")
    for b in config.get("benchmarks") or []:
        if b.get("name") != bench:
            continue
        changed = [f"{k}={b[k]}" for k in ("limit", "split", "source") if b.get(k)]
        if changed:
            why.append(f"rows overridden ({', '.join(changed)}): the release runs the registry's whole split")
    if config.get("demo_data"):
        why.append("rows from demo_data fixtures, not the benchmark")
    agent = config.get("agent") or {}
    if agent.get("question_suffix") is False:
        why.append(
            "agent.question_suffix=false (the release appends the video path to every agentic question)"
        )
    if model in NO_RELEASE_PROTOCOL:
        why.append(f"published_model={model}: {NO_RELEASE_PROTOCOL[model]}")
    # preset=release sets the frame path itself (protocols.RELEASE_AGENT); config.agent is the base it merges into
    if config.get("preset") != "release":
        note = frame_paths.comparability_note(agent.get("frame_path"))  # the path says how its frames differ
        if note:
            why.append(note)
    return why


def comparability(results: dict[str, Any], bench: str) -> str:
    """Why our headline of ``bench`` cannot be set against the published number ("" when it can): the
    preset, the prompt texts (the ``release-v1`` checksum), the error rule and the reader must all be the
    release's, and so must the engine (a server), the rows (no limit/split/source override), the question
    suffix, the published model's protocol, the frame path and the benchmark's input and scoring. Every
    condition that fails is named."""
    why = []
    preset = results.get("preset", "paravt")
    if preset != "release":
        why.append(f"preset={preset}, not release (the published numbers come from the release's driver)")
    checksum = str(results.get("prompt_checksum", ""))
    if checksum != release_checksum():
        name = results.get("prompt_protocol")
        why.append(
            f"prompts {name} ({checksum.removeprefix('sha256:')[:12]}) are not the release's release-v1"
        )
    rule = results.get("error_rule", "paravt")
    if rule != "release":
        why.append(f"error_rule={rule}: errors left out of the denominator (the release scores them wrong)")
    reader = results.get("reader", "robust")
    if reader != "release":
        why.append(f"reader={reader}: answers read by ours, not the release's extract_letter")
    if "config" in results:
        why += _config_differences(results["config"], bench, results.get("published_model"))
    served = (results.get("server") or {}).get("max_model_len")
    if served is not None and served < RELEASE_MAX_MODEL_LEN:  # it refuses requests the release's server took
        why.append(f"the server's context is {served} tokens, under the release's --max-model-len "
                   f"{RELEASE_MAX_MODEL_LEN}: it refuses the longest requests the release answered")  # fmt: skip
    sampling = results.get("sampling") or {}
    if sampling.get("penalties") is None and "sampling" in results:
        why.append(f"the sampling defaults the release's server applied are {sampling.get('source')}")
    elif not sampling.get("sent", True):
        engine = (results.get("config") or {}).get("engine", {}).get("kind")
        why.append(f"the checkpoint's generation_config.json sets {sampling['penalties']}, which the release's "
                   f"server applied to every request; engine.kind={engine} does not")  # fmt: skip
    if _subtitle_mode(results, bench) == "aligned":
        why.append(
            "subtitles aligned to the sampled frames (lmms-eval's), not every cue as the release gave them"
        )
    why += [reason for rule in registry.published_of(bench).rules if (reason := rule(results, bench))]
    return "not comparable: " + "; ".join(why) if why else ""


def _server_row(results: dict[str, Any]) -> str:
    """The serving engine's reported context (engine.kind=openai), beside the release's."""
    server = results.get("server")
    if not server:
        return ""
    value = server.get("max_model_len")
    told = "not reported" if value is None else f"{value} tokens"
    return (f"<tr><th>server context</th><td>{html.escape(told)} (the release's vLLM: "
            f"{RELEASE_MAX_MODEL_LEN})</td></tr>")  # fmt: skip


def _gate_banner(results: dict[str, Any]) -> str:
    gate = results.get("gate") or {}
    if gate.get("passed", True):
        return ""
    failing = gate.get("failing") or {}
    where = ", ".join(f"{html.escape(k)} {100 * v:.1f}%" for k, v in failing.items())
    return (f"<p class='gate'>Error share exceeds max_error_share {100 * gate['max_error_share']:.1f}% "
            f"in {where or 'the run'}: the stage failed after writing these results.</p>")  # fmt: skip


def _detail(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{html.escape(str(k))}: {_fmt(v)}" for k, v in value.items()) + "}"
    return _fmt(value)
