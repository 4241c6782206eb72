"""A loopback HTTP proxy that adds latency to every request and counts, exactly, the
requests and the body bytes it sends back — per listening port, so each simulated host
of a benchmark gets its own port and its own counts.

Used by ``benchmarks/bucket_modes.py`` in front of a local S3 server (moto): the bytes a
reader downloads are the bytes this proxy writes to it, whatever the client library does.
Bodies are streamed in pieces of 1 MiB (a 10 MB object is never held whole).

``GET /_proxy/stats`` on any port answers the counts of every port as JSON (neither
delayed nor counted); :func:`read_stats` asks for them from another process. In this
process, :meth:`CountingProxy.count` and :meth:`CountingProxy.sent` give the requests
and body bytes of every port by path; a subclass may answer a request itself
(:meth:`CountingProxy.refuse`) or cut a body short (:meth:`CountingProxy.cut`), as the
storage tests' fault-injecting proxy does.

Example:
    >>> import http.server, threading, urllib.request
    >>> class Hello(http.server.BaseHTTPRequestHandler):
    ...     def do_GET(self):
    ...         self.send_response(200); self.send_header("Content-Length", "5")
    ...         self.end_headers(); self.wfile.write(b"hello")
    ...     def log_message(self, *args): pass
    >>> origin = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    >>> _ = threading.Thread(target=origin.serve_forever, daemon=True).start()
    >>> proxy = CountingProxy(origin.server_address[:2], labels=("h0", "h1"))
    >>> urllib.request.urlopen(proxy.urls["h1"] + "/a").read()
    b'hello'
    >>> stats = read_stats(proxy.urls["h0"])
    >>> stats["h1"]["requests"], stats["h1"]["body_bytes"], stats["h0"]["requests"]
    (1, 5, 0)
    >>> proxy.close(); origin.shutdown(); origin.server_close()
"""

from __future__ import annotations

import collections
import dataclasses
import http.client
import http.server
import json
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

__all__ = ["STATS_PATH", "Answer", "CountingProxy", "read_stats"]

STATS_PATH = "/_proxy/stats"
PIECE = 1 << 20
_HOP_HEADERS = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te",
                "trailer", "upgrade", "content-length"}


class _Server(http.server.ThreadingHTTPServer):
    # a client opening its 64 connections at once overflows the default backlog of 5:
    # the connections dropped wait for TCP's retransmission (1 s, then 3 s ...)
    request_queue_size = 256


@dataclasses.dataclass
class Answer:
    """An origin's answer: status, reason, headers, ``read(n)`` of its body, ``close()``."""

    status: int
    reason: str
    headers: list[tuple[str, str]]
    read: Callable[..., bytes]
    close: Callable[[], None]

    def getheader(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def getheaders(self) -> list[tuple[str, str]]:
        return self.headers


class _Counts:
    """One port's counts (guarded by the proxy's lock)."""

    def __init__(self) -> None:
        self.requests: collections.Counter[str] = collections.Counter()  # by method
        self.body_bytes = 0
        self.statuses: collections.Counter[int] = collections.Counter()

    def as_dict(self) -> dict[str, Any]:
        return {"requests": sum(self.requests.values()), "by_method": dict(self.requests),
                "body_bytes": self.body_bytes,
                "statuses": {str(k): v for k, v in sorted(self.statuses.items())}}


class CountingProxy:
    """Forwards HTTP requests to ``target`` (host, port) from one loopback port per label,
    ``latency`` seconds added to each request, counting requests and body bytes per label
    (:meth:`stats`) and, over every port, per path (``requests`` by (method, path),
    ``body_bytes`` by path; :meth:`count`, :meth:`sent`).

    Args:
        target: the origin server's (host, port).
        labels: one listening port each (``urls[label]``).
        latency: seconds each request waits before it is forwarded.
    """

    def __init__(self, target: tuple[str, int], labels: Iterable[str] = ("h0",),
                 latency: float = 0.0) -> None:
        self.target = (str(target[0]), int(target[1]))
        self.latency = float(latency)
        self._lock = threading.Lock()
        self._counts: dict[str, _Counts] = {label: _Counts() for label in labels}
        self.requests: collections.Counter[tuple[str, str]] = collections.Counter()
        self.body_bytes: collections.Counter[str] = collections.Counter()
        self._servers: dict[str, http.server.ThreadingHTTPServer] = {}
        for label in self._counts:
            server = _Server(("127.0.0.1", 0), self._handler(label))
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, args=(0.05,), name=f"proxy-{label}",
                             daemon=True).start()
            self._servers[label] = server

    @property
    def urls(self) -> dict[str, str]:
        """``http://127.0.0.1:<port>`` of each label."""
        return {label: "http://{}:{}".format(*s.server_address[:2])
                for label, s in self._servers.items()}

    def stats(self) -> dict[str, dict[str, Any]]:
        """Each label's counts: ``requests``, ``by_method``, ``body_bytes``, ``statuses``."""
        with self._lock:
            return {label: c.as_dict() for label, c in self._counts.items()}

    def count(self, method: str, key: str = "") -> int:
        """Requests of ``method`` so far on paths ending with ``key`` (every port)."""
        with self._lock:
            return sum(n for (m, path), n in self.requests.items()
                       if m == method and path.endswith(key))

    def sent(self, key: str = "") -> int:
        """Body bytes sent back so far for paths ending with ``key`` (every port)."""
        with self._lock:
            return sum(n for path, n in self.body_bytes.items() if path.endswith(key))

    def reset(self) -> None:
        """Every count back to zero."""
        with self._lock:
            for label in self._counts:
                self._counts[label] = _Counts()
            self.requests.clear()
            self.body_bytes.clear()

    def close(self) -> None:
        for server in self._servers.values():
            server.shutdown()
            server.server_close()

    # ------------------------------------------------------------------ for a subclass
    def refuse(self, method: str, path: str) -> tuple[int, bytes, str] | None:
        """An answer (status, body, content type) to give instead of forwarding the
        request, or ``None`` (the default): forward it."""
        return None

    def cut(self, method: str, path: str, status: int, length: int) -> int | None:
        """How many bytes of a ``length``-byte body to send before dropping the
        connection, or ``None`` (the default): the whole body."""
        return None

    # ------------------------------------------------------------------ serving
    def _handler(self, label: str) -> type[http.server.BaseHTTPRequestHandler]:
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # headers and body go in separate writes: with Nagle's algorithm a small
            # body waits for the client's delayed ACK (~40 ms a request on Linux)
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def setup(self) -> None:
                super().setup()  # headers and body go out at once: no 40 ms delayed ACK
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def _any(self) -> None:
                proxy._forward(label, self)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any  # noqa: N815

        return Handler

    def _forward(self, label: str, req: http.server.BaseHTTPRequestHandler) -> None:
        if req.command == "GET" and req.path == STATS_PATH:
            self._answer(req, 200, json.dumps(self.stats()).encode(), "application/json")
            return
        path = urlsplit(req.path).path
        with self._lock:
            self._counts[label].requests[req.command] += 1
            self.requests[(req.command, path)] += 1
        if self.latency:
            time.sleep(self.latency)
        length = int(req.headers.get("Content-Length") or 0)
        body = req.rfile.read(length) if length else None
        refused = self.refuse(req.command, path)
        if refused is not None:
            status, data, kind = refused
            with self._lock:
                self._counts[label].statuses[status] += 1
            self._answer(req, status, data, kind)
            with self._lock:
                self._counts[label].body_bytes += len(data)
                self.body_bytes[path] += len(data)
            return
        resp = self.origin(req, body)
        try:
            size = resp.getheader("Content-Length")
            with self._lock:
                self._counts[label].statuses[resp.status] += 1
            req.send_response(resp.status, resp.reason)
            for k, v in resp.getheaders():
                if k.lower() not in _HOP_HEADERS:
                    req.send_header(k, v)
            if req.command == "HEAD" or resp.status in (204, 304):
                req.send_header("Content-Length", size or "0")
                req.end_headers()
                return
            whole = None
            if size is None:  # no length from the origin: read it whole to send one
                whole = resp.read()
                size = str(len(whole))
            cut = self.cut(req.command, path, resp.status, int(size))
            req.send_header("Content-Length", size)
            req.end_headers()
            left = int(size) if cut is None else cut
            while left > 0:
                piece = whole[:left] if whole is not None else resp.read(min(PIECE, left))
                if not piece:
                    break
                self._send(label, path, req, piece)
                left -= len(piece)
            if cut is not None:  # the rest never comes: the connection is dropped
                req.wfile.flush()
                req.connection.shutdown(socket.SHUT_RDWR)
                req.close_connection = True
        finally:
            resp.close()

    def origin(self, req: http.server.BaseHTTPRequestHandler, body: bytes | None) -> Answer:
        """The origin's :class:`Answer` to ``req`` (with its ``body``): by default
        ``target``'s; a subclass may answer itself (:class:`benchmarks.light_s3.LightS3`)."""
        conn = http.client.HTTPConnection(*self.target, timeout=120)
        try:
            headers = {k: v for k, v in req.headers.items() if k.lower() not in _HOP_HEADERS}
            conn.request(req.command, req.path, body=body, headers=headers)
            resp = conn.getresponse()
        except BaseException:
            conn.close()
            raise
        return Answer(resp.status, resp.reason, resp.getheaders(), resp.read, conn.close)

    @staticmethod
    def _answer(req: http.server.BaseHTTPRequestHandler, status: int, data: bytes,
                kind: str) -> None:
        req.send_response(status)
        req.send_header("Content-Type", kind)
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)

    def _send(self, label: str, path: str, req: http.server.BaseHTTPRequestHandler,
              data: bytes) -> None:
        # counted before the write: a client that has read the body and asks for the
        # counts at once must find its bytes there (a write that fails takes them back)
        with self._lock:
            self._counts[label].body_bytes += len(data)
            self.body_bytes[path] += len(data)
        try:
            req.wfile.write(data)
        except BaseException:
            with self._lock:
                self._counts[label].body_bytes -= len(data)
                self.body_bytes[path] -= len(data)
            raise


def read_stats(url: str) -> dict[str, dict[str, Any]]:
    """The counts of every label of the proxy at ``url`` (from any process)."""
    with urllib.request.urlopen(url.rstrip("/") + STATS_PATH, timeout=30) as resp:  # noqa: S310
        out: dict[str, dict[str, Any]] = json.loads(resp.read())
        return out
