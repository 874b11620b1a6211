"""Defaults that use the GPUs a run reserves.

The rule: a run's parameter that is not given takes the root component's default from the IR (KFP 2.17.0
backend/src/v2/compiler/argocompiler/argo.go: "fill root component default parameters to PipelineJob",
``spec.GetRoot().GetInputDefinitions().GetParameters()[name].GetDefaultValue()``), and the SDK writes a
pipeline function's signature defaults there (kfp 2.17 dsl/graph_component.py reads
``inspect.signature``). ``RlConfig()`` ("{}") is the CPU demo: ``device: cpu``, ``dtype: float32``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from paravt_core.config_base import ConfigError
from paravt_core.launch.hardware import check_uses_gpus, model_params
from paravt_core.rl.config import RlConfig
from pipelines.compile import compile_pipeline
from tests.support.paths import ROOT

SFT_2NODE = ROOT / "configs/sft/qwen3vl_8b_2node.yaml"
RL_2NODE = ROOT / "configs/rl/paragrpo_8b_2node.yaml"
QWEN3_VL_8B = ROOT / "paravt_core/plan/qwen3_vl_8b_instruct.json"  # the shipped config.json of the 8B model


def _defaults(package: Path) -> dict:
    spec = next(yaml.safe_load_all(package.read_text()))
    return {k: v.get("defaultValue") for k, v in spec["root"]["inputDefinitions"]["parameters"].items()}


def test_compiling_with_the_stage_configs_makes_them_the_parameter_defaults(tmp_path):
    """A DAG shaped by --sft-config/--rl-config runs that recipe when the run omits the YAML: not "{}", the
    CPU demo for RL and the 1-node batch for 2-node SFT (grad_accum 4 where the 2-node recipe has 2)."""
    shaped = Path(compile_pipeline("train", str(tmp_path / "t.yaml"), warn=False,
                                   sft_config=str(SFT_2NODE), rl_config=str(RL_2NODE)))  # fmt: skip
    defaults = _defaults(shaped)
    assert "\n" not in defaults["sft_config_yaml"]  # one line: the package's header comments stay comments
    assert yaml.safe_load(defaults["sft_config_yaml"]) == yaml.safe_load(SFT_2NODE.read_text())
    assert yaml.safe_load(defaults["rl_config_yaml"]) == yaml.safe_load(RL_2NODE.read_text())
    assert yaml.safe_load(defaults["rl_config_yaml"])["device"] == "cuda"
    assert yaml.safe_load(defaults["sft_config_yaml"])["trainer"]["grad_accum"] == 2
    plain = _defaults(Path(compile_pipeline("train", str(tmp_path / "p.yaml"), warn=False)))
    assert plain["sft_config_yaml"] == plain["rl_config_yaml"] == "{}"  # no file given: nothing baked in
    assert (RlConfig().device, RlConfig().dtype) == ("cpu", "float32")  # what "{}" means for RL


def test_a_multinode_rl_step_refuses_the_cpu_demo_on_16_gpus(tmp_path, monkeypatch):
    """The launcher pod refuses before it creates the job (no GPUs reserved), in one line naming the
    parameter to set."""
    from kfp.dsl import Artifact, Metrics, Model

    from components.multinode import rl_trainjob_op

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))  # nothing to reach: the refusal comes first
    with pytest.raises(ConfigError) as err:
        rl_trainjob_op.python_func(
            config_yaml="{}", overrides=["engine.kind=sglang", "engine.base_url=http://rollout:30000"],
            data="s3://b/data", model="s3://b/sft/final", nodes=2, gpus_per_node=8, api="trainjob",
            runtime="torch-distributed", poll_s=1.0, node_spec={"image": "registry/paravt-rl:1"}, media_pvc="",
            curves=Artifact(name="c"), metrics=Metrics(name="m"), trained=Model(name="t"),
            tensorboard=Artifact(name="tb"), output="s3://b/rl", run_id="r",
        )  # fmt: skip
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("rl: device: cpu with 16 GPU(s) reserved: set device: cuda")
    assert (
        "pipeline parameter rl_config_yaml" in message
        and "--rl-config configs/rl/paragrpo_8b_2node.yaml" in message
    )


def test_a_one_node_rl_step_refuses_the_cpu_demo_in_a_gpu_pod(monkeypatch, tmp_path):
    """The RL pod with 8 GPUs (torch's device count, injected: no GPU here) and the "{}" config."""
    import torch
    from kfp.dsl import Artifact, Dataset, Metrics, Model

    from components.rl import rl_op

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    with pytest.raises(ConfigError, match=r"^rl: device: cpu with 8 GPU\(s\) reserved: .* rl_config_yaml "):
        rl_op.python_func(config_yaml="{}", overrides=[], data=Dataset(name="d", uri=str(tmp_path / "data")),
                          model=str(tmp_path / "sft"), curves=Artifact(name="c"), metrics=Metrics(name="m"),
                          trained=Model(name="t", uri=str(tmp_path / "t")), tensorboard=Artifact(name="tb"),
                          output=str(tmp_path / "rl"))  # fmt: skip


def test_float32_is_refused_at_8b_and_allowed_for_the_tiny_model(tmp_path, tiny_model_dir):
    big = tmp_path / "sft-final"
    big.mkdir()
    shutil.copy(QWEN3_VL_8B, big / "config.json")
    params = model_params(str(big))
    assert params is not None and 8.0e9 < params < 9.5e9  # Qwen3-VL-8B-Instruct: 8.77B on its model card
    small = model_params(tiny_model_dir)
    assert small is not None and small < 1e8
    with pytest.raises(
        ConfigError, match=r"^sft: float32 weights for a 8\.\dB model on 8 GPU\(s\): set bfloat16"
    ):
        check_uses_gpus("sft", gpus=8, device="cuda", float32=True, model=str(big), parameter="sft_config_yaml",
                        example="configs/sft/qwen3vl_8b.yaml")  # fmt: skip
    check_uses_gpus(
        "sft", gpus=8, device="cuda", float32=True, model=tiny_model_dir, parameter="p", example="e"
    )
    check_uses_gpus("sft", gpus=8, device="cuda", float32=False, model=str(big), parameter="p", example="e")
    check_uses_gpus(
        "rl", gpus=0, device="cpu", float32=True, model=str(big), parameter="p", example="e"
    )  # CPU pod
    assert json.loads((big / "config.json").read_text())  # (the copy is the shipped file)
