"""The multi-node steps' wiring (components/multinode.py): what each step hands its job and what it publishes.

The component's body runs in-process against the loopback Kubernetes emulator with the Trainer CRD
registered; the test plays the controller: it reads the created TrainJob, leaves in the stage's output what
the nodes' stage would (``metrics.json`` and the curve), and marks the job Complete. The nodes themselves run
for real in ``test_launch_trainjob_e2e.py`` (SFT on two emulated nodes); here every input of the step is
followed to its place in the job's config, env and pod, and to the step's outputs."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from kfp.dsl import Artifact

from paravt_core.launch.trainjob import CONFIG_ENV, job_name
from tests.support.k8s_emulator import Emulator
from tests.support.paths import ROOT
from tests.support.ports import free_port
from tests.support.trainjob_support import _kubeconfig, crd, kfp_outputs

RUN = "run-wiring-7"
NS = "default"  # no in-cluster namespace file here
STAMP = "2026-11-28T10:00:00Z"


def _run_step(tmp_path: Path, monkeypatch: Any, stage: str, call: Any, out: Path) -> dict[str, Any]:
    """Run ``call()`` (the component body) while playing the controller; the created job's trainer part."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KFP_POD_NAME", raising=False)
    name = job_name(RUN, stage)
    seen: dict[str, Any] = {}
    with Emulator() as emu:
        emu.register_crd(crd())
        _kubeconfig(emu, tmp_path / "kubeconfig")

        def controller() -> None:
            assert emu.created.wait(20)
            seen["job"] = emu.get("trainjobs", NS, name)
            out.mkdir(parents=True, exist_ok=True)  # what the nodes' stage leaves behind
            (out / "metrics.json").write_text(json.dumps({"steps": 2, "loss": 1.25}))
            (out / ("loss_curve.png" if stage == "sft" else "curves.png")).write_bytes(
                b"\x89PNG-" + stage.encode()
            )
            done = {
                "type": "Complete",
                "status": "True",
                "reason": "JobSetCompleted",
                "lastTransitionTime": STAMP,
            }
            emu.set_status("trainjobs", NS, name, {"conditions": [done]})

        thread = threading.Thread(target=controller, daemon=True)
        thread.start()
        seen["returned"] = call()
        thread.join(20)
        assert emu.count("create", "trainjobs") == 1
    return seen


@pytest.fixture
def rollout_server():
    """A stand-in rollout server on loopback: ``GET /health`` answers 200, as SGLang's does once it serves."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    hits: list[str] = []

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            hits.append(self.path)
            self.send_response(200 if self.path == "/health" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()


def _config(job: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    env = {e["name"]: e.get("value") for e in job["spec"]["trainer"]["env"]}
    return yaml.safe_load(env[CONFIG_ENV]), env


def test_the_multinode_sft_step_hands_its_inputs_to_the_job_and_publishes_the_stage(tmp_path, monkeypatch):
    from components.multinode import sft_trainjob_op

    out = tmp_path / "sft-out"
    curve, metrics, model = kfp_outputs(tmp_path, ("curve", "metrics", "model"))
    tensorboard = Artifact(name="tb")
    seen = _run_step(
        tmp_path,
        monkeypatch,
        "sft",
        lambda: sft_trainjob_op.python_func(
            config_yaml=(ROOT / "configs/sft/tiny.yaml").read_text(),
            overrides=["trainer.steps=7"],
            data_uri="s3://bucket/runs/x/data",
            model_uri="s3://bucket/models/base",
            nodes=2,
            gpus_per_node=4,
            api="trainjob",
            runtime="torch-distributed",
            poll_s=0.05,
            node_spec={"image": "registry/paravt-sft:1"},
            media_pvc="paravt-media",
            curve=curve,
            metrics=metrics,
            model=model,
            tensorboard=tensorboard,
            output=str(out),
            run_id=RUN,
        ),
        out,
    )
    job = seen["job"]
    cfg, env = _config(job)
    assert (cfg["data"]["input"], cfg["model"]["uri"], cfg["output"]) == (
        "s3://bucket/runs/x/data",
        "s3://bucket/models/base",
        str(out),
    )
    assert (cfg["launch"]["nodes"], cfg["launch"]["gpus_per_node"], cfg["launch"]["api"]) == (
        2,
        4,
        "trainjob",
    )
    assert cfg["trainer"]["steps"] == 7  # the overrides reach the nodes
    assert env["KFP_RUN_ID"] == RUN
    assert (job["spec"]["trainer"]["numNodes"], job["spec"]["trainer"]["image"]) == (
        2,
        "registry/paravt-sft:1",
    )
    assert job["spec"]["runtimeRef"]["name"] == "torch-distributed"
    claims = json.dumps(job["spec"])
    assert '"claimName": "paravt-media"' in claims  # the media PVC mounted on the nodes
    assert seen["returned"] == str(out / "final")
    assert model.metadata["uri"] == str(out / "final")  # not under the run's root: by metadata
    assert "data:image/png;base64," in Path(curve.path).read_text()
    assert metrics.metadata["loss"] == 1.25
    assert tensorboard.metadata["logdir"] == str(out / "tensorboard")


def test_the_multinode_rl_step_points_the_push_at_its_rank0_pod_and_publishes_the_stage(
    tmp_path, monkeypatch, rollout_server
):
    from components.multinode import rl_trainjob_op

    base_url, hits = rollout_server

    out = tmp_path / "rl-out"
    curves, metrics, trained = kfp_outputs(tmp_path, ("curves", "metrics", "trained"))
    tensorboard = Artifact(name="tb")
    seen = _run_step(
        tmp_path,
        monkeypatch,
        "rl",
        lambda: rl_trainjob_op.python_func(
            config_yaml=(ROOT / "configs/rl/tiny.yaml").read_text(),
            overrides=[
                "device=cuda",
                "engine.kind=sglang",
                f"engine.base_url={base_url}",
                "engine.weight_sync=distributed",
            ],
            data="s3://bucket/runs/x/rl-data",
            model="s3://bucket/runs/x/sft/final",
            nodes=2,
            gpus_per_node=8,
            api="trainjob",
            runtime="torch-distributed",
            poll_s=0.05,
            node_spec={"image": "registry/paravt-rl:1"},
            media_pvc="",
            curves=curves,
            metrics=metrics,
            trained=trained,
            tensorboard=tensorboard,
            output=str(out),
            run_id=RUN,
        ),
        out,
    )
    job = seen["job"]
    cfg, env = _config(job)
    assert (cfg["data"], cfg["model"], cfg["output"]) == (
        "s3://bucket/runs/x/rl-data",
        "s3://bucket/runs/x/sft/final",
        str(out),
    )
    assert (cfg["launch"]["nodes"], cfg["launch"]["gpus_per_node"], cfg["launch"]["api"]) == (
        2,
        8,
        "trainjob",
    )
    # the server joins the push at the job's rank-0 pod (Trainer v2.3.0 naming, namespace "default" here)
    name = job_name(RUN, "rl")
    assert cfg["engine"]["nccl_address"] == f"{name}-node-0-0.{name}.default.svc.cluster.local"
    assert cfg["engine"]["base_url"] == base_url
    assert hits == ["/health"]  # checked from the step's pod before the job
    assert (cfg["steps"], cfg["group_size"]) == (
        3,
        4,
    )  # the recipe given (configs/rl/tiny.yaml), not defaults
    assert env["KFP_RUN_ID"] == RUN
    assert "claimName" not in json.dumps(job["spec"])  # no media PVC given: none mounted
    assert seen["returned"] == str(out / "final") == trained.metadata["uri"]
    assert Path(curves.path).read_bytes() == b"\x89PNG-rl"
    assert curves.metadata["uri"] == str(out / "curves.png")
    assert metrics.metadata["loss"] == 1.25
    assert tensorboard.metadata["logdir"] == str(out / "tensorboard")


def test_the_multinode_sft_step_refuses_float32_weights_of_an_8b_model(tmp_path, monkeypatch):
    """The launcher pod refuses before any job (16 GPUs reserved, a 8.77B model in float32), naming the SFT
    parameter and the 2-node recipe."""
    import shutil

    from components.multinode import sft_trainjob_op
    from paravt_core.config_base import ConfigError

    big = tmp_path / "base"
    big.mkdir()
    shutil.copy(ROOT / "paravt_core/plan/qwen3_vl_8b_instruct.json", big / "config.json")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))  # nothing to reach: the refusal comes first
    curve, metrics, model = kfp_outputs(tmp_path, ("curve", "metrics", "model"))
    with pytest.raises(ConfigError) as err:
        sft_trainjob_op.python_func(
            config_yaml="model:\n  bf16: false\n", overrides=[], data_uri="s3://b/data", model_uri=str(big),
            nodes=2, gpus_per_node=8, api="trainjob", runtime="torch-distributed", poll_s=1.0,
            node_spec={"image": "registry/paravt-sft:1"}, media_pvc="", curve=curve, metrics=metrics,
            model=model, tensorboard=Artifact(name="tb"), output="s3://b/sft", run_id="r",
        )  # fmt: skip
    assert str(err.value) == (
        "sft: float32 weights for a 8.8B model on 16 GPU(s): set bfloat16 in the pipeline parameter "
        "sft_config_yaml (e.g. configs/sft/qwen3vl_8b_2node.yaml), or compile with --sft-config "
        "configs/sft/qwen3vl_8b_2node.yaml"
    )


def test_without_an_output_the_multinode_steps_write_under_the_runs_root(
    tmp_path, monkeypatch, rollout_server
):
    """``output`` empty: the stage's output is ``<run root>/sft`` (``/rl``), the run root read off the step's
    own output artifact URI under the pipeline root (``<root>/<pipeline>/<run id>/...``)."""
    from components.multinode import rl_trainjob_op, sft_trainjob_op

    root = tmp_path / "pipeline-root" / "paravt-train" / RUN
    curve, metrics, model = kfp_outputs(tmp_path, ("curve", "metrics", "model"))
    model.uri = str(root / "sft-trainjob-op" / "model")
    seen = _run_step(
        tmp_path,
        monkeypatch,
        "sft",
        lambda: sft_trainjob_op.python_func(
            config_yaml="{}",
            overrides=[],
            data_uri="s3://b/data",
            model_uri="s3://b/base",
            nodes=2,
            gpus_per_node=1,
            api="trainjob",
            runtime="torch-distributed",
            poll_s=0.05,
            node_spec={"image": "registry/paravt-sft:1"},
            media_pvc="",
            curve=curve,
            metrics=metrics,
            model=model,
            tensorboard=Artifact(name="tb"),
            run_id=RUN,
        ),  # fmt: skip
        root / "sft",
    )
    assert _config(seen["job"])[0]["output"] == str(root / "sft")
    assert (
        seen["returned"] == str(root / "sft" / "final") == model.uri
    )  # under the run's root: the URI itself
    curves, metrics, trained = kfp_outputs(tmp_path / "rl", ("curves", "metrics", "trained"))
    trained.uri = str(root / "rl-trainjob-op" / "trained")
    seen = _run_step(
        tmp_path / "rl",
        monkeypatch,
        "rl",
        lambda: rl_trainjob_op.python_func(
            config_yaml="{}",
            overrides=[
                "device=cuda",
                "dtype=bfloat16",
                "engine.kind=sglang",
                f"engine.base_url={rollout_server[0]}/v1",
            ],
            data="s3://b/rl-data",
            model="s3://b/sft/final",
            nodes=2,
            gpus_per_node=1,
            api="trainjob",
            runtime="torch-distributed",
            poll_s=0.05,
            node_spec={"image": "registry/paravt-rl:1"},
            media_pvc="",
            curves=curves,
            metrics=metrics,
            trained=trained,
            tensorboard=Artifact(name="tb"),
            run_id=RUN,
        ),  # fmt: skip
        root / "rl",
    )
    assert _config(seen["job"])[0]["output"] == str(root / "rl")
    assert seen["returned"] == str(root / "rl" / "final") == trained.uri


def test_the_multinode_rl_step_refuses_float32_weights_of_an_8b_model(tmp_path, monkeypatch):
    import shutil

    from components.multinode import rl_trainjob_op
    from paravt_core.config_base import ConfigError

    big = tmp_path / "sft-final"
    big.mkdir()
    shutil.copy(ROOT / "paravt_core/plan/qwen3_vl_8b_instruct.json", big / "config.json")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    curves, metrics, trained = kfp_outputs(tmp_path, ("curves", "metrics", "trained"))
    with pytest.raises(ConfigError) as err:
        rl_trainjob_op.python_func(
            config_yaml="device: cuda\ndtype: float32\n", overrides=["engine.kind=sglang",
            "engine.base_url=http://rollout:30000"], data="s3://b/data", model=str(big), nodes=2, gpus_per_node=8,
            api="trainjob", runtime="torch-distributed", poll_s=1.0, node_spec={"image": "registry/paravt-rl:1"},
            media_pvc="", curves=curves, metrics=metrics, trained=trained, tensorboard=Artifact(name="tb"),
            output="s3://b/rl", run_id="r",
        )  # fmt: skip
    assert str(err.value) == (
        "rl: float32 weights for a 8.8B model on 16 GPU(s): set bfloat16 in the pipeline parameter "
        "rl_config_yaml (e.g. configs/rl/paragrpo_8b_2node.yaml), or compile with --rl-config "
        "configs/rl/paragrpo_8b_2node.yaml"
    )


@pytest.mark.parametrize("answer", ["refused", 503])
def test_the_multinode_rl_step_checks_the_rollout_server_before_it_creates_the_job(
    tmp_path, monkeypatch, answer
):
    """A two-node RL job without its rollout server loaded 16 GPUs and failed at the first push, rerun
    twice. The step asks ``GET /health`` of ``engine.base_url`` from its own pod first (SGLang's liveness
    route, python/sglang/srt/entrypoints/http_server.py) and fails in one line naming the parameter."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from components.multinode import rl_trainjob_op
    from paravt_core.config_base import ConfigError

    class Loading(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = None
    if answer == "refused":
        port = free_port()  # a port nothing listens on
    else:
        server = ThreadingHTTPServer(("127.0.0.1", 0), Loading)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.server_address[1]
    curves, metrics, trained = kfp_outputs(tmp_path, ("curves", "metrics", "trained"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    try:
        with Emulator() as emu:
            emu.register_crd(crd())
            _kubeconfig(emu, tmp_path / "kubeconfig")
            with pytest.raises(ConfigError) as err:
                rl_trainjob_op.python_func(
                    config_yaml="{}", data="s3://b/d", model="s3://b/sft/final", nodes=2, gpus_per_node=8,
                    overrides=["device=cuda", "dtype=bfloat16", "engine.kind=sglang",
                               f"engine.base_url=http://127.0.0.1:{port}", "launch.rollout_wait_s=0.2"],
                    api="trainjob", runtime="torch-distributed", poll_s=0.05, media_pvc="",
                    node_spec={"image": "registry/paravt-rl:1"}, curves=curves, metrics=metrics,
                    trained=trained, tensorboard=Artifact(name="tb"), output=str(tmp_path / "rl"), run_id=RUN,
                )  # fmt: skip
            assert emu.count("create", "trainjobs") == 0
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"engine.base_url http://127.0.0.1:{port}: the rollout server does not answer ")
    assert ("HTTP 503" if answer == 503 else "Connection refused") in message
