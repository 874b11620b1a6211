"""Shared by several test modules (from tests/contract/test_engines_sglang.py, where it was first written)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from paravt_core.engines.base import EngineError, GenerationRequest, SamplingParams
from paravt_core.rl.learner import state_checksum
from tests.support.openai_test_server import _decode_data_url

# SGLang 0.5.23 SamplingParams keys the schema accepts (api_types.decode_SamplingParams).
SGLANG_SAMPLING_KEYS = {
    "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k", "min_p",
    "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n", "json_schema",
    "regex", "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens",
    "no_stop_trim", "stream_interval", "logit_bias", "sampling_seed", "custom_params", "beam_width",
    "watermark", "choice",
}  # fmt: skip
# The checkpoint's own image-processor defaults as the contract server applies them before
# --mm-process-config: the real Qwen3-VL's minimum (65536 px = 256²) turns a 224² frame into 256²; scaled to
# the tiny model, a minimum of 96² px turns our 64x64 frames into 96x96 (9 tokens instead of 4).
CHECKPOINT_IMAGE_DEFAULTS = {"size": {"shortest_edge": 96 * 96, "longest_edge": 128 * 128}}


class _ContractServer:
    """Loopback stand-in for an SGLang 0.5.23 server (see the module docstring for what it enforces)."""

    def __init__(
        self,
        engine,
        processor,
        *,
        mm_config: dict | None = None,
        control_success: bool = True,
        delay_first_s: float = 0.0,
        fail_first: int = 0,
        port: int = 0,
        model_path: str = "",
        delay_s: float = 0.0,
    ):
        """``model_path``: what ``/model_info`` reports (a router loads its tokenizer from there);
        ``delay_s``: every ``/generate`` waits this long first (requests stay in flight, e.g. for a kill)."""
        self.engine, self.processor = engine, processor
        self.model_path, self.delay_s = model_path, delay_s
        self.weight_version = "default"  # SGLang's --weight-version default; moved by weight updates
        self.image_kwargs = {**CHECKPOINT_IMAGE_DEFAULTS, **((mm_config or {}).get("image") or {})}
        self.control_success = control_success
        self.delay_first_s, self.fail_first = delay_first_s, fail_first
        tok = processor.tokenizer
        self.pad, self.vstart, self.vend = (
            tok.convert_tokens_to_ids(t) for t in ("<|image_pad|>", "<|vision_start|>", "<|vision_end|>")
        )
        self.calls: list[tuple[str, dict]] = []
        self.arrivals: list[float] = []  # time.monotonic() at which each call of ``calls`` came in
        self.weight_versions: list[str | None] = []  # of every successful /update_weights_from_disk
        self.served_checksums: list[str] = []  # the served weights after each of them
        self.tracked: set[str] = set()  # rids in flight (tokenizer_manager.rid_to_state)
        self.aborted: list[str] = []
        self.in_flight = self.max_in_flight = 0  # /generate requests being answered; the most at once
        self.trainer_joined = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._generate_calls = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status: int, payload) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(data)

            def do_GET(self):  # /health: what SGLangServer.start and a router poll
                if self.path in ("/model_info", "/get_model_info"):  # http_server.model_info's fields we use
                    with server._lock:
                        version = server.weight_version
                    info = {"model_path": server.model_path, "is_generation": True, "weight_version": version}
                    return self._send(200, info)
                if self.path == "/paravt_test/state":  # the test's view: what it was asked, what it serves
                    with server._lock:
                        calls = [{"path": path, "body": body} for path, body in server.calls]
                        state = {"calls": calls, "served_checksums": server.served_checksums}
                    return self._send(200, state)
                self._send(200 if self.path == "/health" else 404, {})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                generate = self.path == "/generate"
                with server._lock:
                    server.calls.append((self.path, body))
                    server.arrivals.append(time.monotonic())
                    server.in_flight += generate
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    status, payload = server.route(self.path, body)
                finally:  # before the reply is sent: the client's next request cannot overlap this one
                    with server._lock:
                        server.in_flight -= generate
                self._send(status, payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = False
        self.httpd.block_on_close = True  # close() joins the handler threads: none outlives its test
        self._thread = threading.Thread(target=self.httpd.serve_forever)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self._stop.set()  # wakes handlers waiting in fault scenarios
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- routes ---------------------------------------------------------------------------------------------

    def route(self, path: str, body: dict):
        if path == "/generate":
            return self.generate(body)
        if path == "/abort_request":
            with self._lock:
                self.aborted.append(body["rid"])
            return 200, {}
        if path == "/flush_cache":
            return 200, {}
        if path == "/init_weights_update_group":
            deadline = time.monotonic() + 30  # the rendezvous: wait for the trainer (or for close())
            while not (self.trainer_joined.is_set() or self._stop.is_set()) and time.monotonic() < deadline:
                self.trainer_joined.wait(0.05)
            joined = self.trainer_joined.is_set() and not self._stop.is_set()
            return 200, {"success": joined and self.control_success, "message": "joined" if joined else "no"}
        if path == "/update_weights_from_disk" and self.control_success:
            return self.reload(body)
        return 200, {"success": self.control_success, "message": "recorded"}

    def reload(self, body: dict):
        """Really load the Hugging Face directory the request names into the served model."""
        try:
            self.engine.load_weights(body["model_path"])
        except (OSError, ValueError, EngineError) as err:
            return 200, {"success": False, "message": f"Failed to update weights: {err}"}
        with self._lock:
            self.weight_versions.append(body.get("weight_version"))
            if body.get("weight_version") is not None:
                self.weight_version = body["weight_version"]
            self.served_checksums.append(state_checksum(self.engine.model.state_dict()))
        return 200, {"success": True, "message": "Succeeded to update model weights."}

    def schema_error(self, body: dict) -> str | None:
        """The 0.5.23 schema gate's verdict on the parts we use (api_types.decode_GenerateRequest)."""
        images = body.get("image_data")
        # decode_MediaInput: a list whose first item is not a list is a list of items (str/dict/null)
        if (
            isinstance(images, list)
            and images
            and not isinstance(images[0], list)
            and any(isinstance(x, list) for x in images)
        ):
            return "invalid type: sequence, expected one of the MediaItem shapes"
        sampling = body.get("sampling_params") or []
        for params in sampling if isinstance(sampling, list) else [sampling]:  # a batch's list, or one
            unknown = set(params) - SGLANG_SAMPLING_KEYS
            if unknown:
                return f"unknown field `{sorted(unknown)[0]}`"
        rids = body.get("rid")
        if isinstance(rids, list) and len(set(rids)) != len(rids):
            return f"Duplicate request IDs detected within the request: {rids}"
        return None

    def generate(self, body: dict):
        error = self.schema_error(body)
        if error:
            return 400, {"error": error}
        ids = body.get("input_ids")
        if isinstance(ids, list) and ids and isinstance(ids[0], int):
            # one request, not a batch (what a router forwards): lists of one inside, one object out
            batched = {"input_ids": [ids], "sampling_params": [body.get("sampling_params") or {}]}
            batched["rid"] = [body["rid"]]
            if body.get("image_data") is not None:
                batched["image_data"] = [body["image_data"]]
            status, payload = self.generate({**body, **batched})
            return status, payload[0] if status == 200 else payload
        rids = body["rid"]
        with self._lock:
            busy = [r for r in rids if r in self.tracked]
            if busy:
                return 400, {"error": {"message": f"Duplicate request ID detected: {busy[0]}"}}
            self.tracked.update(rids)
            self._generate_calls += 1
            call = self._generate_calls
        try:
            if call <= self.fail_first:
                return 503, {"error": "injected failure"}
            if self.delay_s:
                self._stop.wait(self.delay_s)
            if call == 1 and self.delay_first_s:
                self._stop.wait(self.delay_first_s)  # the client gives up; the rids stay tracked meanwhile
                if self._stop.is_set():
                    return 503, {"error": "shutting down"}
            return self.serve(body)
        finally:
            with self._lock:
                self.tracked.difference_update(rids)

    def serve(self, body: dict):
        n = len(body["input_ids"])
        images = body.get("image_data") or [None] * n
        requests, prompt_lengths = [], []
        for ids, params, urls in zip(body["input_ids"], body["sampling_params"], images, strict=True):
            frames = [_decode_data_url(u) for u in urls or []]
            pads = ids.count(self.pad)
            if pads != len(frames):
                return 500, {
                    "error": f"prompt has {pads} image placeholder token(s) but {len(frames)} image(s)"
                }
            pixels = grid = None
            expanded = list(ids)
            if frames:
                at = [i for i, t in enumerate(ids) if t == self.pad]
                if any(ids[i - 1] != self.vstart or ids[i + 1] != self.vend for i in at):
                    return 500, {"error": "image pad outside <|vision_start|>...<|vision_end|>"}
                out = self.processor.image_processor(images=frames, return_tensors="pt", **self.image_kwargs)
                pixels, grid = out["pixel_values"], out["image_grid_thw"]
                counts = iter(int(g.prod()) // 4 for g in grid)  # spatial merge 2x2
                expanded = [x for t in ids for x in ([t] * next(counts) if t == self.pad else [t])]
            tag = "main" if "<|im_start|>system" in self.processor.tokenizer.decode(ids) else "subagent"
            sampling = SamplingParams(
                temperature=params["temperature"],
                top_p=params["top_p"],
                max_new_tokens=params["max_new_tokens"],
                stop=tuple(params.get("stop") or ()),
                seed=params.get("sampling_seed"),
            )
            requests.append(
                GenerationRequest(
                    input_ids=expanded, pixel_values=pixels, image_grid_thw=grid, sampling=sampling, tag=tag
                )
            )
            prompt_lengths.append(len(expanded))
        completions = asyncio.run(self.engine.generate(requests))
        outputs = []
        for c, prompt_tokens in zip(completions, prompt_lengths, strict=True):
            finish = (
                {"type": "stop", "matched": c.stop_reason}
                if c.finish_reason == "stop"
                else {"type": "length", "length": len(c.token_ids)}
            )
            outputs.append(
                {
                    "text": self.processor.tokenizer.decode(c.token_ids, skip_special_tokens=True),
                    "output_ids": c.token_ids,
                    "meta_info": {
                        "id": "x",
                        "finish_reason": finish,
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": len(c.token_ids),
                        "output_token_logprobs": [
                            [lp, t, None] for lp, t in zip(c.logprobs, c.token_ids, strict=True)
                        ],
                        "e2e_latency": c.latency_s,
                    },
                }
            )
        return 200, outputs
