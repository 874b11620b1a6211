"""``paravt agent run``: one episode on one video, the whole trajectory printed with timings.

Examples::

    paravt tiny-model /tmp/tiny && paravt synth /tmp/synth --videos 1
    paravt agent run --model /tmp/tiny --video /tmp/synth/.../clip.mp4 --question "Which shape appears?"
    # drive the main agent with scripted replies (sub-agents stay real) to see the tool machinery:
    paravt agent run --model /tmp/tiny --video clip.mp4 --question "..." --script replies.json
    # any OpenAI-compatible server (processor loaded from --model), or an SGLang server:
    paravt agent run --engine openai --base-url http://127.0.0.1:8000/v1 --served-model ParaVT-8B --model /ckpt ...
    paravt agent run --engine sglang --base-url http://127.0.0.1:30000 --model /ckpt ...
    paravt agent run --engine vllm --base-url http://127.0.0.1:8000 --model /ckpt ...

``--temperature`` sets the sub-agents' temperature too unless ``subagent.temperature`` is given, so
``--temperature 0`` is the greedy evaluation protocol. ``--prompt-set`` takes a packaged name (default
``paravt-v1``) or a prompt-set YAML path / URI; the trajectory prints the set's checksum.

Knobs not covered by a flag go through dotted ``key=value`` arguments, as for the stages (``AgentConfig``
fields, e.g. ``subagent.see_question=true``; ``--set key=value`` still works), or a YAML file with ``--config``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from paravt_core.engines.registry import kinds_for

from .config import AgentConfig

if TYPE_CHECKING:
    from .episode import EpisodeResult

# flag -> AgentConfig dotted key
_FLAG_KEYS = {
    "max_turns": "max_turns",
    "max_parallel": "max_parallel",
    "overview_frames": "overview_frames",
    "max_new_tokens": "max_new_tokens",
    "temperature": "temperature",
    "seed": "seed",
    "prompt_set": "prompt_set",
    "prompt_mode": "prompt_mode",
    "tool_mode": "tool_mode",
    "forced_answer": "forced_answer",
    "max_pixels": "max_pixels",
    "min_pixels": "min_pixels",
    "engine_timeout": "engine_timeout_s",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``paravt agent run``."""
    parser.add_argument(
        "--model",
        required=True,
        help="model URI (local dir, s3:// prefix or hub id); "
        "for a server engine only its processor is loaded",
    )
    parser.add_argument("--video", required=True, help="video file or s3:// URI")
    parser.add_argument("--question", required=True)
    kinds = [kind.name for kind in kinds_for("agent")]
    parser.add_argument(
        "--engine", choices=kinds, default="transformers", help="engines/kinds/: " + ", ".join(kinds)
    )
    parser.add_argument(
        "--base-url",
        default=None,
        help="server URL for --engine openai/vllm/sglang "
        "(sglang or vllm without it: launch a server for --model, sglang on --port and on a GPU only; vllm on "
        "port 8000, with this Python's vllm)",
    )
    parser.add_argument("--port", type=int, default=30000, help="port of a launched SGLang server")
    parser.add_argument("--served-model", default=None, help="model name on an openai / vllm server")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default=None, help="e.g. bfloat16 (default: the checkpoint's)")
    parser.add_argument("--max-turns", type=int, default=None)
    parser.add_argument("--max-parallel", type=int, default=None)
    parser.add_argument("--overview-frames", type=int, default=None, help="K overview frames")
    parser.add_argument("--max-new-tokens", type=int, default=None)
    parser.add_argument(
        "--temperature", type=float, default=None, help="main agent and (unless set apart) sub-agents"
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--prompt-set", default=None, help="prompt set: packaged name (default paravt-v1) or YAML path/URI"
    )
    parser.add_argument(
        "--prompt-mode", choices=["agentic_general", "agentic_minimal", "direct", "reasoning"], default=None
    )
    parser.add_argument("--tool-mode", choices=["subagent", "crop_frames"], default=None)
    parser.add_argument("--forced-answer", choices=["mcq", "tvg"], default=None)
    parser.add_argument("--max-pixels", type=int, default=None)
    parser.add_argument("--min-pixels", type=int, default=None)
    parser.add_argument("--engine-timeout", type=float, default=None, help="seconds per generation call")
    parser.add_argument("--think-prefix", action="store_true", help="force each turn to start with <think>")
    parser.add_argument("--see-question", action="store_true", help="sub-agents also get the question")
    parser.add_argument("--script", default=None, help="JSON list of scripted main-agent replies")
    parser.add_argument("--config", default=None, help="AgentConfig YAML")
    parser.add_argument(
        "settings",
        nargs="*",
        metavar="KEY=VALUE",
        help="dotted AgentConfig overrides, as for the stages (e.g. subagent.see_question=true)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="deprecated: KEY=VALUE",
    )
    parser.add_argument("--json", dest="json_out", default=None, help="also write the trajectory as JSON")


def build_config(args: argparse.Namespace) -> AgentConfig:
    from paravt_core.config import load_config

    overrides = []
    for flag, key in _FLAG_KEYS.items():
        value = getattr(args, flag, None)
        if value is not None:
            overrides.append(f"{key}={value}")
    if args.think_prefix:
        overrides.append("think_prefix=true")
    if args.see_question:
        overrides.append("subagent.see_question=true")
    settings = list(getattr(args, "settings", []) or [])
    return load_config(AgentConfig, args.config, overrides + list(args.overrides) + settings)


def engine_section(args: argparse.Namespace) -> Any:
    """The engine config the flags describe (one kind's config class, ``engines/kinds/``)."""
    from pydantic import TypeAdapter

    from paravt_core.engines.registry import engine_config

    fields: dict[str, Any] = {"kind": args.engine}
    if args.engine == "transformers":
        fields.update(device=args.device, dtype=args.dtype, max_batch=16)
    else:
        fields["base_url"] = args.base_url or ""
        if args.engine == "sglang":
            fields["port"] = args.port
        elif args.served_model:
            fields["served_model"] = args.served_model
    return TypeAdapter(engine_config("agent")).validate_python(fields)


def build_engine(args: argparse.Namespace, cfg: AgentConfig | None = None) -> tuple[Any, Any]:
    """(engine, processor) for the chosen backend (``engines.registry``)."""
    from paravt_core.engines.registry import KINDS, BuildContext, build

    section = engine_section(args)
    if KINDS[section.kind].needs_url(section):
        raise SystemExit(f"--engine {section.kind} needs --base-url")
    cfg = cfg or AgentConfig()
    context = BuildContext(
        stage="agent",
        model=args.model,
        purpose="model",
        pixels=cfg.frames.processor_pixels(cfg),  # a launched server makes the encoder's pixels
        seeded=cfg.seed is not None,  # SGLang applies seeds only with deterministic inference
    )
    engine = build(section, context)
    processor = engine.processor
    if args.script:
        from paravt_core.engines.scripted import RoutedEngine, ScriptedEngine

        replies = read_script(args.script)
        engine = RoutedEngine(ScriptedEngine(processor, replies), engine)
    return engine, processor


def read_script(path: str) -> list[str]:
    """The scripted main-agent replies: a JSON list of strings (a usage mistake otherwise, exit status 2)."""
    from paravt_core.cli_errors import UsageError

    try:
        replies = json.loads(Path(path).read_text())
    except OSError as err:
        raise UsageError(f"--script {path}: {err.strerror or err}") from None
    except ValueError as err:
        raise UsageError(f"--script {path}: not JSON ({err})") from None
    if not isinstance(replies, list) or not all(isinstance(r, str) for r in replies):
        raise UsageError(f"--script {path}: expected a JSON list of strings (the main agent's replies)")
    return replies


def check_inputs(args: argparse.Namespace) -> None:
    """A local video or model that is not there is a usage mistake found now, not after the model loaded."""
    import os

    from paravt_core.cli_errors import UsageError, check_model_dir

    if "://" not in args.video and not os.path.isfile(args.video):
        raise UsageError(f"--video {args.video}: no such file")
    check_model_dir("--model ", args.model)


def main(args: argparse.Namespace) -> int:
    from paravt_core.config import ConfigError

    console = Console()
    try:
        cfg = build_config(args)
        cfg.bind_prompt_set()
    except ValueError as err:  # the CLI prints it as one line on stderr, exit status 2
        raise err if isinstance(err, ConfigError) else ConfigError(str(err)) from None
    if args.script:
        read_script(args.script)  # before the model is loaded
    check_inputs(args)
    from .episode import arun_episode  # heavy (torch): after the config is known to be good

    with console.status("loading the model"):
        engine, processor = build_engine(args, cfg)
    row = {"video": args.video, "question": args.question, "id": Path(args.video).stem}
    try:
        with console.status("running the episode"):
            result = asyncio.run(arun_episode(row, engine, cfg, processor=processor))
    finally:
        server = getattr(engine, "server", None) or getattr(getattr(engine, "subagent", None), "server", None)
        if server is not None:  # a server this command launched
            server.stop()
    print_trajectory(result, cfg, console)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result.to_dict(), indent=2))
        console.print(f"trajectory written to {args.json_out}")
    return (
        1
        if result.finish_reason in ("video_error", "engine_error", "engine_refused", "engine_timeout")
        else 0
    )


def _clip(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else text[:limit] + f" … [{len(text) - limit} more chars]"


def print_trajectory(result: EpisodeResult, cfg: AgentConfig, console: Console | None = None) -> None:
    console = console or Console()
    t = result.timings
    console.rule(f"[bold]episode {result.row_id or ''}")
    console.print(Text(f"video: {result.video}"))
    console.print(Text(f"question: {result.question}"))
    console.print(Text(f"prompt set: {result.prompt_set} ({result.prompt_set_checksum})"))
    if result.nframes:
        h, w = result.overview_size or (0, 0)
        stamps = ", ".join(f"{s:.1f}" for s in result.overview_timestamps[:12])
        more = " …" if len(result.overview_timestamps) > 12 else ""
        console.print(
            f"overview: {result.nframes} frames of {w}x{h} px at [{stamps}{more}] s "
            f"(decode {t.get('overview_s', 0):.2f} s, encode {t.get('encode_s', 0):.2f} s)"
        )
    main = result.main
    if main is not None and main.segments:
        console.print(f"prompt: {len(main.segments[0])} tokens, {len(main.segments[0].images)} images")
    for turn in result.turns:
        title = f"turn {turn.turn} · {turn.tokens} tokens · {turn.finish_reason} · {turn.generation_s:.2f} s"
        console.print(Panel(Text(_clip(turn.text)), title=title, title_align="left", expand=True))
        if not turn.calls:
            continue
        table = Table(title=f"tool calls of turn {turn.turn} ({turn.tools_s:.2f} s)", show_lines=True)
        for col in ("#", "call", "window", "frames", "latency", "result"):
            table.add_column(col, overflow="fold")
        for call in turn.calls:
            args = json.dumps(call.arguments) if call.arguments is not None else call.raw.strip()[:80]
            window = f"{call.window[0]:.1f}–{call.window[1]:.1f} s" if call.window else "-"
            status = Text(call.report or "") if call.ok else Text(call.error or "failed", style="red")
            if call.ok and call.truncated:
                status.append(" (truncated)", style="yellow")
            table.add_row(
                str(call.index),
                Text(f"{call.name or '?'} {args}"),
                window,
                str(call.frames or "-"),
                f"{call.latency_s:.2f} s" if call.executed else "-",
                status,
            )
        console.print(table)
    counts = result.counts()
    console.rule("[bold]result")
    console.print(
        Text.assemble("answer: ", (repr(result.answer), "bold"), f"    finish: {result.finish_reason}")
    )
    if result.error:
        console.print(Text.assemble(("error: ", "red"), result.error))
    console.print(
        f"tool rounds {result.tool_rounds}/{cfg.max_turns} · calls {counts['calls_total']} "
        f"(executed {counts['calls_executed']}, ok {counts['calls_succeeded']}, "
        f"failed {counts['calls_failed']}, rejected {counts['calls_rejected']}) · "
        f"main trace {len(main) if main else 0} tokens ({sum(main.loss_mask) if main else 0} trained) · "
        f"total {t.get('total_s', 0):.2f} s"
    )


def cli(argv: list[str] | None = None) -> int:
    """Stand-alone entry (``python -m paravt_core.agent.run_cli``), same arguments as ``paravt agent run``."""
    parser = argparse.ArgumentParser(prog="paravt agent run", description=__doc__)
    add_arguments(parser)
    return main(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(cli())
