"""A real S3 server for the storage tests: moto's server mode, behind a small proxy that
injects latency and faults.

* ``s3_server`` (session): moto's ``ThreadedMotoServer`` on a free port, started once
  per test session and stopped at its end (a daemon thread: it dies with the session).
* ``s3_proxy`` (session): ``benchmarks/counting_proxy.py``'s proxy in front of it, with
  faults added. Clients talk to the proxy;
  each test sets what it injects (``FaultyProxy.reset()`` runs before every test):
  ``latency`` seconds per request, ``throttle(key, n)`` (the first ``n`` GETs of an
  object answer 503 SlowDown), ``reset_mid_body(key, n, after=k)`` (after ``k`` GETs
  pass, the next ``n`` send half the body, then drop the connection). Requests are counted per (method, key),
  body bytes sent per path (``sent(key)``).
* ``s3`` (per test): a fresh bucket, the client environment set with ``monkeypatch``
  (``AWS_ENDPOINT_URL`` = the proxy, ``AWS_ACCESS_KEY_ID=testing`` ...), a boto3
  client that talks to moto directly (uploads and changes bypass the faults), and
  fsspec's S3 instance cache cleared.

Helpers for tests that run a server of their own (one stopped mid-run):
``moto_server(port)``, ``server_client(endpoint)``, ``point_clients_at(monkeypatch, url)``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the benchmarks' proxy, which this one extends
    sys.path.insert(0, str(ROOT))

from benchmarks.counting_proxy import CountingProxy  # noqa: E402
from benchmarks.local_bucket import client_env as _bucket_env  # noqa: E402
from benchmarks.local_bucket import free_port, upload_folder  # noqa: E402

_SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
              b"<Message>Please reduce your request rate.</Message></Error>")


class FaultyProxy(CountingProxy):
    """The benchmarks' counting proxy in front of ``target`` (host, port), one port,
    injecting latency and faults; ``requests``, ``count``, ``sent`` count what passes."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.lock = threading.Lock()
        self.throttles: dict[str, int] = {}
        self.resets: dict[str, int] = {}
        self.passes: dict[str, int] = {}
        super().__init__(target, labels=("s3",))

    @property
    def url(self) -> str:
        return self.urls["s3"]

    def reset(self) -> None:
        """No latency, no faults, counters at zero."""
        super().reset()
        with self.lock:
            self.latency = 0.0
            self.throttles, self.resets, self.passes = {}, {}, {}

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

    def _take(self, table: dict[str, int], path: str) -> bool:
        with self.lock:
            for key, left in table.items():
                if left > 0 and path.endswith(key):
                    table[key] = left - 1
                    return True
        return False

    def refuse(self, method: str, path: str) -> tuple[int, bytes, str] | None:
        if method == "GET" and self._take(self.throttles, path):
            return 503, _SLOW_DOWN, "application/xml"
        return None

    def cut(self, method: str, path: str, status: int, length: int) -> int | None:
        if (method == "GET" and status in (200, 206) and length > 1
                and not self._take(self.passes, path) and self._take(self.resets, path)):
            return length // 2
        return None


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """moto's S3 server (endpoint URL), one per test session."""
    pytest.importorskip("s3fs")
    port = free_port()
    server = moto_server(port)
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
        upload_folder(self.client, self.bucket, folder, prefix)
        return self.url(prefix)

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data)

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=key)


def client_env(proxy_url: str) -> dict[str, str]:
    """The environment a client process needs to reach the local server via the proxy
    (the benchmarks' bucket's, with a session token and ``AWS_REGION`` too)."""
    return {**_bucket_env(proxy_url), "AWS_SESSION_TOKEN": "testing", "AWS_REGION": "us-east-1"}


def moto_server(port: int) -> Any:
    """moto's S3 server on loopback ``port``, started (``.stop()`` ends it)."""
    server = pytest.importorskip("moto.server").ThreadedMotoServer(
        ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server


def server_client(endpoint: str) -> Any:
    """A boto3 client on the S3 server at ``endpoint`` itself (no proxy, no faults)."""
    boto3 = pytest.importorskip("boto3")
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def point_clients_at(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    """This test's AWS client environment at ``endpoint`` (no profile or credentials file
    of the user's), fsspec's S3 instance cache cleared."""
    import s3fs

    for name in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in client_env(endpoint).items():
        monkeypatch.setenv(name, value)
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def s3(s3_server: str, s3_proxy: FaultyProxy, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3]:
    """A fresh bucket; the AWS client environment points at the proxy for this test."""
    import s3fs

    client = server_client(s3_server)
    point_clients_at(monkeypatch, s3_proxy.url)
    s3_proxy.reset()
    bucket = f"datarax-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    try:
        yield S3(bucket, s3_proxy, s3_server, client)
    finally:
        s3_proxy.reset()
        s3fs.S3FileSystem.clear_instance_cache()
