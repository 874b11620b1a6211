"""The RL KFP component compiles to IR on the RL image with the stage's inputs and outputs."""

from __future__ import annotations

import inspect

import yaml
from kfp import compiler

from components.launchers.rl import rl_step
from components.rl import rl_op


def test_rl_component_ir(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_JUDGE_API_KEY", "do-not-leak-judge")
    path = tmp_path / "rl.yaml"
    compiler.Compiler().compile(rl_op, str(path))
    text = path.read_text()
    spec = yaml.safe_load(text)
    component = spec["components"]["comp-rl-op"]
    params = component["inputDefinitions"]["parameters"]
    assert set(params) == {"config_yaml", "overrides", "model", "output", "run_prefix", "run_id"}
    # The data arrives as a typed artifact (KFP records it as the step's input); the starting model as its
    # URI, so that KFP's launcher does not copy the checkpoint into the pod (tests/contract/test_pipeline_compile.py).
    assert params["model"]["parameterType"] == "STRING"
    artifacts = component["inputDefinitions"]["artifacts"]
    assert {k: v["artifactType"]["schemaTitle"] for k, v in artifacts.items()} == {"data": "system.Dataset"}
    assert set(component["outputDefinitions"]["artifacts"]) == {"curves", "metrics", "trained", "tensorboard"}
    assert component["outputDefinitions"]["parameters"]["Output"]["parameterType"] == "STRING"
    executor = spec["deploymentSpec"]["executors"]["exec-rl-op"]["container"]
    assert executor["image"].startswith("paravt-rl")
    # the step runs the topology launcher (SGLang on engine.gpus, the learner under torchrun), not run(cfg)
    body = executor["command"][-1]  # the spec's body: one call into the image's launcher
    assert "from components.launchers.rl import rl_step" in body and "return rl_step(" in body
    launcher = inspect.getsource(rl_step)
    # the launch runs under the in-pod reruns (launch.retries)
    assert "from paravt_core.rl.launch import launch" in launcher and "lambda: launch(cfg)" in launcher
    assert "rl.stage import run" not in launcher
    assert "do-not-leak" not in text
