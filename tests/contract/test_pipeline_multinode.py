"""The train pipeline compiled with ``launch.nodes > 1``: SFT and RL become steps that create a Kubeflow
Trainer job (components/multinode.py) in a small pod, with the node settings fixed in the IR; one node
stays the GPU pod of components/sft.py / rl.py."""

from __future__ import annotations

import inspect

import pytest
import yaml

from components.launchers import multinode as multinode_launchers
from paravt_core.config_base import ConfigError
from paravt_core.launch.trainjob import check_rl_multinode, rank0_address
from pipelines.compile import compile_pipeline
from tests.support.paths import ROOT

SFT2 = str(ROOT / "configs/sft/qwen3vl_8b_2node.yaml")
RL4 = str(ROOT / "configs/rl/paragrpo_8b_4node.yaml")


@pytest.fixture(scope="module")
def ir(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("ir") / "train.yaml"
    compile_pipeline("train", str(out), warn=False, sft_config=SFT2, rl_config=RL4)
    docs = list(yaml.safe_load_all(out.read_text()))
    return {"spec": docs[0], "platform": docs[1], "text": out.read_text()}


def test_multinode_stages_are_trainjob_creating_steps(ir):
    spec = ir["spec"]
    comps = set(spec["components"])
    assert {"comp-sft-trainjob-op", "comp-rl-trainjob-op"} <= comps
    assert not {"comp-sft-op", "comp-rl-op"} & comps
    for stage, image in (("sft", "paravt-sft"), ("rl", "paravt-rl")):
        container = spec["deploymentSpec"]["executors"][f"exec-{stage}-trainjob-op"]["container"]
        assert container["image"].startswith(image)  # the step's pod runs the stage's image
        body = container["command"][-1]  # the spec's body: one call into the image's launcher
        assert f"from components.launchers.multinode import {stage}_trainjob_step" in body
        assert f"return {stage}_trainjob_step(" in body
        launcher = inspect.getsource(getattr(multinode_launchers, f"{stage}_trainjob_step"))
        assert "from paravt_core.launch.trainjob import" in launcher and "launch_with_retries(" in launcher
        assert f'"{stage}",' in launcher
        # The launcher pod asks for no GPU: the job's nodes do.
        assert "accelerator" not in container.get("resources", {})
        assert container["resources"]["cpuLimit"] == 1.0


def test_multinode_steps_have_the_one_node_steps_outputs(ir, tmp_path):
    """The run page shows the same outputs whatever the node count: the TensorBoard log directory too."""
    out = tmp_path / "one.yaml"
    compile_pipeline("train", str(out), warn=False)
    one = next(yaml.safe_load_all(out.read_text()))["components"]
    multi = ir["spec"]["components"]

    def outputs(comps: dict, name: str) -> dict:
        return {
            k: v["artifactType"]["schemaTitle"]
            for k, v in comps[name]["outputDefinitions"]["artifacts"].items()
        }

    for stage in ("sft", "rl"):
        assert outputs(multi, f"comp-{stage}-trainjob-op") == outputs(one, f"comp-{stage}-op")
        assert outputs(multi, f"comp-{stage}-trainjob-op")["tensorboard"] == "system.Artifact"


def test_the_ir_fixes_nodes_gpus_api_and_the_node_spec(ir):
    tasks = ir["spec"]["root"]["dag"]["tasks"]
    sft, rl = tasks["sft-trainjob-op"], tasks["rl-trainjob-op"]
    const = lambda t, k: t["inputs"]["parameters"][k]["runtimeValue"]["constant"]  # noqa: E731
    assert (const(sft, "nodes"), const(sft, "gpus_per_node"), const(sft, "api")) == (2, 8, "trainjob")
    assert (const(rl, "nodes"), const(rl, "gpus_per_node"), const(rl, "runtime")) == (
        4,
        8,
        "torch-distributed",
    )
    assert sft["taskInfo"]["name"] == "sft (TrainJob, 2x8 GPUs)"
    assert rl["taskInfo"]["name"] == "rl (TrainJob, 4x8 GPUs)"
    node = const(sft, "node_spec")
    assert node["image"].startswith("paravt-sft") and node["shm"] == "64Gi" and node["memory"] == "512G"
    assert node["node_selector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert node["secret_env"]["AWS_SECRET_ACCESS_KEY"] == ["paravt-s3", "AWS_SECRET_ACCESS_KEY"]
    assert node["active_deadline_s"] == 48 * 3600
    assert const(rl, "node_spec")["active_deadline_s"] == 72 * 3600
    # RL still starts from SFT's checkpoint; the media claim is the pipeline parameter.
    assert rl["inputs"]["parameters"]["model"]["taskOutputParameter"]["producerTask"] == "sft-trainjob-op"
    assert sft["inputs"]["parameters"]["media_pvc"]["componentInputParameter"] == "media_pvc"


def test_the_launcher_pod_gets_s3_but_no_media_volume_or_gpu_toleration(ir):
    execs = ir["platform"]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    launcher = execs["exec-sft-trainjob-op"]
    assert launcher["secretAsEnv"][0]["secretName"] == "paravt-s3"
    assert "pvcMount" not in launcher and "tolerations" not in launcher
    assert "pvcMount" in execs["exec-data-op"]  # the other stages are unchanged


def test_one_node_configs_compile_to_the_gpu_pod_steps(tmp_path):
    out = tmp_path / "train.yaml"
    compile_pipeline("train", str(out), warn=False, sft_config=str(ROOT / "configs/sft/qwen3vl_8b.yaml"))
    comps = set(next(yaml.safe_load_all(out.read_text()))["components"])
    assert {"comp-sft-op", "comp-rl-op"} <= comps and not any("trainjob" in c for c in comps)


def test_cli_compile_takes_the_stage_configs(tmp_path, capsys):
    from paravt_core.cli import main

    out = tmp_path / "t.yaml"
    assert main(["pipeline", "compile", "train", str(out), "--sft-config", SFT2]) == 0
    comps = set(next(yaml.safe_load_all(out.read_text()))["components"])
    assert "comp-sft-trainjob-op" in comps and "comp-rl-op" in comps


def test_multinode_rl_needs_a_reachable_rollout_server():
    with pytest.raises(ConfigError, match="needs engine.base_url"):
        check_rl_multinode("sglang", "")
    check_rl_multinode("sglang", "http://paravt-rollout:30000")
    check_rl_multinode("transformers", "")


def test_the_rank0_address_is_fully_qualified():
    """The rollout server joining the weight push may live in another namespace, where a short name does
    not resolve. Trainer v2.3.0 names rank 0 ``<job>-node-0-0.<job>`` (pkg/runtime/framework/plugins/torch/
    torch.go, PET_MASTER_ADDR: hostname under JobSet's headless Service); the training operator v1.9.0
    ``<job>-master-0`` (pkg/controller.v1/pytorch/envvar.go, replicaName: that replica's Service). Both
    resolve cluster-wide as ``<name>.<namespace>.svc.<cluster domain>`` (Kubernetes DNS for Services)."""
    assert (
        rank0_address("trainjob", "paravt-rl-abc", "team-a")
        == "paravt-rl-abc-node-0-0.paravt-rl-abc.team-a.svc.cluster.local"
    )
    assert (
        rank0_address("pytorchjob", "paravt-rl-abc", "team-a")
        == "paravt-rl-abc-master-0.team-a.svc.cluster.local"
    )
    assert (
        rank0_address("trainjob", "j", "ns", cluster_domain="corp.example")
        == "j-node-0-0.j.ns.svc.corp.example"
    )


def test_no_secret_value_in_the_ir(tmp_path, monkeypatch):
    """Credentials in the compiling machine's environment never reach the IR: the nodes get them by
    Secret reference, built at run time from the names in node_spec."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "do-not-leak-3f9a")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "do-not-leak-key-id")
    out = tmp_path / "train.yaml"
    compile_pipeline("train", str(out), warn=False, sft_config=SFT2, rl_config=RL4)
    text = out.read_text()
    assert "do-not-leak" not in text and "paravt-s3" in text


@pytest.mark.parametrize("stage", ["sft", "rl"])
def test_a_one_node_step_refuses_a_multinode_config(stage, tmp_path):
    """A run whose config asks for nodes the compiled DAG does not have fails at once, saying how to
    compile it, instead of training on one node."""
    from kfp.dsl import HTML, Artifact, Dataset, Metrics, Model

    from components.rl import rl_op
    from components.sft import sft_op

    common = dict(config_yaml="launch:\n  nodes: 2\n", overrides=[], metrics=Metrics(name="m"), run_id="r",
                  tensorboard=Artifact(name="tb"))  # fmt: skip
    with pytest.raises(ValueError, match=f"launch.nodes=2: compile with --{stage}-config"):
        if stage == "sft":
            sft_op.python_func(
                data=Dataset(name="d", uri="s3://b/d"),
                model_uri="m",
                curve=HTML(name="c"),
                model=Model(name="o"),
                **common,
            )
        else:
            rl_op.python_func(
                data=Dataset(name="d", uri="s3://b/d"),
                model="s3://b/m",
                curves=Artifact(name="c"),
                trained=Model(name="t"),
                **common,
            )


def test_the_deadline_reaches_the_job_as_an_integer(ir):
    """KFP keeps a STRUCT input's numbers as protobuf doubles, so the compiled node_spec holds
    ``active_deadline_s: 172800.0`` and the step gets a float back. The controllers read the field into
    an int64 (trainer v2.3.0 pkg/apis/trainer/v1alpha1/trainjob_types.go ``ActiveDeadlineSeconds int64``;
    training-operator v1.9.0 pkg/apis/kubeflow.org/v1/common_types.go ``*int64``), and Go's encoding/json
    refuses ``172800.0`` for an int64. The manifests built from the IR's node_spec carry an int."""
    import json

    from paravt_core.launch.trainjob import NodeSpec, pytorchjob_manifest, trainjob_manifest

    tasks = ir["spec"]["root"]["dag"]["tasks"]
    for task, hours in (("sft-trainjob-op", 48), ("rl-trainjob-op", 72)):
        node = tasks[task]["inputs"]["parameters"]["node_spec"]["runtimeValue"]["constant"]
        assert node["active_deadline_s"] == hours * 3600.0 and type(node["active_deadline_s"]) is float
        spec = NodeSpec(**node)
        common = dict(nodes=2, gpus_per_node=8, config_yaml="", job_labels={})
        t = trainjob_manifest("x", "ns", "sft", spec, **common)["spec"]["activeDeadlineSeconds"]
        p = pytorchjob_manifest("x", "ns", "sft", spec, **common)["spec"]["runPolicy"][
            "activeDeadlineSeconds"
        ]
        assert (type(t), type(p)) == (int, int) and t == p == hours * 3600
        assert json.dumps({"activeDeadlineSeconds": t}) == f'{{"activeDeadlineSeconds": {hours * 3600}}}'
    with pytest.raises(ValueError, match=r"active_deadline_s=1\.5: whole seconds"):
        NodeSpec(image="i", active_deadline_s=1.5)


def test_media_root_outside_the_mount_is_refused(ir, tmp_path):
    """The media volume's mount path is a constant of the IR: kfp-kubernetes' ``PvcMount.mount_path`` is a
    plain string with no parameter form (KFP 2.17.0 kubernetes_platform/proto/kubernetes_executor_config.
    proto), so a ``media_root`` pipeline parameter cannot move it. The data step gets the mount and refuses
    a root outside it (the extraction would stay inside its pod) before doing anything."""
    from kfp.dsl import Artifact, Dataset, Metrics

    from components.data import data_op

    execs = ir["platform"]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    (mount,) = execs["exec-data-op"]["pvcMount"]
    data = ir["spec"]["root"]["dag"]["tasks"]["data-op"]["inputs"]["parameters"]
    assert data["media_mount"]["runtimeValue"]["constant"] == mount["mountPath"] == "/mnt/media"
    assert data["media_root"]["componentInputParameter"] == "media_root"
    outputs = dict(audit=Artifact(name="a"), metrics=Metrics(name="m"), dataset=Dataset(name="d"))
    for root in ("/data/videos", "/mnt/media-other", "/mnt"):
        with pytest.raises(ValueError, match=f"media_root '{root}' is not under the media volume's mount"):
            data_op.python_func(config_yaml="{}", overrides=[], run_id="r", media_root=root,
                                media_mount="/mnt/media", **outputs)  # fmt: skip
    # Under the mount (or the mount itself) passes the check: the step goes on to read its config.
    for root in ("/mnt/media", "/mnt/media/", "/mnt/media/videos"):
        with pytest.raises(Exception) as err:
            data_op.python_func(config_yaml="[not a mapping", overrides=[], run_id="r", media_root=root,
                                media_mount="/mnt/media", **outputs)  # fmt: skip
        assert "not under the media volume" not in str(err.value)


def test_media_root_is_normalised_and_a_configs_own_extract_root_is_checked(tmp_path):
    """The kernel resolves ``..`` (POSIX path resolution), so ``/mnt/media/../../tmp`` is ``/tmp``, inside
    the pod; and a config's own ``extract.root`` wins over ``media_root`` (it is kept when set), so it
    must pass the same check."""
    from kfp.dsl import Artifact, Dataset, Metrics

    from components.data import data_op

    outputs = dict(audit=Artifact(name="a"), metrics=Metrics(name="m"), dataset=Dataset(name="d"))
    for root in ("/mnt/media/../../tmp", "/mnt/media/../media-other", "/mnt/media/.."):
        with pytest.raises(ValueError, match="is not under the media volume's mount"):
            data_op.python_func(config_yaml="{}", overrides=[], run_id="r", media_root=root,
                                media_mount="/mnt/media", **outputs)  # fmt: skip
    for own in ("/tmp/media", "media", "/mnt/media/../x"):
        with pytest.raises(ValueError, match=r"extract.root .* is not under the media volume's mount"):
            data_op.python_func(config_yaml=f"extract:\n  root: {own}\n", overrides=[], run_id="r",
                                media_root="/mnt/media", media_mount="/mnt/media", **outputs)  # fmt: skip


def test_a_multinode_stage_has_no_gpu_parameter(ir, tmp_path):
    """KFP makes every parameter of the pipeline function a run input (kfp 2.17 dsl/graph_component.py,
    from ``inspect.signature``), shown in the run form. A multi-node stage's GPUs are its config's
    ``launch.nodes`` x ``launch.gpus_per_node``, fixed in the IR, so ``sft_gpus`` / ``rl_gpus`` there would
    be knobs that do nothing; a one-node stage keeps its own (a STRING: KFP 2.17's driver reads it as
    text)."""
    params = ir["spec"]["root"]["inputDefinitions"]["parameters"]
    assert not {"sft_gpus", "rl_gpus"} & set(params)
    assert params["eval_gpus"]["parameterType"] == "STRING"
    out = tmp_path / "sft2.yaml"  # SFT on two nodes, RL on one: only rl_gpus is left
    compile_pipeline("train", str(out), warn=False, sft_config=SFT2)
    spec = next(yaml.safe_load_all(out.read_text()))
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert "sft_gpus" not in params and params["rl_gpus"]["defaultValue"] == "8"
    accelerator = spec["deploymentSpec"]["executors"]["exec-rl-op"]["container"]["resources"]["accelerator"]
    assert accelerator["resourceCount"] == "{{$.inputs.parameters['pipelinechannel--rl_gpus']}}"
