"""vLLM's OpenAI-compatible server, with exact token accounting and the routes that update its weights (vLLM 0.32).

Generation goes through the OpenAI engine's chat completions (``openai_engine.OpenAIEngine``), and every
request also asks for what the RL learner and an exact eval need: the prompt's token ids (compared id for id
with ours), the generated token ids with their log-probs (``Completion.exact_tokens``: nothing is
re-tokenized), special tokens kept in the text, and every sampling field sent (``top_k: -1`` and the
others at their neutral values unless set), so the checkpoint's ``generation_config.json`` never fills one in
silently. Launch the server with ``--logprobs-mode processed_logprobs`` (the log-probs of the temperature the
sampler used) and ``--trust-request-mm-kwargs`` (the pixel budget travels as ``mm_processor_kwargs``).

What this adds besides is the disk push that
``rl.weight_sync.DiskSync`` drives (``pause_generation`` / ``update_weights_from_disk`` /
``continue_generation``, the names SGLang's engine has), done the one way that is safe on vLLM:

1. ``POST /pause?mode=wait``: in-flight requests finish, new ones wait (vLLM has no ``retract``: a
   ``retract`` asked for is ``wait``; ``keep`` would hold KV blocks through the cache reset below);
2. ``POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path": DIR}}``: every worker loads
   the directory's safetensors in place;
3. ``POST /reset_prefix_cache``, ``/reset_mm_cache``, ``/reset_encoder_cache``: without them the next request
   reuses KV blocks and vision encodings of the old weights, and one with an image seen before kills the
   server ("Encoder cache miss");
4. ``POST /update_weight_version {"new_version": V}``, then ``POST /resume``.

A reload is always paused, even when the caller did not pause first. The routes exist only on a server
started with ``VLLM_SERVER_DEV_MODE=1`` (a 404 here says so). vLLM's ``/weight_checker`` is not used to
verify a push: it cannot see CPU linear layers; served log-probs are the check (tests/contract/test_vllm_engine.py).

The push over a process group (``rl.weight_sync.NcclSync``, the methods of ``engines.base.UpdatesOverGroup``)
goes through vLLM's weight-transfer routes into the backend in ``vllm_worker/paravt_weight_transfer.py``
(gloo on CPU, NCCL on GPUs; a server launched with ``transfer_args``):
``/init_weight_transfer_engine`` once (the workers join the group while the trainer does), then per push
``/pause``, ``/start_weight_update``, one ``/update_weights`` per bucket while rank 0 broadcasts its tensors,
``/finish_weight_update`` with the version, the three cache resets, ``/resume``. An exception in a worker
ends vLLM's engine core, so what vLLM would refuse that way is refused here first: an update before the
group is joined, a group on a server without the backend (``/server_info`` says which it has), a finish
with no update open.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from .base import EngineError, GenerationRequest, image_processor_kwargs, v1_url
from .group_push import join_group, send_bucket
from .openai_engine import OpenAIEngine
from .server_process import ServerProcess


def served_model(base_url: str, timeout_s: float = 30.0) -> str:
    """The name of the one model the server at ``base_url`` serves (``GET /v1/models``): vLLM names it after
    its ``--model`` argument (or ``--served-model-name``), which a learner's own model URI need not match."""
    try:
        response = httpx.get(v1_url(base_url) + "/models", timeout=timeout_s)
        response.raise_for_status()
        ids = [c["id"] for c in response.json()["data"]]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as err:
        raise EngineError(f"{base_url}: GET /v1/models failed ({type(err).__name__}: {err})") from err
    if len(ids) != 1:
        raise EngineError(f"{base_url} serves {len(ids)} models ({ids}): one expected")
    return ids[0]


# the receiving side of the process-group push, imported by the server's workers (on its PYTHONPATH)
WORKER_DIR = Path(__file__).resolve().parent / "vllm_worker"
TRANSFER_BACKEND = "paravt_torch"  # vllm_worker/paravt_weight_transfer.py BACKEND


def transfer_args() -> list[str]:
    """Server arguments for the push over a process group: the backend's module imported by every worker (as
    a worker extension: importing it registers the backend) and chosen as the weight-transfer engine."""
    return [
        "--worker-extension-cls", "paravt_weight_transfer.Registered",
        "--weight-transfer-config", json.dumps({"backend": TRANSFER_BACKEND}),
    ]  # fmt: skip


# the pause modes asked for -> vLLM's /pause modes (SGLang's ``retract``, DiskSync's default, is ``wait``)
PAUSE_MODES = {"wait": "wait", "abort": "abort", "retract": "wait"}


def launch_command(
    model_path: str,
    *,
    python: str = sys.executable,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_model_len: int = 32768,
    max_images: int = 64,
    max_pixels: int | None = None,
    min_pixels: int | None = None,
    dtype: str | None = None,
    seed: int = 0,
    tp_size: int = 1,
    enforce_eager: bool = False,
    weight_transfer: bool = False,
    allowed_media_path: str | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The server command for ``model_path`` (pure function; ``python`` has vLLM installed). Always: the
    request's ``mm_processor_kwargs`` trusted (the engine sends the pixel budget with every request; vLLM 0.32
    refuses them otherwise), served log-probs after temperature and top-k/p (``processed_logprobs``: the ones
    the sampler drew from), vLLM's sampling defaults rather than the checkpoint's ``generation_config.json``,
    and a fixed seed. ``max_pixels`` / ``min_pixels``: the same budget as the server's own processor setting;
    ``weight_transfer``: the push over a process group is taken (``transfer_args``); ``allowed_media_path``: the
    directory whose files a request may send as ``file://`` URLs (a ``video_url`` overview).
    ``python -m vllm.entrypoints.openai.api_server``: the ``vllm`` script looks up the distribution ``vllm``,
    which a CPU build installs under another name."""
    cmd = [
        python, "-m", "vllm.entrypoints.openai.api_server",
        "--model", model_path,
        "--host", host,
        "--port", str(port),
        "--max-model-len", str(max_model_len),
        "--limit-mm-per-prompt", json.dumps({"image": max_images, "video": 1}),
        "--trust-request-mm-kwargs",
        "--logprobs-mode", "processed_logprobs",
        "--generation-config", "vllm",
        "--seed", str(seed),
    ]  # fmt: skip
    if (max_pixels is None) != (min_pixels is None):
        raise ValueError("pass both max_pixels and min_pixels (or neither)")
    if max_pixels is not None and min_pixels is not None:
        kwargs = image_processor_kwargs(max_pixels=max_pixels, min_pixels=min_pixels)
        cmd += ["--mm-processor-kwargs", json.dumps(kwargs, separators=(",", ":"))]
    if dtype is not None:
        cmd += ["--dtype", dtype]
    if tp_size != 1:
        cmd += ["--tensor-parallel-size", str(tp_size)]
    if enforce_eager:  # no CUDA graphs / compilation: the CPU build, and quick starts
        cmd.append("--enforce-eager")
    if weight_transfer:
        cmd += transfer_args()
    if allowed_media_path:
        cmd += ["--allowed-local-media-path", allowed_media_path]
    return cmd + list(extra_args)


def server_env(base: dict[str, str] | None = None, *, cpu_kvcache_gib: int = 0) -> dict[str, str]:
    """The server's environment: ``base`` (default ours) with the weight-push routes on
    (``VLLM_SERVER_DEV_MODE``: pause, reload, cache resets; the server listens where only the stage talks to
    it), no usage reports, nothing downloaded; on a CPU build the KV cache size (``VLLM_CPU_KVCACHE_SPACE``, GiB:
    it overrides ``--kv-cache-memory-bytes``), threads left unbound and the worker inside the engine-core process
    (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: else the CPU platform forces the multiprocess executor, whose third
    process takes ~12 s more to start here) when ``cpu_kvcache_gib`` is set. Our own
    ``PYTHONPATH`` is replaced by ``WORKER_DIR`` (the weight-transfer backend, which imports nothing of ours):
    the server's packages are its own environment's."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = str(WORKER_DIR)
    env.update(VLLM_SERVER_DEV_MODE="1", VLLM_NO_USAGE_STATS="1", HF_HUB_OFFLINE="1")
    if cpu_kvcache_gib:
        env.update(VLLM_CPU_KVCACHE_SPACE=str(cpu_kvcache_gib), VLLM_CPU_OMP_THREADS_BIND="nobind",
                   VLLM_ENABLE_V1_MULTIPROCESSING="0")  # fmt: skip
    return env


class VllmServer(ServerProcess):
    """A vLLM server this program started (``launch_command``); ``stop`` ends it and its engine processes."""

    label = "vLLM server"


class VllmEngine(OpenAIEngine):
    name = "vllm"
    server_label = "vLLM server"
    token_level = False  # requests still travel as chat messages (the server renders the template)

    def __init__(self, base_url: str, model: str, **kwargs: Any):
        super().__init__(v1_url(base_url), model, **kwargs)
        self.root = self.base_url.removesuffix("/v1")  # the control routes are not under /v1
        self.paused = False
        self.weight_version: str | None = None
        self.server: VllmServer | None = None  # set by launch(): the process this engine owns
        self.transfer_group: str | None = None  # the group the server's transfer engine joined
        self.updating = False  # a weight update is open on the server (start sent, finish not yet)
        self._pending_version: str | None = None  # the version the open update's last bucket carried
        # why a bucket was cut: the workers wait in a receive that never completes and the engine core with
        # them, so nothing more is sent to this server until a new group is joined (after its restart)
        self.wedged: str | None = None

    @classmethod
    def launch(
        cls, command: list[str], base_url: str, *, env: dict[str, str], log_path: str | None = None,
        start_timeout_s: float = 900.0, **kwargs: Any,
    ) -> VllmEngine:  # fmt: skip
        """Start ``command`` (``launch_command``), wait until it is healthy, and connect to the model it
        serves; ``engine.server.stop()`` ends it."""
        server = VllmServer(command, base_url, env=env, log_path=log_path).start(timeout_s=start_timeout_s)
        try:
            engine = cls(base_url, served_model(base_url), **kwargs)
        except BaseException:
            server.stop()
            raise
        engine.server = server
        return engine

    def payload(self, request: GenerationRequest) -> dict[str, Any]:
        body = super().payload(request)
        # neutral values of what vLLM would otherwise take from generation_config.json; the caller's extra_body
        # (already in ``body``) wins
        for key, value in (("top_k", -1), ("min_p", 0.0), ("repetition_penalty", 1.0),
                           ("presence_penalty", 0.0), ("frequency_penalty", 0.0)):  # fmt: skip
            body.setdefault(key, value)
        body.setdefault("logprobs", True)
        body.setdefault("return_token_ids", True)
        body.setdefault("skip_special_tokens", False)
        return body

    def _generated_ids(self, choice: dict[str, Any]) -> tuple[list[int], bool]:
        ids = choice.get("token_ids")
        if not isinstance(ids, list):
            raise EngineError(f"{self.base_url}: no token_ids in the completion (vLLM >= 0.10 returns them)")
        return [int(i) for i in ids], True

    async def _control(
        self, path: str, body: dict[str, Any] | None = None, *, timeout_s: float | None = None, **params: str
    ) -> Any:
        client, _ = self._bind()
        timeout = {"timeout": timeout_s} if timeout_s is not None else {}
        response = await client.post(self.root + path, json=body, params=params or None, **timeout)
        if response.status_code == 404:
            raise EngineError(
                f"{self.root}{path}: 404: start vLLM with VLLM_SERVER_DEV_MODE=1 for weight updates"
            )
        if response.status_code != 200:
            raise EngineError(
                f"{self.root}{path}: HTTP {response.status_code}: {self._redact(response.text[:300])}"
            )
        return response.json() if response.content else None

    async def pause_generation(self, mode: str = "wait") -> None:
        if mode not in PAUSE_MODES:
            raise EngineError(f"pause mode {mode!r}: one of {', '.join(PAUSE_MODES)}")
        await self._control("/pause", mode=PAUSE_MODES[mode])
        self.paused = True

    async def continue_generation(self) -> None:
        if self.wedged is not None:  # its engine core waits on the cut transfer: /resume would never answer
            raise EngineError(f"{self.root}: {self.wedged}; restart the server")
        await self._control("/resume")
        self.paused = False

    async def update_weights_from_disk(self, model_path: str, *, weight_version: str | None = None) -> None:
        """Reload every weight from the HF directory ``model_path`` (safetensors), paused, caches reset after."""
        pause_here = not self.paused
        if pause_here:
            await self.pause_generation("wait")
        try:
            await self._control(
                "/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": model_path}}
            )
            await self._reset_caches()
            if weight_version is not None:
                await self._control("/update_weight_version", {"new_version": weight_version})
                self.weight_version = weight_version
        finally:
            if pause_here:
                await self.continue_generation()

    async def _reset_caches(self) -> None:
        """Drop what was computed with the old weights: KV blocks, processed inputs, vision encodings."""
        reset = await self._control("/reset_prefix_cache")
        if not (reset or {}).get("success", False):  # blocks still held: stale prefixes would be served
            raise EngineError(f"{self.root}: the prefix cache was not reset after the update ({reset})")
        await self._control("/reset_mm_cache")
        await self._control("/reset_encoder_cache")

    async def transfer_backend(self) -> tuple[str | None, int]:
        """(the server's weight-transfer backend or None, its workers: tensor x pipeline parallel size), from
        ``GET /server_info`` (a dev-mode route)."""
        client, _ = self._bind()
        response = await client.get(self.root + "/server_info", params={"config_format": "json"})
        if response.status_code != 200:
            raise EngineError(
                f"{self.root}/server_info: HTTP {response.status_code} (VLLM_SERVER_DEV_MODE=1?)"
            )
        config = response.json()["vllm_config"]
        backend = (config.get("weight_transfer_config") or {}).get("backend")
        parallel = config.get("parallel_config") or {}
        return backend, int(parallel.get("tensor_parallel_size", 1)) * int(
            parallel.get("pipeline_parallel_size", 1)
        )

    async def init_weights_update_group(
        self,
        master_address: str,
        master_port: int,
        *,
        rank_offset: int,
        world_size: int,
        group_name: str = "weight_update_group",
        backend: str = "nccl",
        trainer_join: Callable[[], Any] | None = None,
        timeout_s: float = 300.0,
    ) -> None:
        """The server's workers join the group (ranks ``rank_offset``..) while ``trainer_join`` joins rank 0;
        refused first, with the flags to add, when the server has not this backend (vLLM would die of it)."""
        served, workers = await self.transfer_backend()
        if served != TRANSFER_BACKEND:
            raise EngineError(
                f"{self.root}: the vLLM server has weight-transfer backend {served!r}, not {TRANSFER_BACKEND!r}: "
                f"start it with PYTHONPATH={WORKER_DIR} and {' '.join(transfer_args())}"
            )
        if world_size != rank_offset + workers:
            raise EngineError(
                f"weight-update group of {world_size} ranks: the server has {workers} worker(s) after rank "
                f"{rank_offset - 1} (set engine.server_ranks={workers})"
            )
        self.updating, self.wedged, self._pending_version = False, None, None  # a new group: a new session
        init_info = {
            "master_address": master_address, "master_port": master_port, "rank_offset": rank_offset,
            "world_size": world_size, "group_name": group_name, "backend": backend, "timeout_s": timeout_s,
        }  # fmt: skip
        await join_group(
            self._control("/init_weight_transfer_engine", {"init_info": init_info}, timeout_s=timeout_s),
            trainer_join,
            group_name=group_name,
            where=f"{master_address}:{master_port}",
            timeout_s=timeout_s,
        )
        self.transfer_group = group_name

    async def destroy_weights_update_group(self, group_name: str) -> None:
        if self.transfer_group != group_name:
            return  # not the group this server joined through us: nothing of ours to release
        await self._control("/shutdown_weight_transfer_engine")
        self.transfer_group = None

    async def begin_weight_update(self) -> None:
        if self.transfer_group is None:  # vLLM's engine core dies of a start with no transfer engine
            raise EngineError(f"{self.root}: no weight-update group joined (init_weights_update_group first)")
        if self.updating:
            raise EngineError(f"{self.root}: a weight update is already open")
        await self._control("/start_weight_update")
        self.updating = True
        self._pending_version = None

    async def update_weights_from_distributed(
        self,
        named_tensors: Sequence[tuple[str, Any]],
        broadcast: Any = None,
        *,
        group_name: str = "weight_update_group",
        weight_version: str | None = None,
        flush_cache: bool = True,
    ) -> None:
        """One bucket: announced, received by the workers while ``broadcast(tensor)`` sends each tensor in order.
        The version and the cache resets (``flush_cache``) take effect at ``end_weight_update``: vLLM applies
        the weights once the update is finished."""
        if not self.updating:
            raise EngineError(
                f"{self.root}: update_weights outside a weight update (begin_weight_update first)"
            )
        if group_name != self.transfer_group:
            raise EngineError(
                f"{self.root}: group {group_name!r} is not the joined one ({self.transfer_group!r})"
            )
        update_info = {
            "names": [n for n, _ in named_tensors],
            "dtype_names": [str(t.dtype).removeprefix("torch.") for _, t in named_tensors],
            "shapes": [list(t.shape) for _, t in named_tensors],
        }
        try:
            await send_bucket(
                self._control("/update_weights", {"update_info": update_info}), named_tensors, broadcast
            )
        except BaseException as err:
            self.wedged = f"a bucket of the weight update was cut ({type(err).__name__}: {err})"
            raise
        if weight_version is not None:
            self._pending_version = weight_version

    async def end_weight_update(self) -> None:
        """Finish the open update (the layers rebuilt with the new weights), version it, reset the caches. No
        update open: nothing sent (vLLM's engine core dies of a finish without a start)."""
        if (
            not self.updating or self.wedged is not None
        ):  # a cut update cannot finish: its server is restarted
            return
        version, self._pending_version = self._pending_version, None
        self.updating = False
        await self._control(
            "/finish_weight_update", {"weight_version": version} if version is not None else {}
        )
        await self._reset_caches()
        if version is not None:
            self.weight_version = version
