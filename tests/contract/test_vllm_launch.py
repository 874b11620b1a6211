"""The vLLM server the stages launch (``engine.kind=vllm`` without ``engine.base_url``): its command, read back
by vLLM 0.32's own serve-argument parser (``vllm/entrypoints/launchers/cli_args.py`` ``make_arg_parser`` and
``validate_parsed_serve_args``, then ``AsyncEngineArgs.from_cli_args``) from ``.venv-vllm``, including the
GPU-only settings (tensor parallel over the reserved GPUs) that no CPU run starts; and its environment."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from paravt_core.config import ConfigError, load_config
from paravt_core.engines.base import image_processor_kwargs
from paravt_core.engines.kinds.base import BuildContext
from paravt_core.engines.kinds.vllm import launch_plan
from paravt_core.engines.vllm_engine import TRANSFER_BACKEND, WORKER_DIR, launch_command, server_env
from paravt_core.rl.config import RlConfig
from tests.fixtures.served import unavailable
from tests.support.paths import ROOT

VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"

# What vLLM makes of the arguments: its own parser and checks, then the engine arguments it would start with;
# one process for the module (importing vLLM takes ~15 s), one JSON argument list per line in, one answer out.
READ_BACK = """
import json, sys
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.utils.argparse_utils import FlexibleArgumentParser
for line in sys.stdin:
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(json.loads(line))
    validate_parsed_serve_args(args)
    e = AsyncEngineArgs.from_cli_args(args)
    print(json.dumps({"model": e.model, "port": args.port, "host": args.host, "max_model_len": e.max_model_len,
        "limit_mm_per_prompt": e.limit_mm_per_prompt, "mm_processor_kwargs": e.mm_processor_kwargs,
        "dtype": e.dtype, "tensor_parallel_size": e.tensor_parallel_size, "seed": e.seed,
        "logprobs_mode": e.logprobs_mode, "generation_config": e.generation_config,
        "trust_request_mm_kwargs": args.trust_request_mm_kwargs, "enforce_eager": e.enforce_eager,
        "worker_extension_cls": e.worker_extension_cls,
        "weight_transfer_backend": e.weight_transfer_config and e.weight_transfer_config.backend}),
        flush=True)
"""


@pytest.fixture(scope="module")
def vllm_parser() -> Iterator[subprocess.Popen]:
    if not VLLM_PYTHON.exists():
        unavailable(
            f"vLLM's CPU build is not set up in {VLLM_PYTHON.parent.parent} (scripts/setup.sh makes it)"
        )
    process = subprocess.Popen([str(VLLM_PYTHON), "-c", READ_BACK], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    yield process
    process.stdin.close()
    process.wait(60)


def _read_back(parser: subprocess.Popen, command: list[str]) -> dict:
    """What vLLM's parser makes of ``command``'s server arguments (a refused one ends the process: the read
    then fails)."""
    assert command[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    parser.stdin.write(json.dumps(command[3:]) + "\n")
    parser.stdin.flush()
    line = parser.stdout.readline()
    assert line, f"vLLM's parser refused {command[3:]} (exit {parser.poll()})"
    return json.loads(line)


def test_the_rl_launch_on_two_reserved_gpus_as_vllm_reads_it(vllm_parser, tiny_model_dir: str) -> None:
    cfg = load_config(RlConfig, None, ["engine.kind=vllm", "engine.gpus=[6,7]", "engine.port=8011",
                                       "dtype=bfloat16", f"model={tiny_model_dir}"])  # fmt: skip
    low, high = cfg.agent.processor_pixels
    context = BuildContext(stage="rl", model=cfg.model, dtype=cfg.dtype, pixels=(low, high), env={"A": "1"})
    command, env, base_url = launch_plan(cfg.engine, context)
    assert base_url == "http://127.0.0.1:8011"
    assert _read_back(vllm_parser, command) == {
        "model": tiny_model_dir,
        "port": 8011,
        "host": "127.0.0.1",
        "max_model_len": 32768,
        "limit_mm_per_prompt": {"image": 64, "video": 1},
        # the encoder's budget as the server's own processor setting, the same dict our processor gets
        "mm_processor_kwargs": image_processor_kwargs(max_pixels=high, min_pixels=low),
        "dtype": "bfloat16",
        "tensor_parallel_size": 2,  # engine.tp_size 0: all of engine.gpus
        "seed": 0,
        "logprobs_mode": "processed_logprobs",
        "generation_config": "vllm",  # never the checkpoint's generation_config.json
        "trust_request_mm_kwargs": True,
        "enforce_eager": False,
        "worker_extension_cls": "",  # the disk push needs no transfer backend
        "weight_transfer_backend": None,
    }
    assert env["A"] == "1" and env["VLLM_SERVER_DEV_MODE"] == "1"  # the stage's environment (its GPUs) kept
    assert "VLLM_CPU_KVCACHE_SPACE" not in env  # a GPU launch


def test_the_tiny_cpu_server_the_tests_start_as_vllm_reads_it(vllm_parser, tiny_model_dir: str) -> None:
    command = launch_command(tiny_model_dir, port=8012, max_model_len=4096, max_images=8, dtype="float32",
                             enforce_eager=True)  # fmt: skip
    read = _read_back(vllm_parser, command)
    assert (read["max_model_len"], read["limit_mm_per_prompt"], read["dtype"]) == (
        4096,
        {"image": 8, "video": 1},
        "float32",
    )
    assert (
        read["enforce_eager"] is True
        and read["mm_processor_kwargs"] is None
        and read["tensor_parallel_size"] == 1
    )


def test_a_half_pixel_budget_and_the_cpu_environment() -> None:
    with pytest.raises(ValueError, match="both max_pixels and min_pixels"):
        launch_command("/m", max_pixels=1024)
    env = server_env({"PYTHONPATH": "/ours", "HOME": "/h"}, cpu_kvcache_gib=2)
    # the server's packages are its own venv's, and the one module of ours its workers import is alone there
    assert env["PYTHONPATH"] == str(WORKER_DIR) and env["HOME"] == "/h"
    assert sorted(p.name for p in WORKER_DIR.glob("*.py")) == ["paravt_weight_transfer.py"]
    assert (env["VLLM_CPU_KVCACHE_SPACE"], env["VLLM_CPU_OMP_THREADS_BIND"]) == ("2", "nobind")
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"  # the worker in the engine core: a process fewer
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in server_env({})  # on GPUs vLLM's own choice
    assert (env["HF_HUB_OFFLINE"], env["VLLM_NO_USAGE_STATS"]) == ("1", "1")


def test_the_release_recipe_launches_vllm_as_the_release_ran_it(vllm_parser, tiny_model_dir: str) -> None:
    """``configs/eval/release_vllm.yaml``: the release's context and a whole episode's images, and no pixel
    budget of ours on the server (the release's server keeps the checkpoint's processor settings)."""
    from paravt_core.eval import stage
    from paravt_core.eval.config import EvalConfig

    cfg = load_config(
        EvalConfig, ROOT / "configs" / "eval" / "release_vllm.yaml", [f"model={tiny_model_dir}"]
    )
    assert stage._server_pixels(cfg) is None
    paravt = load_config(EvalConfig, None, ["engine.kind=vllm"])
    assert stage._server_pixels(paravt) == paravt.agent.processor_pixels
    context = BuildContext(stage="eval", model=cfg.model, pixels=stage._server_pixels(cfg))
    command, _, _ = launch_plan(cfg.engine, context)
    assert command[0] == "/opt/vllm/bin/python"
    read = _read_back(vllm_parser, ["python", *command[1:]])
    assert (read["max_model_len"], read["limit_mm_per_prompt"], read["mm_processor_kwargs"]) == (
        65536,
        {"image": 304, "video": 1},
        None,
    )


def test_the_cluster_recipe_launches_vllm_in_the_eval_pod_as_vllm_reads_it(
    vllm_parser, tiny_model_dir
) -> None:
    """``configs/eval/cluster.yaml`` (the pipelines' default eval config): no server URL, so the stage starts
    vLLM from the eval image's /opt/vllm on loopback, with our pixel budget applied by the server (the
    default preset sends it with every request, hence ``--trust-request-mm-kwargs``)."""
    from paravt_core.eval import stage
    from paravt_core.eval.config import EvalConfig

    cfg = load_config(EvalConfig, ROOT / "configs" / "eval" / "cluster.yaml", [f"model={tiny_model_dir}"])
    assert (cfg.engine.kind, cfg.engine.base_url, cfg.preset) == ("vllm", "", "paravt")
    context = BuildContext(stage="eval", model=cfg.model, pixels=stage._server_pixels(cfg))
    command, _, url = launch_plan(cfg.engine, context)
    assert command[0] == "/opt/vllm/bin/python" and url == "http://127.0.0.1:8000"
    read = _read_back(vllm_parser, ["python", *command[1:]])
    low, high = cfg.agent.processor_pixels
    assert (read["max_model_len"], read["limit_mm_per_prompt"]) == (65536, {"image": 304, "video": 1})
    assert read["trust_request_mm_kwargs"] and read["host"] == "127.0.0.1"
    assert read["mm_processor_kwargs"] == {"size": {"shortest_edge": low, "longest_edge": high}}


def test_the_push_over_a_group_launches_the_transfer_backend_as_vllm_reads_it(
    vllm_parser, tiny_model_dir
) -> None:
    """``engine.weight_sync=distributed``: every worker imports our backend's module (the worker extension) and
    builds its transfer engine from it; the backend's own name is the one the engine asks the server for."""
    cfg = load_config(
        RlConfig, None, ["engine.kind=vllm", "engine.weight_sync=distributed", f"model={tiny_model_dir}"]
    )
    command, _, _ = launch_plan(cfg.engine, BuildContext(stage="rl", model=cfg.model))
    read = _read_back(vllm_parser, command)
    assert (read["worker_extension_cls"], read["weight_transfer_backend"]) == (
        "paravt_weight_transfer.Registered",
        TRANSFER_BACKEND,
    )
    source = (WORKER_DIR / "paravt_weight_transfer.py").read_text()
    assert f'BACKEND = "{TRANSFER_BACKEND}"' in source and "paravt_core" not in source.split('"""', 2)[2]


def test_a_fleet_launch_gives_each_server_its_port_and_share_of_the_gpus(vllm_parser, tiny_model_dir) -> None:
    cfg = load_config(RlConfig, None, ["engine.kind=vllm", "engine.servers=2", "engine.gpus=[2,3,4,5]",
                                       "engine.port=8011", f"model={tiny_model_dir}"])  # fmt: skip
    context = BuildContext(stage="rl", model=cfg.model, env={"CUDA_VISIBLE_DEVICES": "2,3,4,5"})
    plans = [launch_plan(cfg.engine, context, i) for i in range(2)]
    assert [(env["CUDA_VISIBLE_DEVICES"], url) for _, env, url in plans] == [
        ("2,3", "http://127.0.0.1:8011"),
        ("4,5", "http://127.0.0.1:8012"),
    ]
    read = _read_back(vllm_parser, plans[1][0])
    assert (read["port"], read["tensor_parallel_size"]) == (8012, 2)
    for bad, why in (
        (["engine.servers=2", "engine.weight_sync=distributed"], "takes weight pushes from disk"),
        (["engine.servers=2", "engine.base_url=http://h:1"], "leave engine.base_url empty"),
        (["engine.servers=2", "engine.gpus=[1,2,3]"], "do not split evenly"),
        (["engine.worker_urls=[http://a:1]", "engine.base_url=http://h:1"], "names a fleet's servers"),
    ):
        with pytest.raises(ConfigError, match=why):
            load_config(RlConfig, None, ["engine.kind=vllm", *bad])
