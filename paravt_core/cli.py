"""``paravt`` command line: one subcommand per stage plus tools (synth, tiny-model, pipeline, agent)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

# Only the standard library above and in cli_args, cli_errors and user_errors: until main()'s try is entered,
# Ctrl-C would end the process with the signal (status -2 in Python, no message) instead of the one line and
# status 130.
from paravt_core.cli_args import (
    MIN_SYNTH_SECONDS,
    MIN_SYNTH_VIDEOS,
    SECONDS_HELP,
    VIDEOS_HELP,
    int_at_least,
    seconds_at_least,
)
from paravt_core.cli_errors import INTERRUPTED, UsageError, classify, debug_enabled

if TYPE_CHECKING:
    from paravt_core.config_base import StrictModel

# Verbs of packages above paravt_core, which paravt_core must not import (``paravt demo`` and ``paravt pipeline``
# import kfp): each module is found by name when its package is importable and adds its verbs itself. A lookup,
# not a pyproject entry point, so that a source checkout or an editable install needs no reinstall.
PLUGINS = ("pipelines.cli",)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``paravt synth: error: ... (see paravt synth --help)``, exit 2."""

    epilog_fn: Callable[[], str] | None = None  # built only when help is printed (it reads every field)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def format_help(self) -> str:
        if self.epilog_fn is not None:
            self.epilog, self.epilog_fn = self.epilog_fn(), None
        return super().format_help()


def _stage_config(stage: str, args: argparse.Namespace) -> StrictModel:
    """The stage's typed config from ``--config`` and the overrides; config errors before heavy imports."""
    from paravt_core.config import load_config, stage_config

    if args.config is not None and not os.path.isfile(args.config):
        raise UsageError(f"config file not found: {args.config}")
    return load_config(stage_config(stage), args.config, args.overrides)


def _cmd_stage(args: argparse.Namespace) -> int:
    """Every stage verb: its typed config, the pre-flight checks, then ``paravt_core.<stage>.stage.run``."""
    from paravt_core.cli_errors import new_local_dirs, preflight, prune_unused, tidied_output_line

    cfg = _stage_config(args.command, args)  # config errors before the stage's heavy imports
    args.stage_cfg = cfg  # for the resume hint after Ctrl-C
    created = new_local_dirs(cfg)  # before anything is written: what a failed run may tidy away
    lead = int(os.environ.get("RANK", "0")) == 0  # under torchrun only rank 0 prints
    try:
        preflight(args.command, cfg)  # device, output writable and not another stage's result
        run = importlib.import_module(f"paravt_core.{args.command}.stage").run
        result = run(cfg)
    except BaseException:
        line = tidied_output_line(args.command, getattr(cfg, "output", ""), prune_unused(created))
        if line and lead:
            print(line, file=sys.stderr, flush=True)
        raise
    if lead:
        print(result.to_json())
    return 0


def _cmd_rescore(args: argparse.Namespace) -> int:
    """``paravt eval rescore OUTPUT [--reader release|robust]`` (``paravt_core.eval.rescore``)."""
    if len(args.overrides) != 2:
        raise UsageError("usage: paravt eval rescore <eval output> [--reader release|robust]")
    from paravt_core.eval.rescore import RescoreError, print_readers, rescore

    try:
        results = rescore(args.overrides[1], args.reader)
    except RescoreError as err:
        raise UsageError(str(err)) from None
    print_readers(results, f"{args.overrides[1].rstrip('/')}/rescored/{results['reader']}")
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    if args.overrides[:1] == ["rescore"]:
        return _cmd_rescore(args)
    if args.reader:
        raise UsageError("--reader belongs to paravt eval rescore (the eval stage's own is reader=...)")
    if args.list_benchmarks:
        from paravt_core.cli_help import list_benchmarks

        print(list_benchmarks())
        return 0
    if args.shard:
        from paravt_core.eval.records import RecordError, parse_shard

        try:
            parse_shard(args.shard)
        except RecordError as err:
            raise UsageError(f"--shard: {err}") from None
        args.overrides.append(f"shard={args.shard}")
    if args.merge:
        args.overrides.append("merge=true")
    return _cmd_stage(args)


_STAGES = ("data", "sft", "rl", "eval", "report")


def _cmd_config_show(args: argparse.Namespace) -> int:
    from paravt_core.cli_help import config_show
    from paravt_core.config import stage_config

    cfg = _stage_config(args.stage, args)
    print(config_show(stage_config(args.stage), cfg), end="")
    return 0


def _cmd_synth(args: argparse.Namespace) -> int:
    from paravt_core.synth import synthesize

    if args.eval_fixtures:
        from paravt_core.synth.eval_fixtures import MARKER, write_fixtures

        taken = os.path.isdir(args.out_dir) and os.listdir(args.out_dir)
        if taken and not os.path.exists(os.path.join(args.out_dir, MARKER)) and not args.force:
            raise UsageError(
                f"{args.out_dir} is not empty and holds no eval fixtures; use --force to write there"
            )
        write_fixtures(args.out_dir)
        print(f"eval fixtures of every benchmark in {args.out_dir}: use demo_data={args.out_dir}")
        return 0
    result = synthesize(
        args.out_dir, videos=args.videos, seconds=args.seconds, seed=args.seed, force=args.force
    )
    print(result.summary())
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    import json

    from paravt_core.plan.report import misfit, plan, render, stderr_progress

    if not os.path.isfile(args.config):
        raise UsageError(f"config file not found: {args.config}")
    result = plan(
        args.config,
        args.gpus,
        args.gpu,
        model=args.model,
        pack_length=args.pack_length,
        group_size=args.group_size,
        mem_fraction_static=args.mem_fraction_static,
        overrides=args.overrides,
        progress=stderr_progress,
    )
    for warning in result.get("warnings", []):
        print(f"paravt plan: {warning}", file=sys.stderr)
    print(json.dumps(result, indent=2) if args.json else render(result))
    problem = misfit(result)
    if problem is not None:
        print(f"paravt plan: {problem}", file=sys.stderr)
        return 1
    return 0


def _cmd_tiny_model(args: argparse.Namespace) -> int:
    from paravt_core.models import build_tiny_model

    path = build_tiny_model(args.out_dir, seed=args.seed, force=args.force)
    print(path)
    return 0


def _cmd_agent_run(args: argparse.Namespace) -> int:
    from paravt_core.agent.run_cli import main as agent_main

    return agent_main(args)


def _add_stage(
    sub: argparse._SubParsersAction, name: str, fn: Callable, help_text: str
) -> argparse.ArgumentParser:
    p = sub.add_parser(
        name, help=help_text, description=help_text, formatter_class=argparse.RawDescriptionHelpFormatter
    )

    def epilog() -> str:
        from paravt_core.cli_help import stage_epilog
        from paravt_core.config import stage_config

        return stage_epilog(name, stage_config(name))

    p.epilog_fn = epilog
    p.add_argument("--config", default=None, help="YAML config file (configs/<stage>/*.yaml)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides (fields below)")
    p.set_defaults(fn=fn)
    return p


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("paravt")
    except PackageNotFoundError:  # a source tree on PYTHONPATH without the installed metadata
        return "unknown"


def _add_plugin_verbs(sub: argparse._SubParsersAction) -> None:
    """The verbs of every importable module of ``PLUGINS`` (its ``add_verbs(sub)``), in that order."""
    for name in PLUGINS:
        try:
            plugin = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name.partition(".")[0]:  # the package is there and broken: say so
                raise
            continue  # an install of the core alone: no such verbs
        plugin.add_verbs(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="paravt", description=__doc__)
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of a failure (also PARAVT_DEBUG=1)"
    )
    parser.add_argument("--version", action="version", version=f"paravt {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    _add_stage(sub, "data", _cmd_stage, "download, extract, materialize, validate and audit the data")
    _add_stage(
        sub,
        "sft",
        _cmd_stage,
        "packed SFT of Qwen3-VL on the data stage's rows (torchrun --nproc-per-node N -m paravt_core.cli sft ...)",
    )
    _add_stage(sub, "rl", _cmd_stage, "PARA-GRPO: rollouts, rewards, learner, weight sync, checkpoints")
    _add_stage(
        sub, "report", _cmd_stage, "eval table, training curves and the nightly trend (HTML, Markdown, PNG)"
    )
    p = _add_stage(
        sub,
        "eval",
        _cmd_eval,
        "evaluate a model on the long-video benchmarks (with and without the tool); "
        "outputs: samples/<protocol>/<benchmark>.jsonl, results.json, metrics.json, report.html",
    )
    p.add_argument("--shard", default=None, metavar="I/N", help="evaluate shard I of N (0-based), e.g. 0/4")
    p.add_argument("--merge", action="store_true", help="merge complete shards into the final outputs")
    p.add_argument(
        "--list-benchmarks",
        action="store_true",
        help="list the benchmarks (name, source, answer types, published number) and exit",
    )
    p.add_argument(
        "--reader",
        choices=("release", "robust"),
        default=None,
        help="paravt eval rescore <eval output>: re-score saved records offline with this headline reader",
    )

    p = sub.add_parser(
        "config",
        help="show a stage's resolved config with the description of every field",
        description="config show STAGE [--config FILE] [KEY=VALUE ...]: the config the stage would run, "
        "as YAML with a comment per field.",
    )
    csub = p.add_subparsers(dest="config_command", required=True)
    cs = csub.add_parser("show", help="print STAGE's resolved config (YAML, one comment per field)")
    # One sub-parser per stage: argparse cannot place positional overrides after --config otherwise.
    ssub = cs.add_subparsers(dest="stage", required=True, metavar="STAGE")
    for stage in _STAGES:
        sp = ssub.add_parser(stage, help=f"the {stage} stage's config")
        sp.add_argument("--config", default=None, help="YAML config file")
        sp.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides")
        sp.set_defaults(fn=_cmd_config_show)

    p = sub.add_parser(
        "synth",
        help="write synthetic ParaVT data (videos, zips, parquets)",
        description="Write synthetic ParaVT data: videos with known events, sentinel-path zips, SFT/RL/eval "
        "parquets and a ground-truth manifest. Example: paravt synth demo-out/synth --videos 8",
    )
    p.add_argument("out_dir", help="local directory to write (empty, or an earlier `paravt synth` output)")
    p.add_argument("--videos", type=int_at_least(MIN_SYNTH_VIDEOS), default=8, help=VIDEOS_HELP)
    p.add_argument("--seconds", type=seconds_at_least(MIN_SYNTH_SECONDS), default=12.0, help=SECONDS_HELP)
    p.add_argument("--seed", type=int_at_least(0), default=0, help="random seed (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="write into a non-empty directory that is not ours")
    p.add_argument(
        "--eval-fixtures",
        action="store_true",
        help="write fixture copies of every eval benchmark instead (the eval stage's demo_data directory)",
    )
    p.set_defaults(fn=_cmd_synth)

    p = sub.add_parser(
        "plan", help="capacity plan: per-rank peak memory of one real SFT / RL step (fake tensors), fit, time"
    )
    p.add_argument("--config", required=True, help="an SFT or RL recipe, e.g. configs/sft/qwen3vl_8b.yaml")
    p.add_argument(
        "--gpus",
        type=int_at_least(1),
        default=8,
        help="GPUs in all (default: %(default)s, the recipes' own; another count changes SFT's global batch "
        "and is warned about; RL needs 2: one serves, the rest learn)",
    )
    p.add_argument("--gpu", choices=["h100-80g"], default="h100-80g", help="GPU kind (default: %(default)s)")
    p.add_argument("--model", default=None, help="config.json path or hub id (default: shipped Qwen3-VL-8B)")
    p.add_argument("--pack-length", type=int_at_least(64), default=None, help="tokens per packed pass")
    p.add_argument("--group-size", type=int_at_least(2), default=None, help="RL rollouts per prompt")
    p.add_argument(
        "--mem-fraction-static",
        type=float,
        default=None,
        help="SGLang's (default: the recipe's engine setting)",
    )
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("overrides", nargs="*", help="dotted config overrides, key=value")
    p.set_defaults(fn=_cmd_plan)

    p = sub.add_parser(
        "tiny-model",
        help="build the tiny Qwen3-VL test/demo model",
        description="Build a randomly initialised Qwen3-VL of ~0.3M parameters (model, tokenizer, processor, "
        "chat template) for tests and the demo, on CPU in seconds. Example: paravt tiny-model demo-out/tiny-model",
    )
    p.add_argument("out_dir", help="directory to write (empty, or an earlier `paravt tiny-model` output)")
    p.add_argument("--seed", type=int_at_least(0), default=0, help="random seed (default: %(default)s)")
    p.add_argument(
        "--force",
        action="store_true",
        help="overwrite a non-empty directory that is not an earlier tiny model",
    )
    p.set_defaults(fn=_cmd_tiny_model)

    _add_plugin_verbs(sub)

    p = sub.add_parser("agent", help="run the ParaVT agent")
    asub = p.add_subparsers(dest="agent_command", required=True)
    try:
        from paravt_core.agent import run_cli
    except ImportError:  # agent package not installed in this image
        run_cli = None
    ar = asub.add_parser(
        "run",
        help="run one episode and print the trajectory",
        description=run_cli.__doc__ if run_cli is not None else None,  # the examples (--script too)
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments = run_cli.add_arguments if run_cli is not None else None
    if add_arguments is not None:
        add_arguments(ar)
    ar.set_defaults(fn=_cmd_agent_run)
    return parser


def _resume_hint(args: argparse.Namespace) -> str:
    """What rerunning the interrupted command does: the step training resumes from, or that finished work
    is kept (data: downloads and extracted archives; eval: every record written)."""
    cfg = getattr(args, "stage_cfg", None)
    if cfg is None:
        return "run the same command again"
    if args.command in ("sft", "rl"):
        from paravt_core import checkpoint

        try:
            latest = checkpoint.latest_complete(cfg.output)
        except Exception:  # an unreachable output: the hint stays generic
            latest = None
        if latest is None:
            return "no checkpoint was complete yet; run the same command again to start over"
        step = int(latest.rstrip("/").rsplit("_", 1)[1])
        return f"run the same command again to resume from step {step + 1} (checkpoint {latest})"
    if args.command in ("data", "eval"):
        return "run the same command again to resume (finished work is kept)"
    return "run the same command again"


def _forget_unhandled_interrupt() -> None:
    """CPython 3.11 (Python/pythonrun.c, run_eval_code_obj) marks a KeyboardInterrupt that leaves code run by
    ``exec``/``eval`` of a string (dataclasses, namedtuple and typing do that while modules import) as
    unhandled even when we catch it, and at exit the interpreter then kills itself with SIGINT (status -2, not
    our 130). Each string ``exec`` clears that mark first, so an empty one after the catch forgets it."""
    exec("None")  # noqa: S102 - a constant; the point is the interpreter's side effect described above


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = debug_enabled(argv)
    argv = [a for a in argv if a != "--debug"]  # accepted before or after the verb
    # The verb before parsing: Ctrl-C can land while the parser is built (it imports the config models).
    args = argparse.Namespace(command=next((a for a in argv if not a.startswith("-")), "").strip() or "")
    try:
        args = build_parser().parse_args(argv)
        return int(args.fn(args) or 0)
    except KeyboardInterrupt:
        if debug:
            raise
        prog = f"paravt {args.command}" if args.command else "paravt"
        print(f"{prog}: interrupted; {_resume_hint(args)}", file=sys.stderr)
        _forget_unhandled_interrupt()
        return INTERRUPTED
    except Exception as err:
        if debug:
            raise
        on_error = getattr(args, "on_error", None)  # a plug-in verb's own one-line report of its failures
        handled = on_error(err, args) if on_error is not None else None
        if handled is not None:
            return handled
        code, line = classify(err, args.command)
        print(line, file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
