"""Storage under injected faults: an HTTP proxy in front of the real radosgw fails chosen requests.

Faults (per request, decided by a rule that sees the request number, method and path):
- ``"503"``: answer 503 InternalError without forwarding (a transient 5xx);
- ``"slowdown"``: answer 503 SlowDown without forwarding (S3 throttling);
- ``"reset"``: read the request, then reset the TCP connection (RST) without forwarding;
- ``"reset-after"``: forward the request (the server does the work), then reset instead of answering;
- ``"reset-body"``: forward, send the headers and half of the body, then reset;
- ``"cut-body"``: forward, send the headers (the whole ``Content-Length``) and half of the body, then close
  the connection cleanly (FIN, no reset): a body that simply ends early.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import io
import logging
import multiprocessing
import re
import socket
import struct
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import botocore.exceptions as bce
import pytest
from botocore.response import StreamingBody

from paravt_core import storage
from tests.fixtures.s3 import S3Endpoint

MiB = 1024 * 1024
CHILD_TIMEOUT_S = 120  # generous on a loaded 2-core machine; the point is not to hang forever
Rule = Callable[[int, str, str], str | None]  # (request number from 1, method, path) -> fault or None
HOP_HEADERS = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "expect", "te", "upgrade"}


@dataclass
class Seen:
    number: int
    method: str
    path: str
    fault: str | None


@dataclass
class FaultProxy:
    upstream: str
    rule: Rule
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def decide(self, method: str, path: str) -> str | None:
        with self.lock:
            number = len(self.seen) + 1
            fault = self.rule(number, method, path)
            self.seen.append(Seen(number, method, path, fault))
            return fault

    def faults(self) -> list[Seen]:
        return [s for s in self.seen if s.fault]


def make_handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    up = urlsplit(proxy.upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive and 100-continue, like a real S3 endpoint
        upstream_conn: http.client.HTTPConnection | None = None

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
            pass

        def do_any(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            fault = proxy.decide(self.command, self.path)
            if fault == "reset":
                return self.reset()
            if fault in ("503", "slowdown"):
                code = "SlowDown" if fault == "slowdown" else "InternalError"
                payload = (
                    f"<?xml version='1.0'?><Error><Code>{code}</Code><Message>injected</Message></Error>"
                )
                return self.reply(
                    503, "Service Unavailable", [("Content-Type", "application/xml")], payload.encode()
                )
            status, reason, headers, data = self.forward(body)
            if fault == "reset-after":
                return self.reset()
            if fault in ("reset-body", "cut-body") and len(data) > 1:
                self.send_response_only(status, reason)
                for k, v in headers:
                    if k.lower() not in HOP_HEADERS:
                        self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                if fault == "cut-body":
                    self.connection.shutdown(socket.SHUT_WR)  # FIN after the half body
                    self.close_connection = True
                    return None
                return self.reset()
            self.reply(status, reason, headers, data)

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = do_any  # noqa: N815

        def forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
            for attempt in (1, 2):  # a kept-alive upstream connection may have been closed by radosgw
                if self.upstream_conn is None:
                    self.upstream_conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
                conn = self.upstream_conn
                try:
                    conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                    for k, v in self.headers.items():  # Host unchanged: it is part of the SigV4 signature
                        if k.lower() not in HOP_HEADERS:
                            conn.putheader(k, v)
                    conn.endheaders(body)
                    resp = conn.getresponse()
                    data = resp.read()
                    return resp.status, resp.reason, resp.getheaders(), data
                except (http.client.HTTPException, OSError):
                    conn.close()
                    self.upstream_conn = None
                    if attempt == 2:
                        raise
            raise AssertionError("unreachable")

        def reply(self, status: int, reason: str, headers: list[tuple[str, str]], data: bytes) -> None:
            self.send_response_only(status, reason)
            for k, v in headers:
                if k.lower() not in HOP_HEADERS and k.lower() != "content-length":
                    self.send_header(k, v)
            length = next((v for k, v in headers if k.lower() == "content-length"), None)
            self.send_header(
                "Content-Length", length if self.command == "HEAD" and length else str(len(data))
            )
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def reset(self) -> None:
            # SO_LINGER 0: close() sends RST, the client sees "connection reset by peer"
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True

        def finish(self) -> None:
            with contextlib.suppress(OSError):
                super().finish()
            if self.upstream_conn is not None:
                self.upstream_conn.close()

    return Handler


@contextlib.contextmanager
def fault_proxy(upstream: str, rule: Rule, attempts: int | None = None) -> Iterator[FaultProxy]:
    """Serve a proxy to ``upstream`` on 127.0.0.1 and point the storage client at it (until the block ends)."""
    proxy = FaultProxy(upstream, rule)
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(proxy))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.server_address[1]}")
            if attempts is not None:
                mp.setenv("AWS_MAX_ATTEMPTS", str(attempts))
            storage.reset_client()
            yield proxy
    finally:
        server.shutdown()
        server.server_close()
        storage.reset_client()


def every_third(fault: str) -> Rule:
    return lambda n, method, path: fault if n % 3 == 0 else None


def blob(n: int, seed: int) -> bytes:
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.sha256(f"{seed}:{i}".encode()).digest()
        i += 1
    return bytes(out[:n])


def retry_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every failed-attempt record of the storage layer, whatever its level: a request's first failure is a
    WARNING, its later attempts DEBUG and giving up after a retry INFO (one console line per failing request)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == storage.log.name and r.getMessage().startswith(("S3 ", "GET "))
    ]


_WARNED = re.compile(r"^S3 \S+ (\S+) (?:attempt \d+/\d+ failed|failed) \((.*)\); ")


def check_warnings_match_injected(warnings: list[str], injected: list[Seen], http_cause: str | None) -> None:
    """Every injected fault was logged as a failed attempt on its own path; nothing else was logged but
    connection-level failures (a kept-alive connection the server dropped under load is one, and it is
    not ours to count). ``http_cause``: how the cause of an injected HTTP error starts (``HTTP 503``; a
    HEAD answer has no body, so no error code), whose warnings are counted exactly: only the proxy sends them."""
    parsed = [_WARNED.match(w) for w in warnings]
    assert all(parsed), warnings
    by_path = Counter(m.group(1) for m in parsed if m)
    for path, count in Counter(urlsplit(s.path).path for s in injected).items():
        assert by_path[path] >= count, (path, warnings)
    if http_cause is not None:
        assert sum(m.group(2).startswith(http_cause) for m in parsed if m) == len(injected)
    http_extra = [w for w, m in zip(warnings, parsed, strict=True) if m and m.group(2).startswith("HTTP")]
    assert len(http_extra) == (len(injected) if http_cause else 0), warnings


def object_absent(server: S3Endpoint, uri: str) -> bool:
    """Checked straight against radosgw, bypassing the proxy and the code under test."""
    bucket, key = storage.split_s3(uri)
    try:
        server.client().head_object(Bucket=bucket, Key=key)
    except bce.ClientError as exc:
        return exc.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    return False


# ---------------------------------------------------------------------------- retries succeed


@pytest.mark.parametrize("fault", ["503", "reset", "reset-after"])
def test_every_third_request_fails_and_everything_still_arrives(
    fault: str, s3_bucket: str, s3_env: S3Endpoint, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    caplog.set_level(logging.DEBUG, logger=storage.log.name)
    small = {f"obj-{i}.bin": blob(1000 + i, i) for i in range(5)}
    big = blob(11 * MiB, 99)  # 3 parts of 5 MiB, uploaded in parallel
    (tmp_path / "big.bin").write_bytes(big)
    tree = tmp_path / "tree"
    for i in range(4):
        (tree / f"d{i % 2}").mkdir(parents=True, exist_ok=True)
        (tree / f"d{i % 2}" / f"f{i}.bin").write_bytes(blob(3000, 10 + i))
    cfg = storage.transfer_config(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)
    out = f"{s3_bucket}/run"

    with fault_proxy(s3_env.endpoint_url, every_third(fault)) as proxy:
        for name, data in small.items():
            storage.write_bytes(f"{out}/{name}", data)
        storage.upload_file(tmp_path / "big.bin", f"{out}/big.bin", transfer=cfg)
        storage.upload_dir(tree, f"{out}/tree")
        storage.mark_complete(out, {"files": 10})
        assert storage.is_complete(out)
        back = {name: storage.read_bytes(f"{out}/{name}") for name in small}
        storage.download_file(f"{out}/big.bin", tmp_path / "big.back", transfer=cfg)
        storage.download_dir(f"{out}/tree", tmp_path / "tree.back")
        listed = storage.list_uris(out)

    assert back == small
    assert hashlib.sha256((tmp_path / "big.back").read_bytes()).digest() == hashlib.sha256(big).digest()
    for i in range(4):
        rel = f"d{i % 2}/f{i}.bin"
        assert (tmp_path / "tree.back" / rel).read_bytes() == blob(3000, 10 + i)
    assert len(listed) == 5 + 1 + 4 + 1  # small objects, big, tree, _COMPLETE
    faults = proxy.faults()
    assert len(faults) == len(proxy.seen) // 3 and len(faults) >= 10  # faults really were injected
    # each injected fault was logged as a failed attempt on its path, and then retried
    warnings = retry_warnings(caplog)
    check_warnings_match_injected(warnings, faults, "HTTP 503" if fault == "503" else None)
    assert all("retrying" in w for w in warnings)


def test_throttling_is_retried(s3_bucket: str, s3_env: S3Endpoint, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=storage.log.name)
    with fault_proxy(s3_env.endpoint_url, every_third("slowdown")) as proxy:
        for i in range(3):
            storage.write_bytes(f"{s3_bucket}/t{i}", blob(500, i))
        back = [storage.read_bytes(f"{s3_bucket}/t{i}") for i in range(3)]
    assert back == [blob(500, i) for i in range(3)]
    faults = proxy.faults()
    assert len(faults) >= 2  # requests 3 and 6 of (at least) 8
    check_warnings_match_injected(retry_warnings(caplog), faults, "HTTP 503 SlowDown")


def test_connection_reset_mid_body_is_retried(
    s3_bucket: str, s3_env: S3Endpoint, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    caplog.set_level(logging.DEBUG, logger=storage.log.name)
    data = {f"{s3_bucket}/v{i}.bin": blob(200_000 + i, i) for i in range(4)}
    for uri, payload in data.items():
        storage.write_bytes(uri, payload)
    gets = {"n": 0}

    def every_other_get(n: int, method: str, path: str) -> str | None:
        if method != "GET" or "list-type" in path:
            return None
        gets["n"] += 1
        return "reset-body" if gets["n"] % 2 == 1 else None

    with fault_proxy(s3_env.endpoint_url, every_other_get) as proxy:
        back = {uri: storage.read_bytes(uri) for uri in data}
        cut_reads = len(proxy.faults())  # bodies cut under read_bytes (the next one is the download's)
        first = next(iter(data))
        storage.download_file(first, tmp_path / "dl.bin")  # s3transfer's own retry of streaming errors
    assert back == data
    assert (tmp_path / "dl.bin").read_bytes() == data[first]
    body_faults = [s for s in proxy.faults() if s.fault == "reset-body"]
    assert cut_reads == 4 and len(body_faults) == 5  # 4 read_bytes + 1 download, each cut once
    # read_bytes logs one body-read retry per injected cut (the download's is s3transfer's, unlogged)
    assert sum("body read attempt" in w for w in retry_warnings(caplog)) == cut_reads


def test_a_body_that_ends_early_is_never_returned_as_whole(
    s3_bucket: str, s3_env: S3Endpoint, caplog: pytest.LogCaptureFixture
) -> None:
    """A GET body that stops at half its Content-Length and closes cleanly is read again; the caller gets the
    whole object or an error, never the short bytes. Over the wire botocore already counts the body against
    Content-Length (``StreamingBody._verify_content_length``, botocore 1.44.5) and urllib3 too; storage's own
    length check is the last line for a body stream that ends early without either noticing, injected here
    one layer down: the parsed response's stream replaced by its first half, with no length to check."""
    caplog.set_level(logging.DEBUG, logger=storage.log.name)
    uri = f"{s3_bucket}/clip.bin"
    data = blob(100_000, 3)
    storage.write_bytes(uri, data)
    first_get: Rule = lambda n, method, path: "cut-body" if method == "GET" and n == 1 else None  # noqa: E731
    with fault_proxy(s3_env.endpoint_url, first_get) as proxy:
        assert storage.read_bytes(uri) == data
    assert [s.fault for s in proxy.seen] == ["cut-body", None]  # the cut GET, then one whole one
    assert any(
        "attempt 1/5 failed (ResponseStreamingError)" in w for w in retry_warnings(caplog)
    )  # urllib3's

    cuts = {"left": 1}

    def cut_stream(parsed: dict, **_: object) -> None:  # after botocore parsed the GET's headers
        if cuts["left"] > 0:
            cuts["left"] -= 1
            whole = parsed["Body"].read()
            parsed["Body"] = StreamingBody(io.BytesIO(whole[: len(whole) // 2]), None)

    client = storage.s3_client()
    client.meta.events.register("after-call.s3.GetObject", cut_stream)
    try:
        assert storage.read_bytes(uri) == data  # attempt 1 short (50,000 of 100,000 bytes), attempt 2 whole
        assert cuts["left"] == 0
        assert any("body read attempt 1/5 failed (IncompleteReadError)" in w for w in retry_warnings(caplog))
        cuts["left"] = storage.BODY_READ_ATTEMPTS  # every attempt short: an error naming both lengths
        with pytest.raises(bce.IncompleteReadError, match=r"50000.*100000|100000.*50000"):
            storage.read_bytes(uri)
    finally:
        client.meta.events.unregister("after-call.s3.GetObject", cut_stream)


# ---------------------------------------------------------------------------- failures leave nothing


def test_failed_single_put_leaves_no_object(
    s3_bucket: str, s3_env: S3Endpoint, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=storage.log.name)
    uri = f"{s3_bucket}/doomed.bin"
    rule: Rule = lambda n, method, path: "reset" if method == "PUT" and path.endswith("/doomed.bin") else None  # noqa: E731
    with (
        fault_proxy(s3_env.endpoint_url, rule, attempts=3) as proxy,
        pytest.raises(bce.ConnectionClosedError),
    ):
        storage.write_bytes(uri, b"x" * 1000)
    assert len(proxy.faults()) == 3  # bounded: exactly AWS_MAX_ATTEMPTS tries
    assert object_absent(s3_env, uri)
    assert retry_warnings(caplog)[-1].endswith("giving up after 3 attempts")


def test_failed_multipart_upload_is_never_visible(s3_bucket: str, s3_env: S3Endpoint, tmp_path: Path) -> None:
    src = tmp_path / "big.bin"
    src.write_bytes(blob(11 * MiB, 5))
    uri = f"{s3_bucket}/big/doomed.bin"
    rule: Rule = lambda n, method, path: "503" if method == "PUT" and "partNumber=2&" in path + "&" else None  # noqa: E731
    cfg = storage.transfer_config(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)
    with (
        fault_proxy(s3_env.endpoint_url, rule, attempts=3) as proxy,
        pytest.raises(bce.ClientError, match="InternalError"),
    ):
        storage.upload_file(src, uri, transfer=cfg)
    assert len(proxy.faults()) == 3
    assert any("partNumber=1" in s.path and not s.fault for s in proxy.seen)  # other parts did go up
    assert object_absent(s3_env, uri)
    bucket, _ = storage.split_s3(uri)
    uploads = s3_env.client().list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    assert uploads == []  # the half-done multipart upload was aborted, its parts freed


def test_lost_completion_response_is_retried(s3_bucket: str, s3_env: S3Endpoint, tmp_path: Path) -> None:
    """radosgw completes the multipart upload, the answer is lost; the retried Complete must succeed."""
    data = blob(11 * MiB, 6)
    (tmp_path / "big.bin").write_bytes(data)
    lost: list[int] = []

    def first_complete(n: int, method: str, path: str) -> str | None:
        if method == "POST" and "uploadId=" in path and not lost:
            lost.append(n)
            return "reset-after"
        return None

    cfg = storage.transfer_config(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)
    with fault_proxy(s3_env.endpoint_url, first_complete) as proxy:
        storage.upload_file(tmp_path / "big.bin", f"{s3_bucket}/big.bin", transfer=cfg)
    assert [s.method for s in proxy.seen].count("POST") == 3  # create, lost complete, retried complete
    assert storage.read_bytes(f"{s3_bucket}/big.bin") == data


def test_failed_directory_upload_is_never_complete(
    s3_bucket: str, s3_env: S3Endpoint, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    for i in range(4):
        (tree / f"f{i}.bin").write_bytes(blob(2000, i))
    out = f"{s3_bucket}/out"

    def publish() -> None:  # how stages publish a directory: every file, then the marker
        storage.upload_dir(tree, out)
        storage.mark_complete(out, {"files": 4})

    rule: Rule = lambda n, method, path: "reset" if method == "PUT" and path.endswith("/f2.bin") else None  # noqa: E731
    with (
        fault_proxy(s3_env.endpoint_url, rule, attempts=3),
        pytest.raises(bce.ConnectionClosedError),
    ):
        publish()
    assert not storage.is_complete(out)
    assert object_absent(s3_env, f"{out}/_COMPLETE") and object_absent(s3_env, f"{out}/f2.bin")

    # the marker itself failing: every data file is there, yet readers must not trust the output
    rule = lambda n, method, path: "503" if method == "PUT" and path.endswith("/_COMPLETE") else None  # noqa: E731
    with fault_proxy(s3_env.endpoint_url, rule, attempts=3), pytest.raises(bce.ClientError):
        publish()
    assert len(storage.list_uris(out)) == 4
    assert not storage.is_complete(out)

    publish()  # faults gone: a rerun completes
    assert storage.is_complete(out)
    assert [storage.read_bytes(f"{out}/f{i}.bin") for i in range(4)] == [blob(2000, i) for i in range(4)]


def test_a_failed_checkpoint_download_is_fetched_again_on_the_next_resume(
    s3_bucket: str, s3_env: S3Endpoint, tmp_path: Path
) -> None:
    """Resuming from an s3:// checkpoint copies it into the rank's staging folder, every object at once, and
    ``_COMPLETE`` (sorted first) arrives before the others. When the copy fails half way (here every GET of
    ``trainer.json`` answers 503), the next resume must fetch it again, not read a folder whose marker says
    whole while a file is missing."""
    import torch

    from paravt_core import checkpoint

    layer = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=0.1)
    layer(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    with torch.no_grad():
        layer.weight.fill_(0.5)
    uri = checkpoint.save(
        f"{s3_bucket}/run", 3, layer, optimizer, {"step": 3}, staging_root=str(tmp_path / "save"), keep_last=1
    )
    fresh = torch.nn.Linear(3, 2)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=0.1)
    stage = str(tmp_path / "stage")
    rule: Rule = lambda n, method, path: "503" if method == "GET" and path.endswith("/trainer.json") else None  # noqa: E731
    with fault_proxy(s3_env.endpoint_url, rule, attempts=2), pytest.raises(bce.ClientError):
        checkpoint.load(uri, fresh, fresh_opt, staging_root=stage)
    assert checkpoint.load(uri, fresh, fresh_opt, staging_root=stage) == {"step": 3}  # faults gone
    assert torch.equal(fresh.weight, torch.full((2, 3), 0.5))


# ---------------------------------------------------------------------------- secrets


def test_secret_key_never_logged_or_raised(
    s3_bucket: str, s3_env: S3Endpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    caplog.set_level(logging.DEBUG)  # everything, botocore's request-level debug logs included
    errors: list[str] = []
    with fault_proxy(s3_env.endpoint_url, every_third("503"), attempts=2):
        storage.write_bytes(f"{s3_bucket}/a", b"a" * 100)
        assert storage.read_bytes(f"{s3_bucket}/a") == b"a" * 100
        for uri in (f"{s3_bucket}/missing", "s3://no-such-bucket-abc/x"):
            with pytest.raises(FileNotFoundError) as exc:
                storage.read_bytes(uri)
            errors.append(f"{exc.value!s} {exc.value!r}")
    # a request the server rejects for the credentials themselves
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_env.secret_key[::-1])
    storage.reset_client()
    with pytest.raises(bce.ClientError) as exc:
        storage.read_bytes(f"{s3_bucket}/a")
    errors.append(f"{exc.value!s} {exc.value!r} {exc.value.response!r}")
    assert "SignatureDoesNotMatch" in errors[-1]
    text = caplog.text + "\n".join(errors) + repr(s3_env)
    assert len(caplog.records) > 50 and "retrying" in caplog.text  # the capture really saw the traffic
    assert s3_env.secret_key not in text
    assert s3_env.secret_key[::-1] not in text


# ---------------------------------------------------------------------------- cache across processes


def _local_copy_in_child(uri: str, cache: str) -> str:
    return storage.local_copy(uri, cache)


def test_local_copy_downloads_once_across_processes(
    s3_bucket: str, s3_env: S3Endpoint, tmp_path: Path
) -> None:
    """Four processes ask for the same object at once; the proxy (no faults, just counting) sees one GET."""
    uri = f"{s3_bucket}/media/shared.mp4"
    data = blob(300_000, 7)
    storage.write_bytes(uri, data)
    cache = str(tmp_path / "cache")
    with fault_proxy(s3_env.endpoint_url, lambda n, method, path: None) as proxy:
        ctx = multiprocessing.get_context("fork")  # children inherit the proxy endpoint from the environment
        # waited for with a timeout: a child stuck on the lock fails the test instead of hanging the
        # suite, and leaving the block terminates the children whatever happened
        with ctx.Pool(4) as pool:
            paths = pool.starmap_async(_local_copy_in_child, [(uri, cache)] * 4).get(timeout=CHILD_TIMEOUT_S)
    assert len(set(paths)) == 1
    assert Path(paths[0]).read_bytes() == data
    gets = [s for s in proxy.seen if s.method == "GET" and s.path.endswith("/media/shared.mp4")]
    assert len(gets) == 1
