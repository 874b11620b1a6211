"""An eval task uses the GPU it reserves, or is refused in its pod before it loads anything.

``EvalConfig()`` ("{}", the pipelines' default until the cluster recipe was baked in) is the in-process engine
on CPU: an 8B model evaluated on CPU in a GPU pod for the task's whole deadline. The local recipes point at
``http://127.0.0.1:8000/v1``, which nothing serves in the eval pod. The GPU count is torch's (injected here:
no GPU on this machine); the servers asked are real HTTP servers on loopback, or a port nobody listens on.
"""

from __future__ import annotations

import shutil
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from paravt_core.config import load_config
from paravt_core.config_base import ConfigError
from paravt_core.eval.config import EvalConfig
from paravt_core.launch.hardware import check_eval_engine
from tests.support.paths import ROOT
from tests.support.ports import free_port

QWEN3_VL_8B = ROOT / "paravt_core/plan/qwen3_vl_8b_instruct.json"  # the shipped config.json of the 8B model


class _Models(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.end_headers()
        self.wfile.write(b'{"data": [{"id": "m"}]}')

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def answering() -> Iterator[str]:
    """A server that answers ``GET /v1/models``; its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _cfg(*overrides: str) -> EvalConfig:
    return load_config(EvalConfig, None, list(overrides))


def test_the_cpu_engine_is_refused_with_gpus_and_allowed_without():
    with pytest.raises(ConfigError) as err:
        check_eval_engine(_cfg(), gpus=1)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("eval: engine.kind=transformers on device cpu with 1 GPU(s) reserved: set ")
    assert "eval_config_yaml (e.g. configs/eval/cluster.yaml)" in message
    with pytest.raises(ConfigError, match="on device cpu"):
        check_eval_engine(_cfg("engine.device=cpu"), gpus=4)
    check_eval_engine(_cfg(), gpus=0)  # a CPU pod: the in-process engine is the right one
    check_eval_engine(_cfg("engine.device=cuda"), gpus=1)


def test_float32_at_8b_is_refused_and_allowed_for_the_tiny_model(tmp_path, tiny_model_dir):
    big = tmp_path / "rl-final"
    big.mkdir()
    shutil.copy(QWEN3_VL_8B, big / "config.json")
    with pytest.raises(ConfigError, match=r"^eval: float32 weights for a 8\.\dB model on 1 GPU\(s\): set "):
        check_eval_engine(_cfg("engine.device=cuda", "engine.dtype=float32", f"model={big}"), gpus=1)
    check_eval_engine(_cfg("engine.device=cuda", "engine.dtype=float32", f"model={tiny_model_dir}"), gpus=1)
    check_eval_engine(_cfg("engine.device=cuda", f"model={big}"), gpus=1)  # the checkpoint's (bf16)


def test_a_server_url_must_answer_from_the_pod(answering):
    silent = f"http://127.0.0.1:{free_port()}/v1"
    for kind in ("openai", "vllm"):
        with pytest.raises(ConfigError) as err:
            check_eval_engine(_cfg(f"engine.kind={kind}", f"engine.base_url={silent}"), gpus=1)
        assert str(err.value).startswith(
            f"eval: no server answers at engine.base_url {silent} from this pod ("
        )
        check_eval_engine(_cfg(f"engine.kind={kind}", f"engine.base_url={answering}"), gpus=1)
        check_eval_engine(
            _cfg(f"engine.kind={kind}", f"engine.base_url={silent}"), gpus=0
        )  # no GPU: not asked
    # a fleet of running servers: every one must answer
    with pytest.raises(ConfigError, match=f"at engine.base_url {silent} "):
        check_eval_engine(_cfg("engine.kind=vllm", f"engine.worker_urls=[{answering},{silent}]"), gpus=1)


def test_a_launched_server_needs_its_python_in_the_image(tmp_path):
    missing = tmp_path / "opt" / "vllm" / "bin" / "python"
    with pytest.raises(ConfigError) as err:
        check_eval_engine(_cfg("engine.kind=vllm", f"engine.python={missing}"), gpus=1)
    assert str(err.value).startswith(
        f"eval: engine.python {missing} is not in this image, so no vllm server can"
    )
    assert "--build-arg VLLM_VERSION" in str(err.value)
    check_eval_engine(_cfg("engine.kind=vllm", f"engine.python={sys.executable}"), gpus=1)
    check_eval_engine(_cfg("engine.kind=vllm"), gpus=1)  # empty: the stage's own Python


def test_the_cluster_recipe_passes_where_its_server_is_installed():
    recipe = ROOT / "configs" / "eval" / "cluster.yaml"
    cfg = load_config(EvalConfig, recipe, [f"engine.python={sys.executable}"])
    check_eval_engine(cfg, gpus=1)
    check_eval_engine(load_config(EvalConfig, recipe), gpus=1, reach=False)  # submit: nothing to ask
    with pytest.raises(ConfigError, match=r"^eval: engine.python /opt/vllm/bin/python is not in this image"):
        check_eval_engine(load_config(EvalConfig, recipe), gpus=1)  # this machine has no /opt/vllm


def test_the_eval_task_refuses_the_cpu_default_in_a_gpu_pod(monkeypatch, tmp_path):
    """The component itself, in a pod with one GPU (torch's count, injected) and the "{}" config: refused before
    the stage starts (nothing written under the output)."""
    import torch
    from kfp.dsl import HTML, Metrics

    from components.eval import eval_op

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("HOME", str(tmp_path))
    out = tmp_path / "eval"
    with pytest.raises(ConfigError, match=r"^eval: engine.kind=transformers on device cpu with 1 GPU\(s\)"):
        eval_op.python_func(config_yaml="{}", overrides=[], benchmark="mlvu", gpus="1",
                            report=HTML(name="r", uri=str(tmp_path / "r")), metrics=Metrics(name="m"),
                            model=str(tmp_path / "model"), output_prefix=str(out))  # fmt: skip
    assert not out.exists()
