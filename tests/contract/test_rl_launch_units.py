"""The RL launch plan (``paravt_core.rl.launch``) line by line: the commands, environments, ports, the plan's
text and error messages, each written out by hand from the module's rules (its docstring), plus ``main`` and
``wait_for_workers`` run in this process (the other tests reach them only through subprocesses)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from paravt_core.config import ConfigError, load_config
from paravt_core.rl.config import RlConfig
from paravt_core.rl.launch import plan
from tests.support.paths import ROOT
from tests.support.ports import free_port, free_port_run

RECIPE = ROOT / "configs" / "rl" / "paragrpo_8b.yaml"  # port 30000, metrics 30090, mem 0.85, bfloat16
MM = """'{"image":{"size":{"shortest_edge":784,"longest_edge":50176}}}'"""  # the recipe's 784 .. 50176 pixels


def _cfg(*overrides: str) -> RlConfig:
    return load_config(RlConfig, RECIPE, list(overrides))


def test_a_fleet_plan_written_out_in_full():
    """Two servers on GPUs 4,5 and 6,7 (TP 2 each, one replica), ports 30001 and 30002, the router on 30000
    with the recipe's 3 retries (4 attempts) and the policy asked for; the learner on GPUs 0-3."""
    cfg = _cfg(
        "engine.servers=2",
        "engine.gpus=[4,5,6,7]",
        "engine.weight_sync=disk",
        "engine.router_policy=cache_aware",
    )
    p = plan(cfg, "/tmp/rl.yaml", gpus=8, model_dir="/m", python="py")
    server = (
        "py -m sglang.launch_server --model-path /m --host 127.0.0.1 --port PORT --context-length 32768 "
        f"--tp-size 2 --base-gpu-id 0 --mem-fraction-static 0.85 --mm-process-config {MM} --dtype bfloat16 &"
    )
    assert p.describe() == "\n".join(
        [
            "CUDA_VISIBLE_DEVICES=4,5 " + server.replace("PORT", "30001"),
            "CUDA_VISIBLE_DEVICES=6,7 " + server.replace("PORT", "30002"),
            "py -m sglang_router.launch_router --host 127.0.0.1 --port 30000 --policy cache_aware "
            "--worker-urls http://127.0.0.1:30001 http://127.0.0.1:30002 --retry-max-retries 4 "
            "--health-check-interval-secs 5 --prometheus-host 127.0.0.1 --prometheus-port 30090 --log-level warn &",
            "CUDA_VISIBLE_DEVICES=0,1,2,3 py -m torch.distributed.run --standalone --nproc-per-node=4 "
            "-m paravt_core.cli rl --config /tmp/rl.yaml engine.base_url=http://127.0.0.1:30000 "
            "engine.router_metrics_url=http://127.0.0.1:30090/metrics "
            "'engine.worker_urls=[http://127.0.0.1:30001,http://127.0.0.1:30002]'",
        ]
    )
    assert p.server_command is None and p.server_env == {} and p.in_process is False
    assert p.base_url == "http://127.0.0.1:30000"


def test_a_fleet_on_a_cpu_machine_has_one_gpu_less_server_each_and_the_asked_learner_ranks():
    """``gpus=0``: each server is one TP rank with no pinning; the learner gets ``learner_procs`` ranks."""
    cfg = _cfg("engine.servers=2", "engine.gpus=[]", "engine.weight_sync=disk")
    p = plan(cfg, "/c.yaml", gpus=0, model_dir="/m", learner_procs=2, python="py")
    for cmd, env, _ in p.fleet:
        assert cmd[cmd.index("--tp-size") + 1] == "1" and "--dp-size" not in cmd and env == {}
    assert p.learner_env == {} and p.learner_command[:5] == [
        "py", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
    ]  # fmt: skip
    assert p.in_process is False


def test_discovery_passes_the_namespace_to_the_router():
    cfg = _cfg("engine.service_selector=[app=r]", "engine.service_namespace=ml", "engine.gpus=[]",
               "engine.weight_sync=disk")  # fmt: skip
    cmd = plan(cfg, "/c.yaml", gpus=8, python="py").router_command
    assert cmd[cmd.index("--service-discovery-namespace") + 1] == "ml"


def test_fleet_errors_in_full():
    with pytest.raises(ValueError) as err:
        plan(_cfg("engine.servers=2", "engine.gpus=[6,7]", "engine.weight_sync=disk"), "/c.yaml", gpus=8)
    assert str(err.value) == "model_dir: the local directory of cfg.model is needed to launch the servers"
    with pytest.raises(ConfigError) as err:
        plan(_cfg("engine.servers=2", "engine.gpus=[6,7]"), "/c.yaml", gpus=8, model_dir="/m")
    assert str(err.value) == (
        "a rollout fleet (engine.servers > 1) takes weight pushes from disk: engine.weight_sync=disk"
    )
    # Ports 30000 (router), 30001-30002 (servers): a metrics port among them would stop the router at start;
    # one past them is fine, and with discovery only the router's own port is taken.
    base = ("engine.servers=2", "engine.gpus=[6,7]", "engine.weight_sync=disk", "engine.port=30000")
    for taken in (30000, 30002):
        with pytest.raises(ConfigError) as err:
            plan(_cfg(*base, f"engine.router_metrics_port={taken}"), "/c.yaml", gpus=8, model_dir="/m")
        assert str(err.value) == (
            f"engine.router_metrics_port={taken} is one of the fleet's ports 30000-30002 "
            "(the router on engine.port, server i on engine.port+1+i)"
        )
    assert plan(_cfg(*base, "engine.router_metrics_port=30003"), "/c.yaml", gpus=8, model_dir="/m").fleet
    found = (
        "engine.service_selector=[app=r]",
        "engine.gpus=[]",
        "engine.weight_sync=disk",
        "engine.port=30000",
    )
    assert plan(
        _cfg(*found, "engine.router_metrics_port=30001"), "/c.yaml", gpus=8, python="py"
    ).router_command
    with pytest.raises(ConfigError, match="fleet's ports 30000-30000"):
        plan(_cfg(*found, "engine.router_metrics_port=30000"), "/c.yaml", gpus=8, python="py")


def test_one_server_plan_written_out_in_full():
    """One server on GPUs 4-7 as TP 2 x DP 2 (disk push) on port 31000; the learner on GPUs 0-3."""
    cfg = _cfg("engine.gpus=[4,5,6,7]", "engine.tp_size=2", "engine.weight_sync=disk", "engine.port=31000")
    p = plan(cfg, "/tmp/rl.yaml", gpus=8, model_dir="/m", python="py")
    assert p.describe() == (
        "CUDA_VISIBLE_DEVICES=4,5,6,7 py -m sglang.launch_server --model-path /m --host 127.0.0.1 --port 31000 "
        "--context-length 32768 --tp-size 2 --dp-size 2 --base-gpu-id 0 --mem-fraction-static 0.85 "
        f"--mm-process-config {MM} --dtype bfloat16 &\n"
        "CUDA_VISIBLE_DEVICES=0,1,2,3 py -m torch.distributed.run --standalone --nproc-per-node=4 "
        "-m paravt_core.cli rl --config /tmp/rl.yaml engine.base_url=http://127.0.0.1:31000"
    )
    assert p.in_process is False and p.overrides == ["engine.base_url=http://127.0.0.1:31000"]


def test_the_nccl_push_tells_the_learner_the_servers_tp_size():
    p = plan(_cfg("engine.gpus=[6,7]"), "/c.yaml", gpus=8, model_dir="/m", python="py")  # distributed, TP 2
    assert p.overrides == ["engine.base_url=http://127.0.0.1:30000", "engine.server_ranks=2"]
    cmd = p.server_command
    assert cmd[cmd.index("--tp-size") + 1] == "2" and "--dp-size" not in cmd


def test_a_vllm_server_the_stage_starts_keeps_its_gpus_from_the_learner():
    """``engine.kind=vllm`` without ``engine.base_url``: the stage itself launches the server (on learner rank
    0, pinned to ``engine.gpus``), so the plan starts no server but leaves those GPUs out of the learner's."""
    p = plan(_cfg("engine={kind: vllm, gpus: [6, 7]}"), "/c.yaml", gpus=8, python="py")
    assert p.server_command is None and p.overrides == []
    assert (
        p.learner_env == {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5"} and "--nproc-per-node=6" in p.learner_command
    )
    with pytest.raises(ConfigError, match="^engine.kind=vllm without engine.base_url: reserve its GPUs"):
        plan(_cfg("engine={kind: vllm}"), "/c.yaml", gpus=8, python="py")
    here = plan(_cfg("engine={kind: vllm}"), "/c.yaml", gpus=0, python="py")  # a CPU machine
    assert here.in_process is True and here.server_command is None


def test_no_server_leaves_every_gpu_to_the_learner_and_one_process_runs_here():
    """An in-process engine (the recipe's SGLang section replaced whole; its ``engine.gpus`` is no field of the
    in-process kind): nothing is reserved, the learner gets all 8."""
    with pytest.raises(ConfigError, match=r"^engine\.\w+ is a field of engine\.kind=sglang"):
        _cfg("engine.kind=transformers")  # the recipe's section keeps its SGLang fields
    p = plan(_cfg("engine={kind: transformers}"), "/c.yaml", gpus=8, python="py")
    assert p.learner_env == {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"} and p.server_command is None
    assert "--nproc-per-node=8" in p.learner_command and p.in_process is False
    one = plan(_cfg("engine={kind: transformers}"), "/c.yaml", gpus=0, python="py")
    assert one.in_process is True and one.learner_env == {}
    assert one.describe() == (
        "py -m torch.distributed.run --standalone --nproc-per-node=1 -m paravt_core.cli rl --config /c.yaml\n"
        "(one learner process: the stage runs in the launcher's process)"
    )


def test_one_server_without_a_model_dir_is_refused_in_full():
    with pytest.raises(ValueError, match=re.escape(
        "model_dir: the local directory of cfg.model is needed to launch the server"
    ) + "$"):  # fmt: skip
        plan(_cfg(), "/c.yaml", gpus=8)


# main and launch in this process: an in-process engine, one learner process (no torchrun, no server) -------
def test_main_runs_the_stage_here_and_prints_its_summary(
    rl_data,
    tiny_model_dir,
    tmp_path,
    capsys,
    monkeypatch,
):
    """``python -m paravt_core.rl.launch --config tiny.yaml k=v ...`` on a CPU machine: the default one learner
    rank runs in this process (the plan says so), the overrides reach the stage, the summary is printed as JSON
    (without ``last_step``) and the exit status is 0."""
    import json

    from paravt_core.rl.launch import main

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)  # this machine's answer, pinned
    out = tmp_path / "out"
    argv = ["--config", str(ROOT / "configs" / "rl" / "tiny.yaml"), f"data={rl_data}", f"model={tiny_model_dir}",
            f"output={out}", "steps=1", "prompts_per_step=1", "group_size=2", "engine.kind=transformers"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "rl launch (0 GPU(s)):"
    assert re.fullmatch(
        r"\S+ -m torch\.distributed\.run --standalone --nproc-per-node=1 -m paravt_core\.cli rl "
        r"--config \S*/paravt-rl-launch-[^/]+/rl\.yaml",
        printed[1],
    ), printed[1]
    assert printed[2] == "(one learner process: the stage runs in the launcher's process)"
    summary = json.loads(printed[-1])
    metrics = json.loads((out / "metrics.json").read_text())
    assert summary == {k: v for k, v in metrics.items() if k != "last_step"} and summary["steps"] == 1
    assert "last_step" in metrics


def test_main_help_shows_the_modules_first_paragraph(capsys):
    from paravt_core.rl.launch import main

    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert text.startswith("usage: python -m paravt_core.rl.launch [-h] --config CONFIG")
    assert "[--learner-procs LEARNER_PROCS] [overrides ...]" in text
    assert (
        "The RL stage's process topology on one node: SGLang server(s) on the GPUs the config reserves, the "
        "learner under ``torchrun`` on the others (what the pipeline's RL step runs)." in text
    )
    assert "dotted key=value overrides" in text and "learner ranks on a CPU machine (gloo)" in text
    with pytest.raises(SystemExit) as done:
        main(["--config", "/nowhere.yaml", "--learner-procs", "x"])
    assert done.value.code == 2
    assert "error: argument --learner-procs: invalid int value: 'x'" in capsys.readouterr().err


# wait_for_workers ------------------------------------------------------------------------------------------
class _Workers:
    """Answers ``GET /workers`` as sglang-router does (``{"workers": [{"url", "is_healthy", ...}]}``) with the
    health flags given; any other path 404."""

    def __init__(self, healthy: list[bool]):
        import json
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        body = json.dumps(
            {
                "workers": [
                    {"url": f"http://127.0.0.1:{9 + i}", "is_healthy": h} for i, h in enumerate(healthy)
                ]
            }
        ).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                ok = self.path == "/workers"
                self.send_response(200 if ok else 404)
                self.send_header("Content-Length", str(len(body) if ok else 0))
                self.end_headers()
                if ok:
                    self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        import threading

        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_wait_for_workers_returns_once_enough_are_healthy_and_names_the_count_when_not():
    from paravt_core.engines.base import EngineError
    from paravt_core.rl.launch import wait_for_workers

    with _Workers([True, False, True]) as router:
        wait_for_workers(router.url, 2, 5.0)  # two healthy of three: enough
        with pytest.raises(EngineError) as err:
            wait_for_workers(router.url, 3, 1.2)
        assert str(err.value) == f"router {router.url}: 2 of 3 servers healthy after 1.2 s"


_SAY = "import sys; print('server up', flush=True); sys.exit(3)"  # a server that logs a line, then exits 3


@pytest.mark.parametrize(
    ("overrides", "logs"),
    [([], ["sglang-server.log"]), (["engine.servers=2", "engine.weight_sync=disk"], ["sglang-server-0.log"])],
    ids=["one-server", "fleet"],
)
def test_launch_writes_the_server_logs_into_log_dir_and_plans_one_learner_rank(
    tiny_model_dir, tmp_path, capsys, overrides, logs
):
    """``launch`` without ``learner_procs`` plans one learner rank; the server's output goes to
    ``log_dir/sglang-server.log`` (a fleet's: ``sglang-server-<i>.log``)."""
    from paravt_core.engines.base import EngineError
    from paravt_core.rl.launch import launch

    cfg = load_config(
        RlConfig,
        ROOT / "configs" / "rl" / "tiny.yaml",
        [f"model={tiny_model_dir}", f"output={tmp_path / 'out'}", "engine.kind=sglang", *overrides],
    )
    (tmp_path / "logs").mkdir()

    def server(model_dir: str, port: int) -> list[str]:
        return [sys.executable, "-c", _SAY]

    with pytest.raises(EngineError, match="exited with code 3"):
        launch(cfg, gpus=0, server_command=server, start_timeout_s=60, log_dir=str(tmp_path / "logs"))
    assert "--nproc-per-node=1 " in capsys.readouterr().out
    for name in logs:
        assert (tmp_path / "logs" / name).read_text() == "server up\n"


def test_launch_starts_the_router_from_its_site_waits_for_the_servers_and_stops_all(
    tiny_model_dir, tmp_path, capsys, monkeypatch
):
    """A two-server fleet of loopback contract servers behind the real router (``$PARAVT_ROUTER_SITE``, or the
    ``.venv-router`` beside this Python's environment): the router starts with its log in ``log_dir``, both
    servers register, then the learner (here in this process) fails on a missing data set and everything
    started is stopped again."""
    import os

    import httpx

    from tests.support.fleet_support import router_site

    if not os.environ.get("PARAVT_ROUTER_SITE"):
        monkeypatch.setenv("PARAVT_ROUTER_SITE", str(Path(sys.prefix).resolve().parent / ".venv-router"))
    router_site()  # skips where the side site was not set up
    monkeypatch.setenv("OMP_NUM_THREADS", "1")

    port = free_port_run(4)  # the router, two servers, the router's metrics
    cfg = load_config(
        RlConfig,
        ROOT / "configs" / "rl" / "tiny.yaml",
        [f"model={tiny_model_dir}", f"output={tmp_path / 'out'}", f"data={tmp_path / 'no-data'}",
         "engine.kind=sglang", "engine.servers=2", "engine.weight_sync=disk", f"engine.port={port}",
         f"engine.router_metrics_port={port + 3}"],
    )  # fmt: skip

    def loopback(model_dir: str, server_port: int) -> list[str]:
        script = str(ROOT / "tests" / "support" / "contract_server_main.py")
        return [sys.executable, script, model_dir, str(server_port), str(cfg.agent.max_pixels),
                str(cfg.agent.min_pixels)]  # fmt: skip

    logs = tmp_path / "logs"
    logs.mkdir()
    from paravt_core.rl.launch import launch

    missing = re.escape(f"{tmp_path / 'no-data' / 'rl'}: no RL parquet (run `paravt data` first)")
    with pytest.raises(FileNotFoundError, match=f"^{missing}$"):
        launch(cfg, gpus=0, server_command=loopback, start_timeout_s=120, log_dir=str(logs))
    assert sorted(p.name for p in logs.iterdir()) == [
        "sglang-router.log",
        "sglang-server-0.log",
        "sglang-server-1.log",
    ]
    assert (
        f"--worker-urls http://127.0.0.1:{port + 1} http://127.0.0.1:{port + 2} " in capsys.readouterr().out
    )
    for p in (port, port + 1, port + 2):  # the router and both servers are gone
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{p}/health", timeout=5.0)


def test_a_failed_learner_run_under_torchrun_fails_the_launch(tiny_model_dir, tmp_path, monkeypatch):
    """Two gloo learner ranks (``learner_procs=2``) run under torchrun; their failure (no data set) is the
    launch's failure (``CalledProcessError`` of that command), not a missing ``metrics.json`` later."""
    import subprocess

    from paravt_core.rl.launch import launch

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    cfg = load_config(
        RlConfig,
        ROOT / "configs" / "rl" / "tiny.yaml",
        [f"model={tiny_model_dir}", f"output={tmp_path / 'out'}", f"data={tmp_path / 'no-data'}",
         "engine.kind=transformers"],
    )  # fmt: skip
    with pytest.raises(subprocess.CalledProcessError) as err:
        launch(cfg, gpus=0, learner_procs=2)
    assert err.value.returncode != 0 and "--nproc-per-node=2" in err.value.cmd


def test_the_plan_comes_first_in_a_piped_log(tiny_model_dir, tmp_path):
    """A pod's log is a pipe (block-buffered stdout): the plan is flushed before the learner starts, so it
    leads the log rather than following the learner's output and the launcher's own failure at exit."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"} | {"OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "paravt_core.rl.launch", "--config", str(ROOT / "configs" / "rl" / "tiny.yaml"),
           "--learner-procs", "2", f"model={tiny_model_dir}", f"output={tmp_path / 'out'}",
           f"data={tmp_path / 'no-data'}", "engine.kind=transformers"]  # fmt: skip
    run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env)
    assert run.returncode != 0
    assert run.stdout.startswith("rl launch (0 GPU(s)):\n"), run.stdout[:2000]
    assert "CalledProcessError" in run.stdout  # the learner's failure, after the plan


# 2 ----------------------------------------------------------------------------------------------------------
def test_every_server_of_a_fleet_plan_is_told_the_served_dtype():
    from paravt_core.rl.launch import plan

    recipe = ROOT / "configs" / "rl" / "paragrpo_8b.yaml"  # dtype: bfloat16
    fleet = load_config(
        RlConfig, recipe, ["engine.servers=2", "engine.gpus=[6,7]", "engine.weight_sync=disk"]
    )
    p = plan(fleet, "/tmp/rl.yaml", gpus=8, model_dir="/m", python="python")
    assert len(p.fleet) == 2
    for cmd, _, _ in p.fleet:
        assert cmd[cmd.index("--dtype") + 1] == "bfloat16"
    single = load_config(RlConfig, recipe)
    cmd = plan(single, "/tmp/rl.yaml", gpus=8, model_dir="/m", python="python").server_command
    assert cmd[cmd.index("--dtype") + 1] == "bfloat16"


# 3 ----------------------------------------------------------------------------------------------------------
_DUMP_ENV = (
    "import os, sys; open(sys.argv[1], 'w').write(os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')); "
    "sys.exit(3)"
)


@pytest.mark.parametrize(
    ("overrides", "gpus", "port_offset"),
    [
        (["engine.gpus=[1]"], 2, 0),
        (["engine.servers=2", "engine.gpus=[1,2]", "engine.weight_sync=disk"], 3, 1),
    ],
    ids=["one-server", "fleet"],
)
def test_the_launched_server_process_gets_its_pinning(tiny_model_dir, tmp_path, monkeypatch, overrides, gpus,
                                                       port_offset):  # fmt: skip
    """``engine.gpus`` reaches the server process's environment, not only the plan: the server command (a
    stand-in that writes the ``CUDA_VISIBLE_DEVICES`` it sees, then exits 3) is started by ``launch``."""
    from paravt_core.engines.base import EngineError
    from paravt_core.rl.launch import launch

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    port = free_port()
    cfg = load_config(
        RlConfig,
        ROOT / "configs" / "rl" / "tiny.yaml",
        [f"model={tiny_model_dir}", f"output={tmp_path / 'out'}", "engine.kind=sglang", f"engine.port={port}",
         *overrides],
    )  # fmt: skip

    def server(model_dir: str, server_port: int) -> list[str]:
        return [sys.executable, "-c", _DUMP_ENV, str(tmp_path / f"env-{server_port}")]

    with pytest.raises(EngineError, match="exited with code 3"):
        launch(cfg, gpus=gpus, server_command=server, start_timeout_s=60)
    # the first (or only) server: the launcher waits for it first, so it has written before it exited
    assert (tmp_path / f"env-{port + port_offset}").read_text() == "1"
