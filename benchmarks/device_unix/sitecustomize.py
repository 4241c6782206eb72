"""Loopback HTTP over unix sockets, for benchmarks on the lent device machine (harness only).

That machine (gVisor) refuses every ``AF_INET`` socket, even on the loopback, so the storage
benchmarks' S3 server (:class:`benchmarks.light_s3.LightS3` with its counting proxy) cannot
listen there. With this folder first on ``PYTHONPATH`` and ``B43_UNIX=1``, every Python
process of the run (the orchestrator, the server's child, each worker) moves each loopback
"port" to ``/tmp/b43sock/<port>.sock``: the proxy's server listens there, aiohttp (s3fs,
aiobotocore) and ``http.client`` (the proxy's stats) connect there. The HTTP bytes, the
50 ms a request and the proxy's counts are unchanged; only the transport is a unix socket.
It patches two non-public hooks (aiohttp's ``TCPConnector._create_connection`` and
``counting_proxy._Server``): a measurement harness for that machine, never imported by
datarax. ``B43_NOINET=1`` also refuses ``AF_INET`` here, to test the harness off the device.

Run (session 14, from a packed ``.device``, see docs/benchmarks.md):
    B43_UNIX=1 PYTHONPATH=benchmarks/device_unix:$PWD:$PYTHONPATH \
        python -m benchmarks.cold_epoch_floor --rounds 8 --variants copy_then_read,floor,global
"""

import importlib.machinery
import itertools
import os
import sys

if os.environ.get("B43_UNIX") == "1":
    import http.client
    import socket
    import socketserver

    import aiohttp
    import aiohttp.connector

    _DIR = "/tmp/b43sock"
    os.makedirs(_DIR, exist_ok=True)
    _ports = itertools.count()

    def sockpath(port: int) -> str:
        """The unix socket standing for loopback ``port``."""
        return f"{_DIR}/{port}.sock"

    def _connect(self: http.client.HTTPConnection) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if isinstance(self.timeout, (int, float)):
            sock.settimeout(self.timeout)
        sock.connect(sockpath(self.port))
        self.sock = sock

    http.client.HTTPConnection.connect = _connect  # type: ignore[method-assign]

    class _Conn(socket.socket):
        """An accepted connection that ignores TCP options (the proxy sets TCP_NODELAY)."""

        def setsockopt(self, level, *args):  # type: ignore[no-untyped-def,override]
            if level == socket.IPPROTO_TCP:
                return None
            return super().setsockopt(level, *args)

    class UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        """The counting proxy's server on a unix socket, answering a loopback address."""

        daemon_threads = True
        request_queue_size = 256

        def __init__(self, address, handler, bind_and_activate=True):  # type: ignore[no-untyped-def]
            port = 10000 + (os.getpid() * 16 + next(_ports)) % 50000
            path = sockpath(port)
            if os.path.exists(path):
                os.unlink(path)
            super().__init__(path, handler, bind_and_activate)
            self.server_address = ("127.0.0.1", port)  # type: ignore[assignment]

        def get_request(self):  # type: ignore[no-untyped-def]
            conn, _ = self.socket.accept()
            return (_Conn(conn.family, conn.type, conn.proto, fileno=conn.detach()),
                    ("127.0.0.1", 0))

    async def _create_connection(self, req, traces, timeout):  # type: ignore[no-untyped-def]
        async with aiohttp.connector.ceil_timeout(timeout.sock_connect,
                                                  ceil_threshold=timeout.ceil_threshold):
            _, proto = await self._loop.create_unix_connection(self._factory,
                                                               sockpath(req.port))
        return proto

    aiohttp.TCPConnector._create_connection = _create_connection  # type: ignore[method-assign]

    try:
        import benchmarks.counting_proxy
        benchmarks.counting_proxy._Server = UnixHTTPServer  # type: ignore[misc]
    except ImportError as err:  # the project root is not on PYTHONPATH: no server here
        print("device_unix: counting_proxy not patched:", err, file=sys.stderr)

    if os.environ.get("B43_NOINET") == "1":  # off the device: refuse AF_INET as it does
        _init = socket.socket.__init__

        def _refuse(self, family=-1, type=-1, proto=-1, fileno=None):  # type: ignore[no-untyped-def]
            if fileno is None and family in (-1, socket.AF_INET, socket.AF_INET6):
                raise OSError(97, "Address family not supported by protocol (device_unix test)")
            _init(self, family, type, proto, fileno)

        socket.socket.__init__ = _refuse  # type: ignore[method-assign]

# the machine's own sitecustomize, if it has one, still runs
_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here])
if _spec is not None and _spec.origin:
    with open(_spec.origin) as _f:
        exec(compile(_f.read(), _spec.origin, "exec"),  # noqa: S102
             {"__name__": "sitecustomize", "__file__": _spec.origin})
