"""``submit`` (and ``compile`` given configs) refuses what a step would refuse on its GPUs, before anything runs.

Without this, ``submit`` checked only parameter names: a run with the CPU-demo RL config ("{}", ``RlConfig()``:
``device: cpu``) passed, ran the data step and up to 48 h of SFT on 8 GPUs, and was refused by the RL step. A
parameter not given takes the package's root default (KFP 2.17.0 backend/src/v2/compiler/argocompiler/argo.go
fills root parameters from ``GetDefaultValue()``), so the check loads each ``<stage>_config_yaml`` the run
will see: the one given, else the package's. Against a real HTTP server speaking KFP v2beta1
(tests/support/kfp_test_server.py): a refused run sends no request at all.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from paravt_core.cli import main
from tests.support.kfp_test_server import KfpTestServer
from tests.support.paths import ROOT

TOKEN = "tok-config-check"
SFT, RL = ROOT / "configs/sft/qwen3vl_8b.yaml", ROOT / "configs/rl/paragrpo_8b.yaml"
CLUSTER_EVAL, LOCAL_EVAL = ROOT / "configs/eval/cluster.yaml", ROOT / "configs/eval/withtool.yaml"
QWEN3_VL_8B = ROOT / "paravt_core/plan/qwen3_vl_8b_instruct.json"  # the shipped config.json of the 8B model


@pytest.fixture
def kfp(monkeypatch):
    monkeypatch.setenv("KFP_TOKEN", TOKEN)
    with KfpTestServer(token=TOKEN) as server:
        yield server


def _submit(kfp: KfpTestServer, tmp_path: Path, pipeline: str, params: dict | None = None) -> int:
    argv = ["pipeline", "submit", pipeline, "--experiment", "e", "--host", kfp.url, "--namespace", "team-a"]
    if params is not None:
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
        argv += ["--params", str(tmp_path / "params.yaml")]
    return main(argv)


def _defaults(spec: dict) -> dict:
    return {k: v.get("defaultValue") for k, v in spec["root"]["inputDefinitions"]["parameters"].items()}


def _plain(tmp_path: Path) -> str:
    package = tmp_path / "plain.yaml"
    assert main(["pipeline", "compile", "train", str(package)]) == 0
    return str(package)


def test_a_package_with_the_cpu_rl_demo_is_refused_before_any_request(kfp, tmp_path, capsys):
    package = _plain(tmp_path)
    capsys.readouterr()
    assert _submit(kfp, tmp_path, package) == 2
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and "rl: device: cpu with 8 GPU(s) reserved" in err
    assert "pipeline parameter rl_config_yaml" in err and "--rl-config configs/rl/paragrpo_8b.yaml" in err
    assert kfp.state.requests == []
    # the same package with the recipe given as the parameter goes through
    assert _submit(kfp, tmp_path, package, {"rl_config_yaml": RL.read_text()}) == 0
    assert len(kfp.state.calls("POST", "/runs")) == 1


def test_train_by_name_runs_the_recipes(kfp, tmp_path):
    assert _submit(kfp, tmp_path, "train") == 0
    (run,) = kfp.state.calls("POST", "/runs")
    defaults = _defaults(run.body["pipeline_spec"]["pipeline_spec"])
    for name, recipe in (("sft", SFT), ("rl", RL), ("eval", CLUSTER_EVAL)):
        assert yaml.safe_load(defaults[f"{name}_config_yaml"]) == yaml.safe_load(recipe.read_text()), name
    assert yaml.safe_load(defaults["data_config_yaml"]) == {}  # the data step has no GPU and no recipe here


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"eval_config_yaml": "{}"}, "eval: engine.kind=transformers on device cpu with 1 GPU(s) reserved"),
        ({"eval_config_yaml": LOCAL_EVAL.read_text()}, "eval: engine.base_url http://127.0.0.1:8000/v1 is the eval pod's own loopback"),
        ({"eval_gpus": "2", "eval_overrides": ["engine.device=cpu"]}, "eval_config_yaml / eval_overrides: engine.device is a field of engine.kind=transformers, not of engine.kind=vllm"),
        ({"rl_overrides": ["nonsense.x=1"]}, "rl_config_yaml / rl_overrides: unknown config key 'nonsense'"),
        ({"sft_config_yaml": (ROOT / "configs/sft/qwen3vl_8b_2node.yaml").read_text()}, "sft_config_yaml: launch.nodes=2, but this package trains sft on one node"),
        ({"rl_overrides": ["device=cpu"]}, "rl: device: cpu with 8 GPU(s) reserved"),
    ],
)  # fmt: skip
def test_what_a_step_would_refuse_is_refused_at_submit(kfp, tmp_path, capsys, params, expected):
    capsys.readouterr()
    code = _submit(kfp, tmp_path, "train", params)
    _, err = capsys.readouterr()
    assert (code, kfp.state.requests) == (2, []), err
    assert expected in err and err.count("\n") == 1


def test_a_nightly_that_would_fail_every_night_is_not_scheduled(kfp, tmp_path, capsys):
    """The nightly with a local recipe (its server on the eval pod's loopback): one GPU per benchmark each
    night for the per-attempt deadline, then a failed night; refused before the recurring run exists."""
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({"eval_config_yaml": LOCAL_EVAL.read_text()}))
    argv = ["pipeline", "schedule", "create", "nightly", "--name", "n", "--params", str(tmp_path / "p.yaml")]
    capsys.readouterr()
    assert main([*argv, "--host", kfp.url, "--namespace", "team-a"]) == 2
    assert "eval pod's own loopback" in capsys.readouterr()[1]
    assert kfp.state.calls("POST", "/recurringruns") == []
    assert (
        main([*argv[:-2], "--host", kfp.url, "--namespace", "team-a"]) == 0
    )  # the cluster recipe: scheduled
    assert len(kfp.state.calls("POST", "/recurringruns")) == 1


def test_no_gpu_no_gpu_refusal(kfp, tmp_path):
    """An eval task given no GPU runs the in-process engine on CPU as it should (a CPU cluster, a smoke run)."""
    assert _submit(kfp, tmp_path, "train", {"eval_config_yaml": "{}", "eval_gpus": "0"}) == 0


def test_float32_at_8b_is_refused_at_submit(kfp, tmp_path, capsys):
    big = tmp_path / "base"
    big.mkdir()
    shutil.copy(QWEN3_VL_8B, big / "config.json")  # the base model's size is the one every GPU stage holds
    params = {"base_model": str(big), "sft_overrides": ["model.bf16=false"]}
    capsys.readouterr()
    assert _submit(kfp, tmp_path, "train", params) == 2
    _, err = capsys.readouterr()
    assert "sft: float32 weights for a 8." in err and kfp.state.requests == []


def test_compile_refuses_the_configs_it_is_given_and_bakes_the_cluster_eval(tmp_path, capsys):
    out = tmp_path / "t.yaml"
    assert main(["pipeline", "compile", "train", str(out), "--rl-config", "configs/rl/tiny.yaml"]) == 2
    assert "rl: device: cpu with 8 GPU(s) reserved" in capsys.readouterr()[1] and not out.exists()
    assert main(["pipeline", "compile", "nightly", str(out), "--eval-config", str(LOCAL_EVAL)]) == 2
    assert "engine.base_url http://127.0.0.1:8000/v1 is the eval pod's own loopback" in capsys.readouterr()[1]
    # no config given: nothing checked, and the default eval config is the cluster recipe (nightly included)
    for name in ("train", "nightly", "ablations"):
        assert main(["pipeline", "compile", name, str(out)]) == 0
        defaults = _defaults(next(yaml.safe_load_all(out.read_text())))
        assert yaml.safe_load(defaults["eval_config_yaml"]) == yaml.safe_load(CLUSTER_EVAL.read_text()), name


def test_the_recipes_are_found_in_the_image_too(tmp_path, monkeypatch):
    """In the images the package is installed (no ``configs/`` beside it) and the recipes are copied to
    ``<venv>/share/configs`` (images/install.sh): the nightly CronJob compiles there."""
    import sys

    import pipelines.compile as compile_module

    shared = tmp_path / "venv" / "share" / "configs" / "eval"
    shared.mkdir(parents=True)
    (shared / "cluster.yaml").write_text(CLUSTER_EVAL.read_text())
    monkeypatch.setattr(
        compile_module, "__file__", str(tmp_path / "site-packages" / "pipelines" / "compile.py")
    )
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    assert compile_module.recipe("eval/cluster.yaml") == str(shared / "cluster.yaml")
    with pytest.raises(FileNotFoundError, match="no shipped config sft/qwen3vl_8b.yaml under configs/ or "):
        compile_module.recipe_configs("train")
