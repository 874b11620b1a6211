"""``paravt eval``: every configured benchmark under every protocol on one model, exactly once per sample.

Outputs under ``cfg.output`` (a local directory or an ``s3://`` prefix)::

    config.yaml
    records.json                             fingerprint of model + engine + agent config + prompt texts: a
                                             rerun with a different one is refused (records would mix)
    samples/<protocol>/<benchmark>.jsonl     one record per sample (id, question, gold, prediction, score,
                                             finish reason, tool calls, turns, frames, latency, error)
    results.json                             metrics per protocol x benchmark, totals, errors by reason, tool
                                             use, elapsed, config, code version, model URI, prompt checksum
    metrics.json                             flat {"<protocol>.<benchmark>.<metric>": number} for KFP Metrics
    report.html  plots/*.png                 table (+ published numbers), accuracy (left out when all 0) / tool-call / IoU plots
    _COMPLETE                                written last, only when the error share is within the limit

Sharded runs (``shard=i/n``) evaluate the samples whose id hashes to shard ``i`` (``records.shard_of``: stable
by id, whatever the rows' order) and write ``shards/<i>-of-<n>/samples/...`` and their own ``_COMPLETE``; a run
with ``merge=true`` (same config, no shard; ``expected_shards=n``, or ``n`` read off ``shards/``) checks that
all ``n`` shards are complete and together hold every sample exactly once, then writes the files above. The
results, metrics and report depend only on the set of records (taken in id order), so a merged run reports
exactly what one unsharded run on the same inputs reports. A rerun skips the samples already recorded.

With an ``s3://`` output the records are appended to files in ``work_dir`` and uploaded every
``runner.upload_every_s`` and at the end; a rerun on a fresh machine starts from the uploaded records.

Above ``max_error_share`` (errors / samples of any one benchmark under one protocol, not pooled) the stage
writes everything, then fails with one message naming the benchmarks.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import time
from collections import Counter
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from paravt_core import storage
from paravt_core.agent import prompts
from paravt_core.config import config_to_dict
from paravt_core.stage import StageResult, StageRun, console
from paravt_core.tracking import log_results
from paravt_core.tracking.progress import EvalProgress, is_terminal
from paravt_core.tracking.scalars import eval_scalars
from paravt_core.user_errors import ParavtUserError

from . import benchmarks as registry
from . import report
from .config import EvalBenchmarkConfig, EvalConfig
from .formats import FormatError, read_rows
from .metrics import benchmark_metrics
from .protocols import RELEASE_CLIENT_TIMEOUT_S, WITH_TOOL, overview_channel, preset_agent, release_penalties
from .records import RecordError, SampleLog, parse_shard, read_records, shard_of
from .runner import RunOptions, run_samples

STAGE = "eval"
ROW_PATTERNS = ["*.parquet", "*.arrow", "*.json", "*.jsonl"]


class EvalError(ParavtUserError, RuntimeError):
    """The eval stage cannot run or its result fails the error-share gate (one-line message)."""


# ---------------------------------------------------------------------------------------------------------
# Inputs


def resolve_benchmarks(cfg: EvalConfig) -> list[EvalBenchmarkConfig]:
    """The benchmarks to run; with ``demo_data`` the fixtures fill in missing sources (or all, when none)."""
    if not cfg.demo_data:
        if not cfg.benchmarks:
            raise EvalError("no benchmarks configured (benchmarks: [{name: videomme, ...}] or demo_data)")
        return list(cfg.benchmarks)
    try:
        fixtures = {e["name"]: e for e in registry.demo_entries(cfg.demo_data)}
    except FileNotFoundError as err:
        raise EvalError(str(err)) from None
    if not cfg.benchmarks:
        return [EvalBenchmarkConfig(**e) for e in fixtures.values()]
    out = []
    for b in cfg.benchmarks:
        fx = fixtures.get(b.name, {})
        filled = {k: v for k, v in fx.items() if k != "name" and not getattr(b, k)}
        out.append(b.model_copy(update=filled))
    return out


def source_spec(b: EvalBenchmarkConfig) -> str:
    """Where the rows of ``b`` come from (``hf://<id>``, ``s3://`` or a local path); nothing is fetched."""
    try:
        bench = registry.get(b.name)
    except ValueError as err:
        raise EvalError(str(err)) from None
    source = b.source or (f"hf://{bench.hub_id}" if bench.hub_id else "")
    if not source:
        raise EvalError(f"benchmark {b.name}: no source configured")
    return source


def _rows_source(b: EvalBenchmarkConfig, bench: registry.Benchmark, work: str) -> str:
    source = source_spec(b)
    if source.startswith("hf://") or storage.is_s3(source):  # is_s3 rejects other schemes
        from paravt_core.data.download import fetch

        dest = os.path.join(work, "sources", b.name)
        fetched = fetch(source, ROW_PATTERNS, dest)
        return os.path.dirname(fetched[0].path) if len(fetched) == 1 else dest
    return source


def load_samples(
    b: EvalBenchmarkConfig,
    work: str,
    prompt_set: str = prompts.DEFAULT_PROMPT_SET,
    overview_frames: int = 64,
    preset: str = "paravt",
) -> list[registry.Sample]:
    source_spec(b)  # an unknown benchmark name is an EvalError (one line), before anything is fetched
    if b.media_root and "://" not in b.media_root and not os.path.isdir(b.media_root):
        raise EvalError(  # before the model is loaded, not as one video error per sample
            f"benchmark {b.name}: media_root {b.media_root} is not a directory; point it at the benchmark's videos"
        )
    bench = registry.get(b.name)
    source = _rows_source(b, bench, work)
    try:
        rows = read_rows(source, b.split or bench.split)
    except FormatError as err:
        raise EvalError(f"benchmark {b.name}: {err}") from None
    if b.limit:
        rows = rows[: b.limit]
    texts = prompts.load_prompt_set(prompt_set).benchmark  # question texts of the run's prompt set
    aligned = overview_frames if b.subtitle_mode == "aligned" else 0
    ctx = registry.Context(
        media_root=b.media_root,
        subtitles_root=b.subtitles,
        texts=texts,
        subtitle_frames=aligned,
        preset=preset,
    )
    return registry.to_samples(b.name, rows, ctx)


# ---------------------------------------------------------------------------------------------------------
# Engine and judge


def build_engine(cfg: EvalConfig) -> tuple[Any, Any]:
    """(engine, processor) of the config (``engines.registry``)."""
    from paravt_core.engines.registry import KINDS, BuildContext, build

    e = cfg.engine
    if KINDS[e.kind].needs_url(e):  # a kind that launches its server (vllm) starts it here instead
        raise EvalError(f"engine.kind={e.kind} needs engine.base_url")
    context = BuildContext(
        stage="eval",
        model=cfg.model,
        purpose="evaluated model",
        timeout_s=RELEASE_CLIENT_TIMEOUT_S if cfg.preset == "release" else None,  # the release's client's
        pixels=_server_pixels(cfg),
        log_path=os.path.join(os.path.abspath(cfg.work_dir), "server.log"),
    )
    engine = build(e, context)
    if e.kind == "transformers" and e.coalesce:
        from paravt_core.engines.coalesce import CoalescingEngine

        # greedy eval needs no seeds; the runner retries failed samples itself (attempts stay truthful)
        return CoalescingEngine(engine, seed=None, max_retries=0), engine.processor
    return engine, engine.processor


def _video_urls(cfg: EvalConfig) -> bool:
    """The engine's server decodes a ``video_url`` part itself (``EngineKind.video_urls``: vLLM)."""
    from paravt_core.engines.registry import KINDS

    return KINDS[cfg.engine.kind].video_urls


def _server_pixels(cfg: EvalConfig) -> tuple[int, int] | None:
    """The pixel budget a launched server's processor is set to: the frame path's, as the episode's encoder
    gets (none on the release's path: its server keeps the checkpoint's own processor settings)."""
    agent = preset_agent(cfg.preset, cfg.agent)
    return agent.frames.processor_pixels(agent)


def build_judge(cfg: EvalConfig) -> Any:
    """The LLM judge from the environment, or None (open-ended items then get token F1)."""
    if not cfg.judge.enabled or not os.environ.get("LLM_JUDGE_BASE_URL"):
        return None
    from paravt_core.rewards.judge import Judge

    return Judge.from_env()


# ---------------------------------------------------------------------------------------------------------
# Records location


class RecordStore:
    """Where the JSONL records of one run live: directly under a local ``root``, or in ``work`` mirrored to
    an ``s3://`` root (uploaded every ``upload_every_s`` and on close; downloaded when a rerun starts)."""

    def __init__(self, root: str, work: str, upload_every_s: float):
        self.root = root
        self.remote = storage.is_s3(root)
        digest = hashlib.sha256(root.encode()).hexdigest()[:16]
        self.local_root = os.path.join(work, "records", digest) if self.remote else root
        self.upload_every_s = upload_every_s
        self._last_upload = time.monotonic()
        self.logs: dict[str, SampleLog] = {}

    @staticmethod
    def rel(protocol: str, bench: str) -> str:
        return f"samples/{protocol}/{bench}.jsonl"

    def open(self, protocol: str, bench: str) -> SampleLog:
        rel = self.rel(protocol, bench)
        local = os.path.join(self.local_root, rel)
        if self.remote and not os.path.exists(local) and storage.exists(storage.join(self.root, rel)):
            storage.download_file(storage.join(self.root, rel), local)
        self.logs[rel] = SampleLog(local)
        return self.logs[rel]

    def maybe_upload(self, force: bool = False) -> None:
        if not self.remote or not (force or time.monotonic() - self._last_upload >= self.upload_every_s):
            return
        for rel, log in self.logs.items():
            storage.upload_file(str(log.path), storage.join(self.root, rel))
        self._last_upload = time.monotonic()

    def close(self) -> None:
        try:
            self.maybe_upload(force=True)
        finally:
            for log in self.logs.values():
                log.close()


# ---------------------------------------------------------------------------------------------------------
# Results


def _code_version() -> str:
    env = os.environ.get("PARAVT_CODE_VERSION")
    if env:
        return env
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        out = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=5, check=True)  # fmt: skip
        return f"git:{out.stdout.strip()}"
    except (OSError, subprocess.SubprocessError):
        from importlib.metadata import version

        return f"paravt {version('paravt')}"


def prompt_set_of(cfg: EvalConfig) -> prompts.PromptSet:
    """The prompt set the episodes use (``agent.prompt_set``; preset=release fills in ``release-v1`` when it
    is not given; its checksum is recorded in the results)."""
    return prompts.load_prompt_set(cfg.agent.prompt_set)


def build_results(
    cfg: EvalConfig,
    records: dict[str, dict[str, list[dict[str, Any]]]],
    elapsed_s: float,
    server: dict[str, Any] | None = None,
) -> dict[str, Any]:
    per: dict[str, dict[str, Any]] = {}
    errors: Counter[str] = Counter()
    ps = prompt_set_of(cfg)
    samples = scored = n_err = 0
    calls: list[int] = []
    for protocol, benches in records.items():
        per[protocol] = {}
        for bench, recs in benches.items():
            m = benchmark_metrics(bench, recs, cfg.resolved_error_rule, cfg.resolved_reader, protocol)
            # every number names what produced it: preset, protocol and the prompt set's checksum
            m["provenance"] = {"preset": cfg.preset, "protocol": protocol, "prompt_set": ps.name,
                               "prompt_checksum": ps.checksum}  # fmt: skip
            if registry.REGISTRY[bench].subtitles:  # which subtitles the questions carry (all / aligned)
                mode = next((b.subtitle_mode for b in cfg.benchmarks if b.name == bench), "all")
                m["subtitles"] = mode
            per[protocol][bench] = m
            samples += m["samples"]
            scored += m["scored"]
            n_err += m["errors"]
            errors.update({f"{k}": v for k, v in m["errors_by_reason"].items()})
            if protocol in WITH_TOOL:
                calls += [int(r.get("tool_calls") or 0) for r in recs if r.get("status") == "ok"]
    model = report.published_model(cfg.published_model, cfg.model)
    sampling = sampling_report(cfg)
    benches = sorted({b for by_bench in per.values() for b in by_bench})
    video_urls = _video_urls(cfg)
    return {
        "stage": STAGE,
        "model": cfg.model,
        "published_model": model,
        "published": {b: report.published_value(model, b) for b in registry.REGISTRY} if model else {},
        "preset": cfg.preset,
        "protocols": per,
        "totals": {
            "samples": samples,
            "scored": scored,
            "errors": n_err,
            "error_share": (n_err / samples) if samples else 0.0,
        },  # fmt: skip
        "errors_by_reason": dict(errors),
        "error_rule": cfg.resolved_error_rule,
        "reader": cfg.resolved_reader,
        "gate": error_gate(per, cfg.max_error_share),
        "avg_tool_calls": round(sum(calls) / len(calls), 4) if calls else None,
        "tool_use_rate": round(100 * sum(c > 0 for c in calls) / len(calls), 4) if calls else None,
        "elapsed_s": round(elapsed_s, 3),
        "code_version": _code_version(),
        "prompt_protocol": ps.name,
        "prompt_checksum": ps.checksum,
        # how each benchmark's overview travelled (frames, or the whole video as a video_url the server decodes)
        "overview_channels": {b: overview_channel(registry.get(b), cfg.preset, video_urls) for b in benches},
        # preset=release: the sampling defaults the release's server applied, and whether they were sent
        **({"sampling": sampling} if sampling else {}),
        # the serving engine's own report (engine.kind=openai): its context, set against the release's
        **({"server": server} if server else {}),
        "config": config_to_dict(cfg),
    }


def error_gate(per: dict[str, dict[str, Any]], limit: float) -> dict[str, Any]:
    """The error limit per benchmark (and protocol), not pooled: a few hundred errors in one benchmark (the
    longest videos, the hardest items) would hide under a pooled share while inflating its accuracy."""
    shares = {f"{p}.{b}": m["errors"] / m["samples"] for p, benches in per.items() for b, m in benches.items()
              if m["samples"]}  # fmt: skip
    failing = {k: v for k, v in shares.items() if v > limit}
    return {"max_error_share": limit, "passed": not failing, "shares": shares, "failing": failing}


def write_outputs(
    cfg: EvalConfig,
    output: str,
    records: dict[str, dict[str, list[dict]]],
    elapsed: float,
    server: dict[str, Any] | None = None,
) -> dict:
    records = canonical(records)
    results = build_results(cfg, records, elapsed, server)
    storage.write_bytes(storage.join(output, "results.json"), json.dumps(results, indent=2).encode())
    metrics = report.kfp_metrics(results)
    storage.write_bytes(storage.join(output, "metrics.json"), json.dumps(metrics, indent=2).encode())
    images = report.plots(results, records)
    for name, png in images.items():
        storage.write_bytes(storage.join(output, "plots", f"{name}.png"), png)
    storage.write_bytes(storage.join(output, "report.html"), report.render_html(results, images).encode())
    return results


def print_summary(results: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title="paravt eval")
    table.add_column("protocol")
    table.add_column("benchmark")
    for col in ("headline", "scored", "errors", "published"):
        table.add_column(col, justify="right")
    for protocol, benches in results["protocols"].items():
        for bench, m in benches.items():
            value = m.get(m["headline"])
            pub = results["published"].get(bench)
            table.add_row(protocol, bench, "–" if value is None else f"{value:.1f} {m['headline']}",
                          str(m["scored"]), str(m["errors"]), "–" if pub is None else f"{pub:.1f}")  # fmt: skip
    console.print(table)
    t = results["totals"]
    console.print(f"errors: {t['errors']} of {t['samples']} samples ({100 * t['error_share']:.1f}%)"
                  + (f" by reason {results['errors_by_reason']}" if t["errors"] else ""))  # fmt: skip


# ---------------------------------------------------------------------------------------------------------
# The stage


def _samples_by_bench(cfg: EvalConfig, work: str) -> dict[str, list[registry.Sample]]:
    out: dict[str, list[registry.Sample]] = {}
    for b in resolve_benchmarks(cfg):
        if b.name in out:
            raise EvalError(f"benchmark {b.name} is configured twice")
        frames = preset_agent(cfg.preset, cfg.agent).overview_frames
        out[b.name] = load_samples(b, work, cfg.agent.prompt_set, frames, cfg.preset)
    return out


def select_shard(
    samples: dict[str, list[registry.Sample]], shard: tuple[int, int]
) -> dict[str, list[registry.Sample]]:
    """The samples of shard ``(i, n)``: those whose id hashes to ``i`` (not a slice by position, so the rows'
    order, or rows added elsewhere in the list, never move a sample to another shard)."""
    i, n = shard
    return {b: [s for s in items if shard_of(s.id, n) == i] for b, items in samples.items()}


def canonical(records: dict[str, dict[str, list[dict]]]) -> dict[str, dict[str, list[dict]]]:
    """Records in id order: what the results are computed from, so they depend on the set of records, not
    on the order samples finished in or on how they were sharded (a float sum depends on its order)."""
    return {p: {b: sorted(recs, key=lambda r: str(r["id"])) for b, recs in benches.items()}
            for p, benches in records.items()}  # fmt: skip


def merge_shards(cfg: EvalConfig, output: str, work: str, samples: dict[str, list[registry.Sample]]) -> dict:
    """Combine the records of all shards ``i/n`` (``n``: ``cfg.expected_shards``, else read off ``shards/``);
    refuses when a shard is missing or incomplete, or when the shards together do not hold every sample
    exactly once."""
    n = cfg.expected_shards or _shard_count(output)
    missing = [
        f"{i}/{n}" for i in range(n) if not storage.is_complete(storage.join(output, "shards", f"{i}-of-{n}"))
    ]
    if missing:
        raise EvalError(
            f"cannot merge: shard(s) {', '.join(missing)} of {n} are missing or incomplete; run them first "
            f"(under {storage.join(output, 'shards')})"
        )
    for i in range(n):  # every shard evaluated the same model and episode config as this merge
        check_records_fingerprint(storage.join(output, "shards", f"{i}-of-{n}"), cfg)
    merged: dict[str, dict[str, list[dict]]] = {}
    problems = []
    for protocol in cfg.protocols:
        merged[protocol] = {}
        for bench, items in samples.items():
            recs: list[dict] = []
            for i in range(n):
                uri = storage.join(output, "shards", f"{i}-of-{n}", RecordStore.rel(protocol, bench))
                if not storage.exists(uri):
                    continue
                if storage.is_s3(uri):
                    local = os.path.join(work, "merge", f"{i}-of-{n}", RecordStore.rel(protocol, bench))
                    storage.download_file(uri, local)
                    uri = local
                recs += read_records(uri)
            counts = Counter(r["id"] for r in recs)
            expected = {s.id for s in items}
            lost = expected - set(counts)
            twice = [k for k, c in counts.items() if c > 1]
            if lost or twice:
                problems.append(
                    f"{protocol}/{bench}: {len(lost)} sample(s) missing, {len(twice)} recorded twice"
                )
            merged[protocol][bench] = recs
    if problems:
        raise EvalError(
            "cannot merge: the shards do not hold every sample exactly once (" + "; ".join(problems) + ")"
        )
    merged = canonical(merged)
    for protocol, benches in merged.items():
        for bench, recs in benches.items():
            body = "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in recs)
            storage.write_bytes(storage.join(output, "samples", protocol, f"{bench}.jsonl"), body.encode())
    return merged


def _shard_count(output: str) -> int:
    names = {
        u.split("/shards/", 1)[1].split("/", 1)[0] for u in storage.list_uris(storage.join(output, "shards"))
    }
    counts = {int(n.split("-of-")[1]) for n in names if "-of-" in n}
    if not counts:
        raise EvalError(f"cannot merge: no shards under {output}/shards; run them first (shard=i/n)")
    if len(counts) != 1:
        raise EvalError(
            f"cannot merge: expected shards of one count under {output}/shards, found {sorted(counts)}; "
            "set expected_shards"
        )
    return counts.pop()


RECORDS_FINGERPRINT = "records.json"


def records_fingerprint(cfg: EvalConfig) -> dict[str, Any]:
    """What the records depend on: model, serving engine, episode config and prompt texts (not the benchmark
    list or runner knobs: adding a benchmark or changing concurrency keeps the records valid)."""
    parts = {
        "model": cfg.model,
        "engine": {  # the fields of every kind before kinds had their own (a record's fingerprint is kept)
            "kind": cfg.engine.kind,
            "served_model": getattr(cfg.engine, "served_model", ""),
            "dtype": getattr(cfg.engine, "dtype", None),
        },
        "agent": cfg.agent.model_dump(mode="json"),
        "preset": cfg.preset,
        "prompt_checksum": prompt_set_of(cfg).checksum,
    }
    return {"sha256": hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest(), **parts}


def check_records_fingerprint(root: str, cfg: EvalConfig) -> None:
    """Records under ``root`` must come from the same model and episode config; the first run writes it."""
    uri = storage.join(root, RECORDS_FINGERPRINT)
    mine = records_fingerprint(cfg)
    if storage.exists(uri):
        theirs = json.loads(storage.read_bytes(uri))
        if theirs.get("sha256") != mine["sha256"]:
            changed = sorted(
                k
                for k in ("model", "engine", "agent", "preset", "prompt_checksum")
                if theirs.get(k) != mine[k]
            )
            raise EvalError(
                f"{root} holds records made with a different {', '.join(changed)}; "
                "use another output (or delete it) to evaluate this config"
            )
        return
    storage.write_bytes(uri, json.dumps(mine, indent=2).encode())


def run(cfg: EvalConfig, *, engine: Any = None, processor: Any = None, judge: Any = None) -> StageResult:
    """Run the eval stage (see the module docstring). ``engine``/``processor``/``judge`` replace the configured
    ones (fault injection in tests, a shared engine in benchmarks)."""
    life = StageRun.open(STAGE, cfg.output, absolute=True)
    started = time.perf_counter()
    output = life.output
    work = os.path.abspath(cfg.work_dir)
    if cfg.merge and cfg.shard:
        raise EvalError("merge=true combines all shards; leave shard empty")
    if cfg.expected_shards and not cfg.merge:
        raise EvalError("expected_shards is the shard count of merge=true; set merge=true or leave it 0")
    shard = parse_shard(cfg.shard) if cfg.shard else None
    run_root = storage.join(output, "shards", f"{shard[0]}-of-{shard[1]}") if shard else output
    # a changed config is evaluated again over the same output (records of another model are refused below)
    if not shard and life.reusable(cfg, on_change="redo"):
        results = json.loads(storage.read_bytes(storage.join(output, "results.json")))
        return life.reused(_outputs(output), _summary(results))
    life.begin(cfg, root=run_root)  # outputs are rewritten below; trusted again only when complete
    samples = _samples_by_bench(cfg, work)

    if cfg.merge:
        records = merge_shards(cfg, output, work, samples)
    else:
        check_records_fingerprint(run_root, cfg)
        if shard:
            samples = select_shard(samples, shard)
        records = _evaluate(cfg, samples, run_root, work, engine, processor, judge)
        if shard:
            total = sum(len(r) for b in records.values() for r in b.values())
            result = life.done(
                {"shard": run_root}, {"records": total}, root=run_root, shard=cfg.shard, records=total
            )
            console.print(f"[bold]paravt eval[/]: shard {cfg.shard} complete ({total} records) in {run_root}")
            return result

    results = write_outputs(cfg, output, records, time.perf_counter() - started, server_report(cfg))
    log_results(cfg.tracking, STAGE, output, work, eval_scalars(results), config_to_dict(cfg), cfg.model)
    print_summary(results)
    outputs = _outputs(output)
    failing = results["gate"]["failing"]
    if failing:
        worst = ", ".join(f"{k} {100 * v:.1f}%" for k, v in sorted(failing.items(), key=lambda kv: -kv[1]))
        raise EvalError(
            f"error share above max_error_share {100 * cfg.max_error_share:.1f}% in {worst} (by reason: "
            f"{results['errors_by_reason']}); outputs written to {output}"
        )
    return life.done(outputs, _summary(results), samples=results["totals"]["samples"])


def sampling_report(cfg: EvalConfig) -> dict[str, Any] | None:
    """Under ``preset=release``: the penalties the release's server applied to every request from the checkpoint's
    ``generation_config.json`` (``protocols.release_penalties``) and whether this engine sends them (a chat
    server's body takes them; the in-process engine has none). None under other presets."""
    if cfg.preset != "release":
        return None
    from paravt_core.engines.registry import KINDS
    from paravt_core.models import resolve_model_dir

    source = "the checkpoint's generation_config.json (the release's vLLM: generation_config=auto)"
    try:
        path = resolve_model_dir(cfg.model) / "generation_config.json"
    except (OSError, ValueError) as err:
        return {"source": f"unknown: {err}", "penalties": None, "sent": False}
    try:
        generation_config = json.loads(path.read_text())
    except FileNotFoundError:  # none: the server's defaults are vLLM's own, neutral
        generation_config = {}
    penalties = release_penalties(generation_config)
    sent = not KINDS[cfg.engine.kind].in_process
    return {"source": source, "penalties": penalties, "sent": sent or not penalties}


def server_report(cfg: EvalConfig) -> dict[str, Any] | None:
    """What the server (``engine.kind=openai``) reports about its context; None for the in-process engine."""
    if not getattr(cfg.engine, "base_url", ""):  # in process, or a server this stage launched
        return None
    from .server import served_context

    return served_context(cfg.engine.base_url, cfg.engine.served_model or cfg.model)


def _outputs(output: str) -> dict[str, str]:
    outputs = {name: storage.join(output, name) for name in ("results.json", "metrics.json", "report.html")}
    outputs.update(eval=output, samples=storage.join(output, "samples"))
    return outputs


def _summary(results: dict[str, Any]) -> dict[str, Any]:
    """The stage's numbers: totals and each protocol's benchmark headlines."""
    summary = {f"total.{k}": v for k, v in results["totals"].items()}
    for protocol, benches in results["protocols"].items():
        summary.update({f"{protocol}.{b}.{m['headline']}": m.get(m["headline"]) for b, m in benches.items()})
    return summary


def _lines(cfg: EvalConfig, samples: dict[str, list[registry.Sample]], logs: dict) -> EvalProgress:
    totals: Counter[str] = Counter()
    done: Counter[str] = Counter()
    for (_, bench), log in logs.items():
        totals[bench] += len(samples[bench])
        done[bench] += len({s.id for s in samples[bench]} & log.done)
    return EvalProgress(totals, done, cfg.tracking.log_every, cfg.tracking.progress_every_s)


def _evaluate(
    cfg: EvalConfig,
    samples: dict[str, list[registry.Sample]],
    run_root: str,
    work: str,
    engine: Any,
    processor: Any,
    judge: Any,
) -> dict[str, dict[str, list[dict]]]:
    store = RecordStore(run_root, work, cfg.runner.upload_every_s)
    owned = None  # a server this stage launched (a kind that launches, without base_url): stopped at the end
    if engine is None:
        os.makedirs(work, exist_ok=True)
        engine, processor = build_engine(cfg)
        owned = getattr(engine, "server", None)
    if judge is None:
        judge = build_judge(cfg)
    sampling = sampling_report(cfg)
    if sampling and sampling["penalties"] and hasattr(engine, "extra_body"):  # a chat server's request body
        engine.extra_body.update(sampling["penalties"])
    opts = RunOptions(
        concurrency=cfg.runner.concurrency, retries=cfg.runner.retries, backoff_s=cfg.runner.backoff_s,
        video_urls=_video_urls(cfg),
    )  # fmt: skip
    base = preset_agent(cfg.preset, cfg.agent)
    records: dict[str, dict[str, list[dict]]] = {}
    try:
        logs = {(p, b): store.open(p, b) for p in cfg.protocols for b in samples}
        total = sum(len(samples[b]) for _, b in logs)
        already = sum(len({s.id for s in samples[b]} & log.done) for (_, b), log in logs.items())
        columns = (
            TextColumn("eval"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("samples"),
            TimeRemainingColumn(),
        )
        # pod logs (stderr not a terminal): plain lines per benchmark instead of the live bar
        lines = None if is_terminal() else _lines(cfg, samples, logs)
        with Progress(*columns, console=console, disable=lines is not None) as bar:
            task = bar.add_task("eval", total=total, completed=already)

            def done(record: dict) -> None:
                bar.advance(task)
                if lines is not None:
                    lines.update(record)
                store.maybe_upload()

            async def all_runs() -> None:  # every benchmark and protocol at once, one concurrency limit
                gate = asyncio.Semaphore(opts.concurrency)
                await asyncio.gather(
                    *(run_samples(samples[bench], protocol, registry.get(bench), engine, base, log, opts,
                                  processor=processor, judge=judge, on_done=done, gate=gate, preset=cfg.preset)
                      for (protocol, bench), log in logs.items())
                )  # fmt: skip

            asyncio.run(all_runs())
        for (protocol, bench), log in logs.items():
            wanted = {s.id for s in samples[bench]}
            records.setdefault(protocol, {})[bench] = [r for r in log.records if r["id"] in wanted]
    except (RecordError, FormatError) as err:
        raise EvalError(str(err)) from None
    finally:
        store.close()
        if owned is not None:
            owned.stop()
    return records
