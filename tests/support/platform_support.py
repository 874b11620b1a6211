"""Shared by several test modules (from tests/contract/test_pipeline_platform.py, where it was first written)."""

import yaml
from kfp import compiler, dsl


@dsl.component(base_image="registry.example/paravt-sft@sha256:" + "b" * 64, install_kfp_package=False)
def probe_op(x: str) -> str:
    return x


def _compile(pipeline_func, tmp_path, monkeypatch) -> tuple[str, dict, dict]:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "leak-canary-secret-91")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "leak-canary-id-91")
    out = tmp_path / "p.yaml"
    compiler.Compiler().compile(pipeline_func, str(out))
    text = out.read_text()
    spec, platform_spec = yaml.safe_load_all(text)
    assert "leak-canary" not in text
    return text, spec, platform_spec["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
