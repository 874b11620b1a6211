"""The multi-node SFT step end to end without a cluster: the component's body (components/multinode.py)
creates the TrainJob through the real ``kubernetes`` client configured from a kubeconfig (as outside a
pod), against the loopback emulator; the test plays the Trainer controller and runs what the TrainJob
says on two emulated nodes: each node's ``trainer.command`` with the job's env and the ``PET_*``
variables the torch plugin sets (trainer v2.3.0, pkg/constants/constants.go), as two local processes.
So the node command, the config handed over in the env var, ``torchrun``'s multi-node rendezvous and the
stage on 2 x 1 gloo ranks all run for real; the step then reads the stage's outputs, its TensorBoard logs
included (written by rank 0 once, the run named by the ``KFP_RUN_ID`` the nodes get)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from kfp.dsl import HTML, Artifact, Metrics, Model

from components.multinode import sft_trainjob_op
from paravt_core.launch.trainjob import job_name
from tests.support.k8s_emulator import Emulator
from tests.support.paths import ROOT
from tests.support.ports import free_port
from tests.support.tracking_support import raw_points, scalars

REPO = ROOT
TINY = REPO / "configs" / "sft" / "tiny.yaml"
CRD = REPO / "tests/fixtures/k8s/trainer.kubeflow.org_trainjobs.v2.3.0.yaml"
RUN = "run-e2e-1"


def _play_controller(emu: Emulator, ns: str, name: str, tmp: Path, result: dict) -> None:
    """On create: run every node's container command as a local process, report Running with the rank-0
    pod and its output as the pod log, then Complete (all exit 0) or Failed (the first non-zero)."""
    assert emu.created.wait(60)
    job = emu.get("trainjobs", ns, name)
    trainer = job["spec"]["trainer"]
    env = {e["name"]: e["value"] for e in trainer["env"] if "value" in e}
    result["env"] = env
    port = free_port()
    procs = []
    for rank in range(trainer["numNodes"]):
        node_tmp = tmp / f"node{rank}"
        node_tmp.mkdir()
        node_env = {
            **os.environ,
            **env,
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "PYTHONPATH": str(REPO),
            "OMP_NUM_THREADS": "1",
            "TMPDIR": str(node_tmp),
            "PET_NNODES": str(trainer["numNodes"]),
            "PET_NPROC_PER_NODE": str(trainer["numProcPerNode"]),
            "PET_NODE_RANK": str(rank),
            "PET_MASTER_ADDR": "127.0.0.1",
            "PET_MASTER_PORT": str(port),
        }
        procs.append(
            subprocess.Popen(
                trainer["command"], env=node_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    pod = f"{name}-node-0-0-x1y2z"
    labels = {
        "jobset.sigs.k8s.io/jobset-name": name,
        "jobset.sigs.k8s.io/replicatedjob-name": "node",
        "batch.kubernetes.io/job-completion-index": "0",
    }
    emu.add_pod(ns, pod, labels)
    emu.set_status(
        "trainjobs", ns, name, {"jobsStatus": [{"name": "node", "active": len(procs), "ready": len(procs)}]}
    )
    rank1_out: list[str] = []
    drain = threading.Thread(target=lambda: rank1_out.extend(procs[1].stdout), daemon=True)
    drain.start()
    for line in procs[0].stdout:
        emu.append_log(ns, pod, line)
    codes = [p.wait(timeout=600) for p in procs]
    drain.join(10)
    result["codes"], result["rank1"] = codes, "".join(rank1_out)
    if any(codes):
        rank = next(i for i, c in enumerate(codes) if c)
        cond = {
            "type": "Failed",
            "reason": "JobSetFailed",
            "message": f"node-{rank} exited with code {codes[rank]}",
        }
    else:
        cond = {"type": "Complete", "reason": "JobSetCompleted", "message": "all nodes finished"}
    cond |= {"status": "True", "lastTransitionTime": "2026-11-25T10:00:00Z"}
    emu.set_status("trainjobs", ns, name, {"conditions": [cond]})


def test_sft_step_runs_the_stage_on_two_emulated_nodes(
    tiny_model_dir, sft_data_output, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "out"
    with Emulator() as emu:
        emu.register_crd(next(d for d in yaml.load_all(CRD.read_text(), Loader=yaml.CSafeLoader) if d))
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "emu", "cluster": {"server": emu.host}}],
                    "users": [{"name": "u", "user": {}}],
                    "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "u"}}],
                    "current-context": "emu",
                }
            )
        )
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        name = job_name(RUN, "sft")
        result: dict = {}
        controller = threading.Thread(
            target=_play_controller, args=(emu, "default", name, tmp_path, result), daemon=True
        )
        controller.start()
        curve, metrics, model = HTML(name="curve"), Metrics(name="metrics"), Model(name="model")
        curve.path, metrics.path, model.path = (str(tmp_path / n) for n in ("curve.html", "m.json", "model"))
        tensorboard = Artifact(name="tensorboard")
        final = sft_trainjob_op.python_func(
            config_yaml=TINY.read_text(),
            overrides=[
                "trainer.steps=2",
                "checkpoint.every=2",
                "data.num_workers=0",
                f"work_dir={tmp_path}/work",
            ],
            data_uri=sft_data_output,
            model_uri=tiny_model_dir,
            nodes=2,
            gpus_per_node=1,
            api="trainjob",
            runtime="torch-distributed",
            poll_s=0.2,
            node_spec={
                "image": "paravt-sft:test",
                "cpu": "1",
                "memory": "2G",
                "secret_env": {"AWS_SECRET_ACCESS_KEY": ["paravt-s3", "AWS_SECRET_ACCESS_KEY"]},
            },
            media_pvc="",
            curve=curve,
            metrics=metrics,
            model=model,
            tensorboard=tensorboard,
            output=str(out),
            run_id=RUN,
        )
        controller.join(30)
        assert emu.get("trainjobs", "default", name) is None  # deleted after completion
        assert emu.count("create", "trainjobs") == 1
    assert result["codes"] == [0, 0], result.get("rank1", "")[-3000:]
    assert final == str(out / "final")
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["world_size"] == 2  # one rank on each emulated node, one process group
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    logged = capsys.readouterr().out
    assert (
        f"TrainJob {name}: Running" in logged and f"TrainJob {name}: Complete (all nodes finished)" in logged
    )
    assert f"[{name}-node-0-0-x1y2z]" in logged  # rank 0's output streamed by the step
    assert "<img" in Path(curve.path).read_text()
    # The run page's TensorBoard link: the stage's log directory, each step once (rank 0 alone writes).
    assert tensorboard.metadata["logdir"] == str(out / "tensorboard")
    assert sorted(step for tag, step in raw_points(out / "tensorboard") if tag == "train/loss") == [1, 2]
    assert [v for _, v in scalars(out / "tensorboard")["train/loss"]] == pytest.approx(
        [r["loss"] for r in records], rel=1e-6
    )
    assert result["env"]["KFP_RUN_ID"] == RUN  # the nodes' trackers name their run after the pipeline run
