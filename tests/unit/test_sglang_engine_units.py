"""``paravt_core/engines/sglang_engine.py``'s rules that the contract tests left open (the survivors of
its mutation run), each worked out by hand: the un-batched body a router takes, the default launch line, the
mismatch message, the retry accounting of a POST, the abort's own timeout, ``flush_cache``, a refused update
while its broadcast still blocks, the server log, and ``SGLangEngine.launch`` of a real process (a stand-in
``sglang.launch_server`` on ``PYTHONPATH``: SGLang's own server needs a GPU)."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import torch

from paravt_core.engines.base import EngineError, GenerationRequest, SamplingParams
from paravt_core.engines.sglang_engine import (
    PromptTokenMismatch,
    SGLangEngine,
    SGLangServer,
    generate_payload,
    launch_command,
)
from tests.support.ports import free_port


class _Replies(BaseHTTPRequestHandler):
    """POST path -> (status, JSON body) from the server's ``replies``; each path asked is recorded."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.server.asked.append(self.path)  # type: ignore[attr-defined]
        status, body = self.server.replies.get(self.path, (404, {"detail": "not found"}))  # type: ignore[attr-defined]
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Replies)
    httpd.replies, httpd.asked = {}, []  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _url(httpd: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{httpd.server_address[1]}"


def test_a_single_request_body_is_un_batched_field_by_field() -> None:
    request = GenerationRequest(
        input_ids=[5, 6, 7], sampling=SamplingParams(max_new_tokens=4), request_id="q1"
    )
    body = generate_payload([request], single=True)
    assert body == {
        "input_ids": [5, 6, 7],
        "sampling_params": {
            "temperature": 0.0,
            "top_p": 1.0,
            "max_new_tokens": 4,
            "skip_special_tokens": False,
            "no_stop_trim": True,
        },
        "return_logprob": True,
        "logprob_start_len": -1,
        "rid": "q1",
    }
    assert generate_payload([request], single=True, rids=["q1-retry1-ab"])["rid"] == "q1-retry1-ab"


def test_the_default_launch_line() -> None:
    assert launch_command("/models/m") == [
        sys.executable, "-m", "sglang.launch_server", "--model-path", "/models/m", "--host", "127.0.0.1",
        "--port", "30000", "--context-length", "32768", "--tp-size", "1",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="pass both max_pixels and min_pixels"):
        launch_command("/m", max_pixels=100)
    with pytest.raises(ValueError, match="pass both max_pixels and min_pixels"):
        launch_command("/m", min_pixels=100)


def test_the_prompt_mismatch_message_names_both_counts_and_the_fix() -> None:
    err = PromptTokenMismatch("r7", sent=120, counted=131)
    assert (err.sent, err.counted) == (120, 131)
    assert str(err) == (
        "SGLang counted 131 prompt tokens for request r7, we have 120: the server made other image tokens "
        "than our processor (launch it with --mm-process-config for our pixel budget, see "
        "sglang_engine.mm_process_config)"
    )


def test_a_new_engine_has_no_weight_version() -> None:
    assert SGLangEngine("http://127.0.0.1:1/").weight_version is None


def test_a_post_counts_its_attempts_and_says_when_no_time_was_left() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there: every attempt is refused
    engine = SGLangEngine(url, max_retries=1, backoff_s=0.0, timeout_s=10.0)
    with pytest.raises(EngineError) as err:
        asyncio.run(engine._post("/generate", lambda attempt: {"attempt": attempt}))
    assert str(err.value).startswith(f"{url}/generate: ConnectError: ")
    assert str(err.value).endswith(" s)") and "(after 2 attempt(s), " in str(err.value)
    assert (engine.http_calls, engine.retried_posts) == (["/generate", "/generate"], 1)

    spent = SGLangEngine(url, max_total_s=0.0)
    with pytest.raises(EngineError) as err:
        asyncio.run(spent._post("/generate", lambda attempt: {}))
    message = str(err.value)
    assert message.startswith(
        f"{url}/generate: no attempt made; no time left of max_total_s=0 (after 0 attempt(s), "
    )
    assert spent.http_calls == []


def test_an_abort_has_its_own_five_second_timeout() -> None:
    """The abort of a timed-out request must not wait as long as a generation may (``timeout_s``)."""
    seen: list[tuple[str, dict]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, request.extensions["timeout"]))
        return httpx.Response(200, json={})

    async def go() -> None:
        engine = SGLangEngine("http://sglang.test", timeout_s=3600.0)
        client = httpx.AsyncClient(transport=httpx.MockTransport(handler), timeout=engine.timeout_s)
        engine._clients[asyncio.get_running_loop()] = client  # the engine's client for this loop
        await engine._abort(["a", "b"])
        await client.aclose()
        assert engine.http_calls == ["/abort_request", "/abort_request"]

    asyncio.run(go())
    five = {"connect": 5.0, "read": 5.0, "write": 5.0, "pool": 5.0}
    assert seen == [("/abort_request", five), ("/abort_request", five)]


def test_flush_cache_posts_to_its_path_and_fails_on_an_error_status(server: ThreadingHTTPServer) -> None:
    engine = SGLangEngine(_url(server))
    server.replies["/flush_cache"] = (200, {})  # type: ignore[attr-defined]
    asyncio.run(engine.flush_cache())
    server.replies["/flush_cache"] = (500, {})  # type: ignore[attr-defined]
    with pytest.raises(EngineError, match=r"^/flush_cache: HTTP 500$"):
        asyncio.run(engine.flush_cache())
    assert server.asked == ["/flush_cache", "/flush_cache"]  # type: ignore[attr-defined]


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_refused_update_raises_while_its_broadcast_still_blocks(server: ThreadingHTTPServer) -> None:
    """The server refuses the bucket at once; the broadcast (as NCCL's would) blocks until the group's timeout.
    The refusal must come back now, not after the broadcast ends."""
    server.replies["/update_weights_from_distributed"] = (200, {"success": False, "message": "no session"})  # type: ignore[attr-defined]
    engine = SGLangEngine(_url(server))
    release = threading.Event()
    sent: list[torch.Size] = []

    def broadcast(tensor: torch.Tensor) -> None:
        sent.append(tensor.shape)
        release.wait()  # never set before the call returns

    try:
        with pytest.raises(EngineError, match=r"^/update_weights_from_distributed failed: no session$"):
            asyncio.run(
                asyncio.wait_for(
                    engine.update_weights_from_distributed([("w", torch.zeros(2, 3))], broadcast), timeout=60
                )
            )
    finally:
        release.set()
    # the broadcast thread ends once its group lets go (here: released), after asyncio.run closed the loop;
    # it ends quietly (the filterwarnings mark fails the test on an exception in a thread)
    for thread in [t for t in threading.enumerate() if t.name == "paravt-weight-broadcast"]:
        thread.join(timeout=60)
    assert sent == [torch.Size([2, 3])] and engine.weight_version is None


def test_the_server_output_goes_to_its_log_appended(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"earlier run\n")
    command = [sys.executable, "-c", "import sys; print('out line'); print('err line', file=sys.stderr)"]
    proc = SGLangServer(command, "http://127.0.0.1:1", log_path=str(log)).spawn()
    assert proc.process is not None and proc.process.wait(timeout=60) == 0
    proc.stop()
    assert log.read_text().splitlines() == ["earlier run", "out line", "err line"]


_STAND_IN = """\
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

args = sys.argv[1:]
host, port = args[args.index("--host") + 1], int(args[args.index("--port") + 1])
open(sys.argv[0] + ".argv", "w").write(json.dumps(args))


class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *a):
        pass


HTTPServer((host, port), Health).serve_forever()
"""


def test_launch_starts_the_server_on_its_port_with_the_pixel_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "site" / "sglang"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "launch_server.py").write_text(_STAND_IN)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))  # the server process inherits our environment
    port = free_port()
    engine = SGLangEngine.launch("/models/m", port=port, max_pixels=20480, min_pixels=784, start_timeout_s=60)
    try:
        assert engine.base_url == f"http://127.0.0.1:{port}" and engine.server is not None
        assert asyncio.run(engine.health())
        argv = json.loads((package / "launch_server.py.argv").read_text())
        assert argv[argv.index("--port") + 1] == str(port)
        budget = json.loads(argv[argv.index("--mm-process-config") + 1])
        # the Qwen image processor's size: shortest_edge / longest_edge hold the pixel counts (min / max)
        assert budget == {"image": {"size": {"shortest_edge": 784, "longest_edge": 20480}}}
    finally:
        if engine.server is not None:
            engine.server.stop()
    assert engine.server.process is not None and engine.server.process.poll() is not None
