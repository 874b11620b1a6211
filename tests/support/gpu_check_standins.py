"""Stand-ins of ``scripts/gpu_check.py``'s tests (no GPU here): an SGLang-like server holding a model of its own,
and a weight push that loads into it."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from scripts import gpu_check  # as scripts.gpu_check: the name mutmut gives its mutants


def weights_checker_answer(checksums: dict[str, str], engine: str) -> dict:
    """``/weights_checker``'s body as SGLang 0.5.23 builds it (``entrypoints/http_server.py:check_weights``)."""
    info = {"role": "target", "tp_rank": 0, "tp_size": 1, "dp_rank": 0, "dp_size": 1, "pp_rank": 0}
    info.update(pp_size=1, rank=0, size=1)
    rank = {"checksums": checksums, "per_gpu_checksum": "ab" * 32, "parallelism_info": [info]}
    return {"success": True, "message": "", "ranks": [rank], "per_engine_checksum": engine}


# A stand-in for the SGLang server (no GPU here): it serves the weights of the model it holds, answering
# /weights_checker with a checksum over them and scoring requests with that model; ``lands`` False makes every
# weight push a no-op that still answers success (what SGLang does with names its load_weights skips).


def _tensor_hash(t) -> str:
    return hashlib.sha256(t.detach().float().contiguous().numpy().tobytes()).hexdigest()[:16]


def _checksum(model) -> str:
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()


class WrongServer:
    def __init__(self, model, checks: gpu_check.GpuChecks, processor, *, lands: bool = True, sees=True):
        self.model, self.lands, self.sees = model, lands, sees
        request = checks.request(processor)
        other = checks.request(processor, other_images=True)
        image_pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
        self.prompt = gpu_check.score_payload(request, [], image_pad)["input_ids"]
        other_images = gpu_check.score_payload(other, [], image_pad)["image_data"]
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, payload) -> None:
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if self.path == "/weights_checker":
                    names = {k: _tensor_hash(t) for k, t in server.model.state_dict().items()}
                    return self._send(weights_checker_answer(names, _checksum(server.model)))
                if self.path == "/generate":  # scoring: the prompt, then the continuation
                    continuation = body["input_ids"][len(server.prompt) :]
                    # the images sent (sees False: always images A, a server that mis-embeds images)
                    sent = other if server.sees and body["image_data"] == other_images else request
                    scores = gpu_check.local_scores(server.model, sent, continuation)
                    entries = [[None, t, None] for t in server.prompt] + [
                        [lp, t, None] for lp, t in zip(scores, continuation, strict=True)
                    ]
                    return self._send({"meta_info": {"input_token_logprobs": entries}})
                if self.path == "/update_weights_from_disk" and server.lands:
                    from safetensors.torch import load_file

                    for f in Path(body["model_path"]).glob("*.safetensors"):
                        server.model.load_state_dict(load_file(str(f)), strict=False)
                self._send({"success": True, "message": "ok"})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()


class LoadingSync:
    """The NCCL push's effect on the stand-in server: the pushed tensors become its weights (or, ``lands``
    False, nothing happens). A bucket stream (the stage's push) is read as ``NcclSync`` reads it: the
    ``static`` names left out after the first push (``resend_static``, a fault: sent every time)."""

    server: WrongServer | None = None
    resend_static = False

    def __init__(self, client, **kwargs):
        self.pushed_buckets = [1]
        self.static: set[str] = set()
        self.dtype = kwargs.get("dtype")
        self._pushed = False

    def push(self, weights, version):
        if callable(weights):
            skip = self.static if self._pushed and not self.resend_static else set()
            parts = list(weights(1 << 20, self.dtype, skip)[1])
            self.pushed_buckets = [[n for n, _ in b] for b in parts]
            weights = {n: t for b in parts for n, t in b}
        if self.server is not None and self.server.lands:
            self.server.model.load_state_dict(weights, strict=False)
        self._pushed = True

    def close(self) -> None:
        pass
