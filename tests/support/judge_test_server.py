"""A real OpenAI-compatible chat server on loopback with scripted replies, for the LLM judge's tests.

``ScriptedChatServer(reply="1.0")`` answers every ``POST /v1/chat/completions`` with that text; ``status``
other than 200 makes it fail (the error body echoes the request's Authorization header, so tests can check
that the client never repeats the key); ``delay_s`` makes it stall before answering. Every request body
and Authorization header is recorded.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ScriptedChatServer:
    def __init__(self, *, reply: str = "1.0", status: int = 200, delay_s: float = 0.0):
        self.reply, self.status, self.delay_s = reply, status, delay_s
        self.bodies: list[dict] = []
        self.auth_headers: list[str | None] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def attempts(self) -> int:
        with self._lock:
            return len(self.bodies)

    def __enter__(self) -> ScriptedChatServer:
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                auth = self.headers.get("Authorization")
                with server._lock:
                    server.bodies.append(body)
                    server.auth_headers.append(auth)
                if server.delay_s:
                    time.sleep(server.delay_s)
                if server.status != 200:
                    payload = {"error": {"message": f"rejected request with header {auth}"}}
                else:
                    payload = {
                        "id": "chatcmpl-test",
                        "object": "chat.completion",
                        "model": body.get("model"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": server.reply},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
                    }
                data = json.dumps(payload).encode()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.send_response(server.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

        return Handler
