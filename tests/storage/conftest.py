"""A real S3 server for the storage tests: moto's server mode, behind a small proxy that
injects latency and faults.

* ``s3_server`` (session): moto's ``ThreadedMotoServer`` on a free port, started once
  per test session and stopped at its end (a daemon thread: it dies with the session).
* ``s3_proxy`` (session): a threaded HTTP proxy in front of it. Clients talk to the proxy;
  each test sets what it injects (``FaultyProxy.reset()`` runs before every test):
  ``latency`` seconds per request, ``throttle(key, n)`` (the first ``n`` GETs of an
  object answer 503 SlowDown), ``reset_mid_body(key, n, after=k)`` (after ``k`` GETs
  pass, the next ``n`` send half the body, then drop the connection). Requests are counted per (method, key),
  body bytes sent per path (``sent(key)``).
* ``s3`` (per test): a fresh bucket, the client environment set with ``monkeypatch``
  (``AWS_ENDPOINT_URL`` = the proxy, ``AWS_ACCESS_KEY_ID=testing`` ...), a boto3
  client that talks to moto directly (uploads and changes bypass the faults), and
  fsspec's S3 instance cache cleared.
"""

from __future__ import annotations

import collections
import dataclasses
import http.client
import http.server
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

_HOP_HEADERS = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te",
                "trailer", "upgrade"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class FaultyProxy:
    """Forwards HTTP requests to ``target`` (host, port), injecting latency and faults."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.lock = threading.Lock()
        self.reset()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def setup(self) -> None:
                super().setup()  # headers and body go out at once (no 40 ms delayed ACK)
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def _any(self) -> None:
                proxy.handle(self)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any  # noqa: N815

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", _free_port()), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="s3-proxy", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def reset(self) -> None:
        """No latency, no faults, counters at zero."""
        with self.lock:
            self.latency = 0.0
            self.throttles: dict[str, int] = {}
            self.resets: dict[str, int] = {}
            self.passes: dict[str, int] = {}
            self.requests: collections.Counter[tuple[str, str]] = collections.Counter()
            self.body_bytes: collections.Counter[str] = collections.Counter()  # sent, by path

    def throttle(self, key: str, count: int) -> None:
        """The next ``count`` GETs of any object whose path ends with ``key`` get 503."""
        with self.lock:
            self.throttles[key] = count

    def reset_mid_body(self, key: str, count: int = 1, after: int = 0) -> None:
        """After ``after`` GETs of ``key`` pass, the next ``count`` send half the body, then
        drop the connection."""
        with self.lock:
            self.resets[key] = count
            self.passes[key] = after

    def count(self, method: str, key: str) -> int:
        """Requests seen so far of ``method`` on paths ending with ``key``."""
        with self.lock:
            return sum(n for (m, path), n in self.requests.items() if m == method and path.endswith(key))

    def sent(self, key: str = "") -> int:
        """Body bytes sent back so far for paths ending with ``key``."""
        with self.lock:
            return sum(n for path, n in self.body_bytes.items() if path.endswith(key))

    def _take(self, table: dict[str, int], path: str) -> bool:
        with self.lock:
            for key, left in table.items():
                if left > 0 and path.endswith(key):
                    table[key] = left - 1
                    return True
        return False

    def handle(self, req: http.server.BaseHTTPRequestHandler) -> None:
        path = urlsplit(req.path).path
        with self.lock:
            self.requests[(req.command, path)] += 1
            latency = self.latency
        if latency:
            time.sleep(latency)
        length = int(req.headers.get("Content-Length") or 0)
        body = req.rfile.read(length) if length else None
        if req.command == "GET" and self._take(self.throttles, path):
            message = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
                       b"<Message>Please reduce your request rate.</Message></Error>")
            req.send_response(503)
            req.send_header("Content-Type", "application/xml")
            req.send_header("Content-Length", str(len(message)))
            req.end_headers()
            req.wfile.write(message)
            return
        conn = http.client.HTTPConnection(*self.target, timeout=60)
        try:
            headers = {k: v for k, v in req.headers.items() if k.lower() not in _HOP_HEADERS}
            conn.request(req.command, req.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        cut = req.command == "GET" and resp.status in (200, 206) and len(data) > 1 \
            and not self._take(self.passes, path) and self._take(self.resets, path)
        req.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in _HOP_HEADERS and k.lower() != "content-length":
                req.send_header(k, v)
        if req.command == "HEAD":  # no body: the object's length as the server said it
            req.send_header("Content-Length", resp.getheader("Content-Length") or "0")
            req.end_headers()
            return
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        with self.lock:
            self.body_bytes[path] += len(data) // 2 if cut else len(data)
        if cut:  # half the body, then a dropped connection
            req.wfile.write(data[: len(data) // 2])
            req.wfile.flush()
            req.connection.shutdown(socket.SHUT_RDWR)
            req.close_connection = True
            return
        req.wfile.write(data)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """moto's S3 server (endpoint URL), one per test session."""
    pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_proxy(s3_server: str) -> Iterator[FaultyProxy]:
    """The fault-injecting proxy in front of ``s3_server``, one per session."""
    parts = urlsplit(s3_server)
    proxy = FaultyProxy((parts.hostname or "127.0.0.1", int(parts.port or 80)))
    try:
        yield proxy
    finally:
        proxy.close()


_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


@dataclasses.dataclass
class S3:
    """One test's bucket on the local server."""

    bucket: str
    proxy: FaultyProxy
    server_url: str
    client: Any  # boto3 client on the server itself (no faults)

    def url(self, key: str = "") -> str:
        return f"s3://{self.bucket}/{key}" if key else f"s3://{self.bucket}"

    def upload_folder(self, folder: str | os.PathLike[str], prefix: str) -> str:
        """Upload every file of ``folder`` under ``prefix``; returns the ``s3://`` URL."""
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    self.client.put_object(Bucket=self.bucket, Key=f"{prefix}/{name}", Body=f.read())
        return self.url(prefix)

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data)

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=key)


def client_env(proxy_url: str) -> dict[str, str]:
    """The environment a client process needs to reach the local server via the proxy."""
    return {**_ENV, "AWS_ENDPOINT_URL": proxy_url, "AWS_ENDPOINT_URL_S3": proxy_url}


@pytest.fixture
def s3(s3_server: str, s3_proxy: FaultyProxy, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3]:
    """A fresh bucket; the AWS client environment points at the proxy for this test."""
    boto3 = pytest.importorskip("boto3")
    import s3fs

    for name in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in client_env(s3_proxy.url).items():
        monkeypatch.setenv(name, value)
    s3_proxy.reset()
    s3fs.S3FileSystem.clear_instance_cache()
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    bucket = f"datarax-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    try:
        yield S3(bucket, s3_proxy, s3_server, client)
    finally:
        s3_proxy.reset()
        s3fs.S3FileSystem.clear_instance_cache()
