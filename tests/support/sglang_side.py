"""Runs SGLang 0.5.23's own code (its wheel, unpacked by ``scripts/setup.sh`` into ``.venv-bench/sglang-site``)
in a process of its own, so its imports and patches never reach the test process. Two modes:

``check``: one JSON object per stdin line, one verdict per stdout line:
  - ``{"op": "generate", "body": {...}}``: the ``/generate`` schema gate (``sglang/api/v1/api_types.py``);
  - ``{"op": "io_struct", "cls": "InitWeightsUpdateGroupReqInput", "body": {...}}``: the body parsed into the
    ``managers/io_struct.py`` class the HTTP route declares, the way FastAPI does it (pydantic, through the
    class's own ``__get_pydantic_core_schema__``), plus the keys the class does not know (silently dropped by
    the server, so a bug on our side);
  - ``{"op": "server_args", "argv": [...]}``: ``ServerArgs.add_cli_args`` + argparse, the parser
    ``launch_server`` uses (returns the parsed values), then ``prepare_server_args`` (``ServerArgs`` built
    from them, its own consistency checks run).
  - ``{"op": "server_env", "argv": [...]}``: the variables SGLang's launch sets in its own environment
    (``entrypoints/engine.py``, ``_set_envs_and_config``), e.g. its NCCL settings;
  - ``{"op": "model_dtype", "path": DIR, "dtype": "auto"}``: the dtype a server launched on DIR with
    ``--dtype`` serves: ``configs/model_config.py``'s ``ModelConfig`` built on it (``_get_and_verify_dtype``).

``names MODEL_DIR``: which of the tensor names on stdin SGLang's Qwen3-VL ``load_weights`` consumes (see
``consumed``).

``serve PORT_FILE OUT_FILE [--port N] [--wedge]``: a loopback weight receiver assembled from SGLang's scheduler-side code: the
session logic of ``SchedulerWeightUpdaterManager`` (begin/end, "must run between begin and end", flush on the
last bucket), the model runner's ``WeightUpdater.init_weights_update_group`` (its ``init_custom_process_group``
join), ``destroy_weights_update_group`` and ``receive_weights_from_distributed`` (its broadcast receive). Only the model is replaced: a
"load" records the received tensors. The tokenizer manager's rule is kept: a weight update waits for
in-flight generation unless generation is paused. On ``/shutdown`` the received tensors are saved to OUT_FILE.
``/weights_checker`` answers SGLang's own checksum of the tensors held (``weights_checksum``). ``--port``: listen
there (a server restarted at the same address); default any free port. ``--wedge``: a distributed update that
fails is never answered and holds the scheduler, so every later control request waits (the fault NCCL makes:
a learner killed mid-bucket leaves receives on the server's stream that never complete; gloo itself fails the
receive and the server goes on).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import types
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def _import_sglang(site: str) -> None:
    # sglang/__init__.py imports the frontend language (IPython, the OpenAI client, ...), which the server
    # modules do not need: register the package without running it, its submodules load as usual.
    package = types.ModuleType("sglang")
    package.__path__ = [str(Path(site) / "sglang")]
    sys.modules["sglang"] = package
    warnings.filterwarnings("ignore")


def server_env(argv: list[str]) -> dict[str, str]:
    """The environment variables SGLang's launch sets in its own process for ``argv`` (from a clean slate of
    ``NCCL_*``): ``entrypoints/engine.py``'s ``_set_envs_and_config`` run on ``prepare_server_args(argv)``.
    ``uvloop`` (imported by the engine module for its event loop policy, unused here) is not in the test
    environment: a module standing in for it gives asyncio's default policy. The version checks of the GPU
    kernels' packages are skipped (``SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK``, SGLang's own switch)."""
    import asyncio

    if "uvloop" not in sys.modules:
        uvloop = types.ModuleType("uvloop")
        uvloop.EventLoopPolicy = asyncio.DefaultEventLoopPolicy
        sys.modules["uvloop"] = uvloop
    from sglang.srt.entrypoints import engine
    from sglang.srt.server_args import prepare_server_args

    saved = dict(os.environ)
    try:
        for key in [k for k in os.environ if k.startswith("NCCL_")]:
            del os.environ[key]
        os.environ["SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK"] = "1"
        before = dict(os.environ)
        engine._set_envs_and_config(prepare_server_args(argv))
        return {k: v for k, v in os.environ.items() if before.get(k) != v}
    finally:
        os.environ.clear()
        os.environ.update(saved)


def weights_checksum(tensors: dict) -> dict:
    """``/weights_checker``'s ``checksum`` answer (``entrypoints/http_server.py:check_weights``) from a one-GPU
    server whose model holds ``tensors`` (name -> tensor): SGLang's ``WeightChecker`` hashes them (its placement
    stated as a world of one, which a launched server publishes), and the engine's checksum is its ranks'
    combined as ``tokenizer_control_mixin.py:check_weights`` does (sha256 over each rank's)."""
    import hashlib

    import torch
    from sglang.srt.runtime_context import get_parallel
    from sglang.srt.utils.weight_checker import WeightChecker

    class Held(torch.nn.Module):  # what WeightChecker reads of a model: its named parameters and buffers
        def named_parameters(self, *args, **kwargs):
            yield from tensors.items()

        def named_buffers(self, *args, **kwargs):
            return iter(())

    model = Held()
    with get_parallel().override(tp_rank=0, tp_size=1, dp_rank=0, attn_dp_size=1, pp_rank=0, pp_size=1):
        checker = WeightChecker(get_model=lambda: model)
    info = checker.handle("checksum", role="target")
    engine = hashlib.sha256(info["per_gpu_checksum"].encode()).hexdigest()
    return {"success": True, "message": "", "ranks": [info], "per_engine_checksum": engine}


def check_loop() -> None:
    import argparse

    import msgspec
    from pydantic import TypeAdapter, ValidationError
    from sglang.api.v1 import api_types
    from sglang.srt.managers import io_struct
    from sglang.srt.server_args import ServerArgs, prepare_server_args

    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        try:
            if op == "generate":
                try:
                    api_types.GenerateRequest.from_json_value(request["body"])
                    result = {"error": None}
                except api_types.JsonContractError as err:
                    result = {"error": str(err)}
            elif op == "io_struct":
                cls = getattr(io_struct, request["cls"])
                known = {f.name for f in msgspec.structs.fields(cls)}
                try:
                    parsed = TypeAdapter(cls).validate_json(json.dumps(request["body"]))
                    fields = {name: getattr(parsed, name) for name in sorted(known)}
                    result = {"error": None, "fields": json.loads(json.dumps(fields, default=str))}
                except ValidationError as err:
                    result = {"error": str(err)}
                result["unknown"] = sorted(set(request["body"]) - known)
            elif op == "server_args":
                parser = argparse.ArgumentParser(prog="sglang serve")
                ServerArgs.add_cli_args(parser)
                try:
                    namespace = parser.parse_args(request["argv"])
                    # then what launch_server does with argv: ServerArgs built, its __post_init__ checks run
                    server_args = prepare_server_args(request["argv"])
                    result = {
                        "error": None,
                        "args": json.loads(json.dumps(vars(namespace), default=str)),
                        "server_args_type": type(server_args).__name__,
                    }
                except SystemExit as err:
                    result = {"error": f"argparse exit {err.code}"}
            elif op == "server_env":
                result = {"error": None, "set": server_env(request["argv"])}
            elif op == "weights_checksum":  # a state dict saved by torch.save, as a server holding it
                import torch

                result = {"error": None, "answer": weights_checksum(torch.load(request["path"]))}
            elif op == "model_dtype":  # the dtype the server would serve: its own ModelConfig, as launched
                from sglang.srt.configs.model_config import ModelConfig

                config = ModelConfig(request["path"], dtype=request["dtype"])
                result = {"error": None, "dtype": str(config.dtype).removeprefix("torch.")}
            else:
                result = {"error": f"unknown op {op}"}
        except Exception as err:  # report, keep serving
            result = {"error": f"{type(err).__name__}: {err}"}
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()


def serve(port_file: str, out_file: str, port: int = 0, wedge: bool = False) -> None:
    import torch
    import torch.distributed as dist
    from pydantic import TypeAdapter
    from sglang.srt.managers import io_struct
    from sglang.srt.managers.scheduler_components.weight_updater import SchedulerWeightUpdaterManager
    from sglang.srt.managers.tp_worker import TpModelWorker
    from sglang.srt.model_executor.model_runner_components.weight_updater import WeightUpdater

    # the server's own world (its TP group of one): SchedulerWeightUpdaterManager barriers on it
    store_path = out_file + ".store"
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=0, world_size=1)

    received: dict[str, torch.Tensor] = {}
    log: list[dict] = []  # what the server did, in order (returned by GET /log)
    state = {"paused": False, "inflight": 0}

    class Runner:  # the model runner: SGLang's WeightUpdater, its model a recorder
        pass

    class RecordingUpdater(WeightUpdater):
        # model-specific steps (restore/postprocess packed weights, model.load_weights) replaced by records
        def begin_weight_update(self) -> None:
            log.append({"event": "runner_begin"})

        def end_weight_update(self, *, run_post_load: bool) -> None:
            log.append({"event": "runner_end", "run_post_load": run_post_load})

        def load_weights_from_distributed(self, named_tensors):
            for name, tensor in named_tensors:
                received[name] = tensor.clone()
            log.append({"event": "load", "names": [n for n, _ in named_tensors]})
            return True, "Succeeded to update parameter online."

        def update_weights_from_disk(self, model_path, load_format, recapture_cuda_graph=False):
            from safetensors.torch import load_file

            for file in sorted(Path(model_path).glob("*.safetensors")):
                received.update(load_file(str(file)))
            log.append({"event": "load_disk", "path": model_path})
            return True, "Succeeded to update model weights."

    runner = Runner()
    runner.weight_updater = RecordingUpdater(
        tp_rank=0,
        device="cpu",
        gpu_id=0,
        model_config=None,
        custom_weight_loaders={},
        get_model=lambda: None,
        update_model_fields=lambda **_: None,
        recapture_cuda_graph=lambda: None,
        get_model_runner=lambda: runner,
    )
    tp_worker = types.SimpleNamespace(model_runner=runner, _model_runner=runner)
    tp_worker.init_weights_update_group = lambda req: TpModelWorker.init_weights_update_group(tp_worker, req)
    tp_worker.destroy_weights_update_group = lambda req: TpModelWorker.destroy_weights_update_group(
        tp_worker, req
    )
    tp_worker.weight_update_runners = lambda: TpModelWorker.weight_update_runners(tp_worker)
    scheduler = types.SimpleNamespace(
        record_weight_version_change=lambda new_version: log.append({"event": "version", "v": new_version})
    )

    def flush_cache(empty_cache: bool = True) -> bool:  # Scheduler.flush_cache: idle, or paused (waiting ok)
        ok = state["inflight"] == 0
        log.append({"event": "flush", "ok": ok})
        return ok

    manager = object.__new__(SchedulerWeightUpdaterManager)  # __post_init__ wants the server's TP group
    for name, value in {
        "tp_worker": tp_worker,
        "draft_worker": None,
        "memory_saver_adapter": None,
        "flush_cache": flush_cache,
        "is_fully_idle": lambda **_: state["inflight"] == 0,
        "scheduler": scheduler,
        "metrics_collector": None,
        "offload_tags": set(),
        "stashed_model_static_state": None,
        "_session": None,
        "tp_cpu_group": dist.group.WORLD,
    }.items():
        setattr(manager, name, value)

    routes = {
        "/init_weights_update_group": ("InitWeightsUpdateGroupReqInput", manager.init_weights_update_group),
        "/destroy_weights_update_group": (
            "DestroyWeightsUpdateGroupReqInput",
            manager.destroy_weights_update_group,
        ),
        "/begin_weight_update": ("BeginWeightUpdateReqInput", manager.begin_weight_update),
        "/end_weight_update": ("EndWeightUpdateReqInput", manager.end_weight_update),
        "/update_weights_from_distributed": (
            "UpdateWeightsFromDistributedReqInput",
            manager.update_weights_from_distributed,
        ),
        "/update_weights_from_disk": ("UpdateWeightFromDiskReqInput", manager.update_weights_from_disk),
    }
    lock = threading.Lock()  # the scheduler handles one control request at a time

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, status: int, payload) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up
                self.wfile.write(data)

        def do_GET(self):
            if self.path == "/log":
                return self._send(200, log)
            if self.path == "/health":
                return self._send(200, {})
            self._send(404, {})

        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}"
            body = json.loads(raw)
            path = self.path.split("?")[0]
            if path == "/shutdown":
                torch.save(received, out_file)
                self._send(200, {})
                threading.Thread(target=httpd.shutdown).start()
                return
            if path == "/snapshot":  # the tensors received so far, saved for the test
                torch.save(received, body["path"])
                return self._send(200, {})
            if path == "/inflight":  # the test's stand-in for requests being generated
                state["inflight"] = int(body["n"])
                return self._send(200, {})
            with lock:
                if path == "/weights_checker":
                    TypeAdapter(io_struct.CheckWeightsReqInput).validate_json(raw)
                    return self._send(200, weights_checksum(received))
                if path == "/pause_generation":
                    req = TypeAdapter(io_struct.PauseGenerationReqInput).validate_json(raw)
                    state["paused"] = True
                    log.append({"event": "pause", "mode": req.mode})
                    if req.mode in ("abort", "retract"):  # running requests leave the batch
                        state["inflight"] = 0
                    return self._send(200, {"message": "Generation paused successfully.", "status": "ok"})
                if path == "/continue_generation":
                    TypeAdapter(io_struct.ContinueGenerationReqInput).validate_json(raw)
                    state["paused"] = False
                    log.append({"event": "continue"})
                    return self._send(200, {"message": "Generation continued successfully.", "status": "ok"})
                if path == "/flush_cache":
                    ok = flush_cache()
                    return self._send(200 if ok else 400, {"success": ok})
                if path not in routes:
                    return self._send(404, {"detail": "Not Found"})
                cls_name, handler = routes[path]
                req = TypeAdapter(getattr(io_struct, cls_name)).validate_json(raw)
                is_update = path.startswith("/update_weights")
                if is_update and not state["paused"] and state["inflight"]:
                    # tokenizer manager: not paused -> the update takes model_update_lock's writer side and
                    # waits for every in-flight request; this receiver cannot finish them, so it says so
                    log.append({"event": "blocked", "path": path})
                    return self._send(400, {"success": False, "message": "waited for in-flight requests"})
                entry = {"event": "request", "path": path, "paused": state["paused"]}
                if path == "/update_weights_from_distributed":
                    entry.update(
                        names=list(req.names),
                        dtypes=list(req.dtypes),
                        flush_cache=req.flush_cache,
                        version=req.weight_version,
                    )
                log.append(entry)
                out = handler(req)
                success, message = out.success, out.message
                if wedge and is_update and not success:  # NCCL's stuck receive: never answered, lock held
                    log.append({"event": "wedged", "path": path, "message": message})
                    threading.Event().wait()
                log.append({"event": "reply", "path": path, "success": success, "message": message})
                return self._send(200 if success else 400, {"success": success, "message": message})

    httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    Path(port_file).write_text(str(httpd.server_address[1]))
    httpd.serve_forever()
    dist.destroy_process_group()


def consumed(model_dir: str) -> None:
    """``names MODEL_DIR``: SGLang's ``Qwen3VLForConditionalGeneration`` built on the meta device for the
    checkpoint's config, as its model runner builds it (``publish`` of the server args, a one-rank world on
    gloo, ``initialize_model_parallel``); then each name of the JSON list on stdin fed alone to its
    ``load_weights`` (a meta tensor of the checkpoint's shape), and printed: the names no parameter's weight
    loader received (``load_weights`` skips an unknown name without a word).

    One stand-in: ``RotaryEmbedding.__init__`` off CUDA imports ``vllm._custom_ops.rotary_embedding`` as its
    forward kernel (``layers/rotary_embedding/base.py``); vLLM is not installed, so a module whose function
    refuses to run is given. Construction and ``load_weights`` never call it. (SGLang's own CPU switch,
    ``SGLANG_USE_CPU_ENGINE=1``, needs its ``sgl_kernel`` CPU build instead, which has no wheel here.)"""
    import asyncio
    import socket

    import torch
    from safetensors import safe_open

    def refuse(*args, **kwargs):
        raise RuntimeError("the rotary kernel stand-in is for construction only")

    vllm, ops = types.ModuleType("vllm"), types.ModuleType("vllm._custom_ops")
    vllm.__path__, ops.rotary_embedding = [], refuse
    sys.modules.setdefault("vllm", vllm)
    sys.modules.setdefault("vllm._custom_ops", ops)
    if "uvloop" not in sys.modules:  # imported for its event loop policy by modules on the way
        uvloop = types.ModuleType("uvloop")
        uvloop.EventLoopPolicy = asyncio.DefaultEventLoopPolicy
        sys.modules["uvloop"] = uvloop
    os.environ["SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK"] = "1"
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.distributed import parallel_state
    from sglang.srt.model_loader.weight_utils import default_weight_loader
    from sglang.srt.models.qwen3_vl import Qwen3VLForConditionalGeneration
    from sglang.srt.runtime_context import SpawnRanks, publish
    from sglang.srt.server_args import prepare_server_args

    names = json.loads(sys.stdin.read())
    publish(
        prepare_server_args(["--model-path", model_dir, "--tp-size", "1", "--device", "cpu"]),  # no GPU here
        role="scheduler",
        ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0),
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    parallel_state.init_distributed_environment(
        world_size=1, rank=0, local_rank=0, distributed_init_method=f"tcp://127.0.0.1:{port}", backend="gloo"
    )
    parallel_state.initialize_model_parallel(backend="gloo")
    with torch.device("meta"):
        model = Qwen3VLForConditionalGeneration(ModelConfig(model_dir).hf_config, quant_config=None)
    hits: list[str] = []
    for pname, param in model.named_parameters(remove_duplicate=False):
        loader = getattr(param, "weight_loader", default_weight_loader)

        def record(p, *args, _loader=loader, _name=pname, **kwargs):
            hits.append(_name)
            return _loader(p, *args, **kwargs)

        param.weight_loader = record
    shapes = {}
    for file in Path(model_dir).glob("*.safetensors"):
        with safe_open(str(file), "pt") as f:
            shapes.update({k: f.get_slice(k).get_shape() for k in f.keys()})  # noqa: SIM118
    unconsumed, targets = [], {}
    for name in names:
        hits.clear()
        model.load_weights([(name, torch.empty(shapes.get(name, [1]), device="meta"))])
        if not hits:
            unconsumed.append(name)
        targets[name] = list(hits)
    params = [n for n, _ in model.named_parameters()]
    print(json.dumps({"unconsumed": unconsumed, "targets": targets, "params": params}))


if __name__ == "__main__":
    _import_sglang(os.environ["PARAVT_SGLANG_SITE"])
    if sys.argv[1] == "check":
        check_loop()
    elif sys.argv[1] == "names":
        consumed(sys.argv[2])
    else:
        options = sys.argv[4:]
        port = int(options[options.index("--port") + 1]) if "--port" in options else 0
        serve(sys.argv[2], sys.argv[3], port=port, wedge="--wedge" in options)
