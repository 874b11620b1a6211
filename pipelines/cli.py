"""``paravt demo`` and ``paravt pipeline ...``: the verbs that run Kubeflow pipelines, a plug-in of the CLI.

They live here, not in ``paravt_core.cli``, because they import kfp (lazily, per verb) and paravt_core never does:
``paravt_core.cli`` finds this module by name and calls ``add_verbs`` while it builds its parser.
"""

from __future__ import annotations

import argparse
import os
import sys

from paravt_core.cli_args import (
    MIN_SYNTH_SECONDS,
    MIN_SYNTH_VIDEOS,
    SECONDS_HELP,
    VIDEOS_HELP,
    int_at_least,
    seconds_at_least,
)
from paravt_core.cli_errors import UsageError


def _cmd_pipeline_compile(args: argparse.Namespace) -> int:
    from pipelines.compile import compile_pipeline, pipelines

    name, out = args.pipeline_name or "train", args.out
    if name not in pipelines():
        raise UsageError(f"unknown pipeline {name!r}; known: {', '.join(sorted(pipelines()))}")
    if args.pipeline_name is None and out in pipelines():
        raise UsageError(f"no output file: expected {out} OUT.yaml")
    if not out.endswith((".yaml", ".yml")):  # KFP writes platform-specific parts (k8s) only to YAML
        raise UsageError(
            f"OUT must end in .yaml (the KFP compiler writes Kubernetes settings only to YAML), got {out}"
        )
    print(compile_pipeline(name, out, sft_config=args.sft_config, rl_config=args.rl_config,
                           eval_config=args.eval_config))  # fmt: skip
    return 0


def _connection(args: argparse.Namespace):
    from pipelines.cluster import Connection

    if not args.host:
        raise UsageError("no KFP host: pass --host or set KF_PIPELINES_ENDPOINT")
    return Connection(
        host=args.host, namespace=args.namespace, token_env=args.token_env, ui_host=args.ui_host
    )


def _parameters(path: str | None) -> dict:
    from pipelines.cluster import load_parameters

    if path and not os.path.isfile(path):
        raise UsageError(f"--params: no such file: {path}")
    return load_parameters(path)


def _cmd_pipeline_submit(args: argparse.Namespace) -> int:
    from pipelines.cluster import submit

    url = submit(
        _connection(args),
        args.pipeline,
        experiment=args.experiment,
        run_name=args.run_name or f"{args.pipeline.removesuffix('.yaml')}",
        params=_parameters(args.params),
        pipeline_root=args.pipeline_root,
        service_account=args.service_account,
        strict=args.strict,
    )
    print(url)
    return 0


def _cmd_pipeline_schedule(args: argparse.Namespace) -> int:
    from pipelines.cluster import schedule, set_schedule_enabled

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
        params=_parameters(args.params),
        enabled=not args.disabled,
        pipeline_root=args.pipeline_root,
        service_account=args.service_account,
        exist_ok=args.exist_ok,
        sync=args.sync,
        strict=args.strict,
    )
    print(conn.recurring_run_url(recurring_id))
    return 0


def _cmd_pipeline_retry(args: argparse.Namespace) -> int:
    from pipelines.cluster import retry

    print(retry(_connection(args), args.run_id))
    return 0


def _cmd_pipeline_doctor(args: argparse.Namespace) -> int:
    from pipelines.doctor import doctor

    return doctor(args.namespace, args.kfp_namespace)


def _cmd_pipeline_status(args: argparse.Namespace) -> int:
    from pipelines.cluster import status

    print(status(_connection(args), args.run_id).render())
    return 0


def _add_connection(p: argparse.ArgumentParser) -> None:
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
    p.add_argument(
        "pipeline", help="pipeline name (train, nightly, ablations) compiled on the fly, or a compiled YAML"
    )
    p.add_argument("--experiment", default="paravt", help="experiment, created if missing (default: paravt)")
    p.add_argument("--params", default=None, help="YAML mapping of pipeline parameter -> value")
    p.add_argument(
        "--pipeline-root", default=None, help="artifact root, e.g. s3://bucket/kfp (default: server's)"
    )
    p.add_argument("--service-account", default=None, help="Kubernetes service account of the run's pods")
    p.add_argument("--strict", action="store_true", help="refuse images not pinned by digest (@sha256:)")


def _cmd_demo(args: argparse.Namespace) -> int:
    from pipelines.local import demo

    out = args.out_dir
    if os.path.isdir(out) and os.listdir(out) and not os.path.exists(os.path.join(out, "demo.log")):
        # as synth and tiny-model do: never write into someone's files or a stage's finished output
        raise UsageError(f"{out} is not empty and not an earlier `paravt demo` output; use a new directory")
    demo(args.out_dir, videos=args.videos, seconds=args.seconds)
    return 0


def add_verbs(sub: argparse._SubParsersAction) -> None:
    """Add ``demo`` and ``pipeline`` (with its sub-verbs) to the ``paravt`` parser's sub-commands."""
    p = sub.add_parser(
        "demo",
        help="synthetic data + tiny model + the pipeline through kfp.local",
        description="Write synthetic videos, build the tiny model, then run the train pipeline (data, SFT, "
        "RL, eval, report) with Kubeflow's local runner on CPU. One line per step; the runner's output "
        "goes to OUT_DIR/demo.log. Example: paravt demo --out-dir demo-out",
    )
    p.add_argument("--out-dir", default="demo-out", help="where everything goes (default: %(default)s)")
    p.add_argument("--videos", type=int_at_least(MIN_SYNTH_VIDEOS), default=8, help=VIDEOS_HELP)
    p.add_argument("--seconds", type=seconds_at_least(MIN_SYNTH_SECONDS), default=12.0, help=SECONDS_HELP)
    p.set_defaults(fn=_cmd_demo)

    p = sub.add_parser("pipeline", help="Kubeflow pipelines")
    p.set_defaults(on_error=pipeline_error)
    psub = p.add_subparsers(dest="pipeline_command", required=True)
    pc = psub.add_parser(
        "compile", help="compile a pipeline to KFP IR YAML: compile [train|nightly|ablations] OUT.yaml"
    )
    # Two positionals, the first optional: argparse's usage is then "[NAME] OUT.yaml", one pair (nargs="+"
    # advertised "[NAME] OUT [[NAME] OUT ...]", which the command refused).
    pc.add_argument("pipeline_name", nargs="?", metavar="NAME", help="pipeline name (default: train)")
    pc.add_argument("out", metavar="OUT.yaml", help="the compiled pipeline")
    for stage in ("sft", "rl"):
        pc.add_argument(
            f"--{stage}-config",
            metavar="YAML",
            help=f"{stage} config whose launch section shapes the DAG (launch.nodes > 1: a TrainJob step)",
        )
    pc.add_argument(
        "--eval-config",
        metavar="YAML",
        help="the default of eval_config_yaml (default: configs/eval/cluster.yaml, a vLLM server in the eval pod)",
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
    prc.add_argument(
        "--sync",
        action="store_true",
        help="keep the one of that name made from this pipeline, images and settings; else replace it",
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

    pdr = psub.add_parser(
        "doctor",
        help="read the cluster and say, one line each, what will not work (exit 1 when something blocks)",
        description=(
            "Reads the cluster with your kubeconfig (or the pod's account) and writes nothing. Checks: the "
            "CRDs and their versions (TrainJob with runtimePatches = Trainer v2.2+, or v2.1's "
            "podTemplateOverrides; PyTorchJob; Kueue; KFP's ScheduledWorkflow), the namespace's kfp-launcher "
            "ConfigMap, its Pod Security label (pod-security.kubernetes.io/enforce: IPC_LOCK, restricted), and "
            "Argo's workflow-controller-configmap workflowDefaults (Workflow TTL, retry policy). Each line is "
            "'blocks:', 'warning:' or 'ok:' with what to do; the exit code is 1 when a line blocks."
        ),
    )
    pdr.add_argument("--namespace", default="", help="where the pipelines run (default: the kube context's)")
    pdr.add_argument(
        "--kfp-namespace",
        default="kubeflow",
        help="where KFP and Argo's controller run (default: %(default)s)",
    )
    pdr.set_defaults(fn=_cmd_pipeline_doctor)


def pipeline_error(err: Exception, args: argparse.Namespace) -> int | None:
    """KFP API and connection failures of a ``paravt pipeline`` verb as one line (printed) and the exit status;
    None for anything else, which the CLI's own classification then reports."""
    import urllib3
    from kfp_server_api.exceptions import ApiException

    from pipelines.cluster import ClusterError, ClusterUsageError, api_error_message

    if isinstance(err, ClusterUsageError):
        print(f"paravt pipeline: error: {err}", file=sys.stderr)
        return 2
    if isinstance(err, ClusterError):
        print(f"paravt pipeline: {err}", file=sys.stderr)
    elif isinstance(err, ApiException | urllib3.exceptions.HTTPError):
        host = getattr(args, "host", "")  # doctor has no --host
        print(f"paravt pipeline: {api_error_message(err, host)}", file=sys.stderr)
    else:
        return None
    return 1
