"""``paravt`` command line: one subcommand per stage plus tools (synth, tiny-model, pipeline, agent)."""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from paravt_core.config import ConfigError
from paravt_core.config_base import StrictModel

# Smallest synthetic dataset: one video per sentinel bucket, two events of >= 1 s with gaps per video.
MIN_SYNTH_VIDEOS = 4
MIN_SYNTH_SECONDS = 5.0


class UsageError(Exception):
    """A bad argument found after parsing (e.g. an unknown pipeline name): one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``paravt synth: error: ... (see paravt synth --help)``, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _int_at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    return parse


def _seconds_at_least(low: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
        if not math.isfinite(value) or value < low:
            raise argparse.ArgumentTypeError(f"must be a finite number >= {low:g}, got {text}")
        return value

    return parse


def _stage_config(stage: str, args: argparse.Namespace) -> StrictModel:
    """The stage's typed config from ``--config`` and the overrides; config errors before heavy imports."""
    from paravt_core.config import load_config, stage_config

    if args.config is not None and not os.path.isfile(args.config):
        raise UsageError(f"config file not found: {args.config}")
    return load_config(stage_config(stage), args.config, args.overrides)


def _cmd_stage(args: argparse.Namespace) -> int:
    """Every stage verb: its typed config, then ``paravt_core.<stage>.stage.run``."""
    cfg = _stage_config(args.command, args)  # config errors before the stage's heavy imports
    run = importlib.import_module(f"paravt_core.{args.command}.stage").run
    result = run(cfg)
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun only rank 0 prints
        print(result.to_json())
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    if args.shard:
        args.overrides.append(f"shard={args.shard}")
    if args.merge:
        args.overrides.append("merge=true")
    return _cmd_stage(args)


def _cmd_synth(args: argparse.Namespace) -> int:
    from paravt_core.synth import synthesize

    result = synthesize(args.out_dir, videos=args.videos, seconds=args.seconds, seed=args.seed)
    print(result.summary())
    return 0


def _cmd_tiny_model(args: argparse.Namespace) -> int:
    from paravt_core.models import build_tiny_model

    path = build_tiny_model(args.out_dir, seed=args.seed)
    print(path)
    return 0


def _cmd_pipeline_compile(args: argparse.Namespace) -> int:
    from pipelines.compile import compile_pipeline, pipelines

    if len(args.name_and_out) > 2:
        raise UsageError("expected [NAME] OUT.yaml")
    name, out = args.name_and_out if len(args.name_and_out) == 2 else ("train", args.name_and_out[0])
    if name not in pipelines():
        raise UsageError(f"unknown pipeline {name!r}; known: {', '.join(sorted(pipelines()))}")
    print(compile_pipeline(name, out))
    return 0


def _connection(args: argparse.Namespace):
    from pipelines.cluster import Connection

    if not args.host:
        raise UsageError("no KFP host: pass --host or set KF_PIPELINES_ENDPOINT")
    return Connection(
        host=args.host, namespace=args.namespace, token_env=args.token_env, ui_host=args.ui_host
    )


def _cmd_pipeline_submit(args: argparse.Namespace) -> int:
    from pipelines.cluster import load_parameters, submit

    url = submit(
        _connection(args),
        args.pipeline,
        experiment=args.experiment,
        run_name=args.run_name or f"{args.pipeline.removesuffix('.yaml')}",
        params=load_parameters(args.params),
        pipeline_root=args.pipeline_root,
        service_account=args.service_account,
        strict=args.strict,
    )
    print(url)
    return 0


def _cmd_pipeline_schedule(args: argparse.Namespace) -> int:
    from pipelines.cluster import load_parameters, schedule, set_schedule_enabled

    conn = _connection(args)
    if args.schedule_command in ("enable", "disable"):
        set_schedule_enabled(conn, args.recurring_run_id, args.schedule_command == "enable")
        print(f"recurring run {args.recurring_run_id}: {args.schedule_command}d")
        return 0
    recurring_id = schedule(
        conn,
        args.pipeline,
        experiment=args.experiment,
        name=args.name,
        cron=args.cron,
        params=load_parameters(args.params),
        enabled=not args.disabled,
        pipeline_root=args.pipeline_root,
        service_account=args.service_account,
        exist_ok=args.exist_ok,
        strict=args.strict,
    )
    print(conn.recurring_run_url(recurring_id))
    return 0


def _cmd_pipeline_retry(args: argparse.Namespace) -> int:
    from pipelines.cluster import retry

    print(retry(_connection(args), args.run_id))
    return 0


def _cmd_pipeline_status(args: argparse.Namespace) -> int:
    from pipelines.cluster import status

    print(status(_connection(args), args.run_id).render())
    return 0


def _add_connection(p: argparse.ArgumentParser) -> None:
    import os

    g = p.add_argument_group("KFP connection")
    g.add_argument(
        "--host",
        default=os.environ.get("KF_PIPELINES_ENDPOINT", ""),
        help="KFP API endpoint, e.g. https://kubeflow.example/pipeline (default: $KF_PIPELINES_ENDPOINT)",
    )
    g.add_argument("--namespace", default="kubeflow", help="profile namespace (default: kubeflow)")
    g.add_argument(
        "--token-env",
        default="KFP_TOKEN",
        help="environment variable holding the bearer token (default: KFP_TOKEN; unset = no auth header)",
    )
    g.add_argument("--ui-host", default="", help="base URL of the KFP UI for printed links (default: --host)")


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("pipeline", help="pipeline name (train, nightly) compiled on the fly, or a compiled YAML")
    p.add_argument("--experiment", default="paravt", help="experiment, created if missing (default: paravt)")
    p.add_argument("--params", default=None, help="YAML mapping of pipeline parameter -> value")
    p.add_argument(
        "--pipeline-root", default=None, help="artifact root, e.g. s3://bucket/kfp (default: server's)"
    )
    p.add_argument("--service-account", default=None, help="Kubernetes service account of the run's pods")
    p.add_argument("--strict", action="store_true", help="refuse images not pinned by digest (@sha256:)")


def _cmd_demo(args: argparse.Namespace) -> int:
    from pipelines.local import demo

    demo(args.out_dir, videos=args.videos, seconds=args.seconds)
    return 0


def _cmd_agent_run(args: argparse.Namespace) -> int:
    from paravt_core.agent.run_cli import main as agent_main

    return agent_main(args)


def _add_stage(
    sub: argparse._SubParsersAction, name: str, fn: Callable, help_text: str
) -> argparse.ArgumentParser:
    from paravt_core.config import describe_config, stage_config

    fields = "\n".join(f"  {line}" for line in describe_config(stage_config(name)))
    p = sub.add_parser(
        name,
        help=help_text,
        description=help_text,
        epilog=f"config fields (YAML keys or dotted overrides) and their defaults:\n{fields}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", default=None, help="YAML config file")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. extract.workers=4")
    p.set_defaults(fn=fn)
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="paravt", description=__doc__)
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

    videos_help = f"number of videos (>= {MIN_SYNTH_VIDEOS}: one per sentinel bucket; default: %(default)s)"
    seconds_help = f"length of each video in seconds (>= {MIN_SYNTH_SECONDS:g}; default: %(default)s)"
    p = sub.add_parser("synth", help="write synthetic ParaVT data (videos, zips, parquets)")
    p.add_argument("out_dir", help="local directory to write (empty, or an earlier `paravt synth` output)")
    p.add_argument("--videos", type=_int_at_least(MIN_SYNTH_VIDEOS), default=8, help=videos_help)
    p.add_argument("--seconds", type=_seconds_at_least(MIN_SYNTH_SECONDS), default=12.0, help=seconds_help)
    p.add_argument("--seed", type=_int_at_least(0), default=0, help="random seed (default: %(default)s)")
    p.set_defaults(fn=_cmd_synth)

    p = sub.add_parser("tiny-model", help="build the tiny Qwen3-VL test/demo model")
    p.add_argument("out_dir")
    p.add_argument("--seed", type=_int_at_least(0), default=0, help="random seed (default: %(default)s)")
    p.set_defaults(fn=_cmd_tiny_model)

    p = sub.add_parser("demo", help="synthetic data + tiny model + the pipeline through kfp.local")
    p.add_argument("--out-dir", default="demo-out")
    p.add_argument("--videos", type=_int_at_least(MIN_SYNTH_VIDEOS), default=8, help=videos_help)
    p.add_argument("--seconds", type=_seconds_at_least(MIN_SYNTH_SECONDS), default=12.0, help=seconds_help)
    p.set_defaults(fn=_cmd_demo)

    p = sub.add_parser("pipeline", help="Kubeflow pipelines")
    psub = p.add_subparsers(dest="pipeline_command", required=True)
    pc = psub.add_parser(
        "compile", help="compile a pipeline to KFP IR YAML: compile [train|nightly] OUT.yaml"
    )
    pc.add_argument(
        "name_and_out", nargs="+", metavar="[NAME] OUT", help="pipeline name (default: train), output"
    )
    pc.set_defaults(fn=_cmd_pipeline_compile)

    ps = psub.add_parser("submit", help="start one run on a KFP server and print its URL")
    _add_run_options(ps)
    ps.add_argument("--run-name", default=None, help="run name shown in the UI (default: the pipeline)")
    _add_connection(ps)
    ps.set_defaults(fn=_cmd_pipeline_submit)

    pr = psub.add_parser("schedule", help="recurring runs: create, enable, disable")
    prsub = pr.add_subparsers(dest="schedule_command", required=True)
    prc = prsub.add_parser("create", help="create a recurring run (one at a time, no catch-up)")
    _add_run_options(prc)
    prc.add_argument("--name", required=True, help="recurring run name (unique in the experiment)")
    prc.add_argument(
        "--cron", default="0 0 2 * * *", help="6-field cron, seconds first (default: 0 0 2 * * *)"
    )
    prc.add_argument("--disabled", action="store_true", help="create it paused")
    prc.add_argument(
        "--exist-ok", action="store_true", help="a recurring run of that name already there is success"
    )
    _add_connection(prc)
    prc.set_defaults(fn=_cmd_pipeline_schedule)
    for verb in ("enable", "disable"):
        pe = prsub.add_parser(verb, help=f"{verb} a recurring run")
        pe.add_argument("recurring_run_id")
        _add_connection(pe)
        pe.set_defaults(fn=_cmd_pipeline_schedule)

    prt = psub.add_parser("retry", help="retry a failed run (its stages resume from their checkpoints)")
    prt.add_argument("run_id")
    _add_connection(prt)
    prt.set_defaults(fn=_cmd_pipeline_retry)

    pst = psub.add_parser("status", help="state of a run and of each of its tasks")
    pst.add_argument("run_id")
    _add_connection(pst)
    pst.set_defaults(fn=_cmd_pipeline_status)

    p = sub.add_parser("agent", help="run the ParaVT agent")
    asub = p.add_subparsers(dest="agent_command", required=True)
    ar = asub.add_parser("run", help="run one episode and print the trajectory")
    try:
        from paravt_core.agent.run_cli import add_arguments
    except ImportError:  # agent package not installed in this image
        add_arguments = None
    if add_arguments is not None:
        add_arguments(ar)
    ar.set_defaults(fn=_cmd_agent_run)
    return parser


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors that carry a complete message for the user: printed without a traceback.

    Only the classes of modules already imported: an error cannot come from a module that was never
    loaded, and importing them all (the eval stage imports torch) would make the error path of a
    light command heavy (the nightly scheduler Job: ~800 MB under a 1 GiB limit)."""
    where = [
        ("paravt_core.data.validate", "DataError"),
        ("paravt_core.engines.base", "EngineError"),
        ("paravt_core.eval.stage", "EvalError"),
        ("paravt_core.video.errors", "VideoError"),
        ("paravt_core.sft.data", "SftDataError"),
        ("paravt_core.sft.trainer", "SftError"),
    ]
    loaded = tuple(getattr(sys.modules[m], name) for m, name in where if m in sys.modules)
    return (*loaded, FileNotFoundError)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    except (UsageError, FileExistsError, NotADirectoryError) as err:  # a bad argument found while running
        print(f"paravt {args.command}: error: {err}", file=sys.stderr)
        return 2
    except Exception as err:
        if isinstance(err, _user_errors()):
            print(f"paravt {args.command}: {err}", file=sys.stderr)
            return 1
        if args.command == "pipeline":
            return _pipeline_error(err)
        raise


def _pipeline_error(err: Exception) -> int:
    """KFP API and connection failures as one line; anything else is a bug and keeps its traceback."""
    import urllib3
    from kfp_server_api.exceptions import ApiException

    from pipelines.cluster import ClusterError, api_error_message

    if isinstance(err, ClusterError):
        print(f"paravt pipeline: {err}", file=sys.stderr)
    elif isinstance(err, ApiException | urllib3.exceptions.HTTPError):
        print(f"paravt pipeline: {api_error_message(err)}", file=sys.stderr)
    else:
        raise err
    return 1


if __name__ == "__main__":
    sys.exit(main())
