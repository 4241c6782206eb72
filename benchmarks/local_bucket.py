"""A local S3 bucket for the storage benchmarks: moto's S3 server in a child process, the
benchmark's folders uploaded, :class:`~benchmarks.counting_proxy.CountingProxy` in front
(``latency`` seconds added to every request; requests and body bytes counted exactly, one
port per label, e.g. per simulated host).

:func:`local_bucket` is the one setup ``bucket_modes``, ``w2_remote`` and
``w2_head_start`` share: it starts the server (its own process, so it does not share the
benchmark's Python lock), uploads, sets this process's ``AWS_*`` credentials and endpoint
(the first label's port), yields the proxy's URLs, and stops the server at the end.
``server="light"`` serves the folders from :class:`~benchmarks.light_s3.LightS3` instead
of moto (same proxy, same counts, no upload).

Example (not run here: it starts a server):
    with local_bucket("datarax-bench", [(folder, "w2")], latency=0.05) as urls:
        source = ArrayRecordSourceModule(config, "s3://datarax-bench/w2")
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import socket
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["CREDENTIALS", "client_env", "free_port", "local_bucket", "upload_folder"]

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1"}


def client_env(endpoint: str) -> dict[str, str]:
    """The environment an S3 client needs to reach the bucket through ``endpoint``."""
    return {**CREDENTIALS, "AWS_ENDPOINT_URL": endpoint, "AWS_ENDPOINT_URL_S3": endpoint}


def free_port() -> int:
    """A loopback port nothing listens on now (for a server to take)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def upload_folder(client: Any, bucket: str, folder: str | os.PathLike[str], prefix: str) -> None:
    """Every file of ``folder`` into ``bucket`` under ``prefix/`` (a boto3 ``client``)."""
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                client.put_object(Bucket=bucket, Key=f"{prefix}/{name}", Body=f.read())


def _serve(bucket: str, uploads: Sequence[tuple[str, str]], latency: float,
           labels: Sequence[str], ready: Any, server_kind: str = "moto") -> None:
    """Child process: moto's server, each ``(folder, prefix)`` uploaded, the proxy in front;
    or (``server_kind="light"``) :class:`~benchmarks.light_s3.LightS3` serving the folders."""
    if server_kind == "light":
        from benchmarks.light_s3 import LightS3

        light = LightS3({bucket: list(uploads)}, labels, latency)
        ready.send(light.urls)
        ready.recv()  # until the benchmark is done
        light.close()
        return
    import logging

    import boto3
    import werkzeug.serving
    from moto.server import ThreadedMotoServer

    from benchmarks.counting_proxy import CountingProxy

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    # moto's server writes a response's headers and body apart: with Nagle's algorithm a
    # small body waits for the proxy's delayed ACK (~40 ms a request); send at once
    werkzeug.serving.WSGIRequestHandler.disable_nagle_algorithm = True
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    client.create_bucket(Bucket=bucket)
    for folder, prefix in uploads:
        upload_folder(client, bucket, folder, prefix)
    proxy = CountingProxy(("127.0.0.1", port), labels, latency)
    ready.send(proxy.urls)
    ready.recv()  # until the benchmark is done
    proxy.close()
    server.stop()


@contextlib.contextmanager
def local_bucket(bucket: str, uploads: Sequence[tuple[str, str]], *, latency: float = 0.05,
                 labels: Sequence[str] = ("h0",),
                 server: str = "moto") -> Iterator[dict[str, str]]:
    """``bucket`` on a local S3 server holding each ``(folder, prefix)``'s files under
    ``prefix/``, behind a counting proxy with one port per label; yields ``{label: URL}``
    with this process's ``AWS_*`` variables pointing at the first label's port.
    ``server``: ``"moto"`` (moto's S3 server, the files uploaded) or ``"light"``
    (:class:`~benchmarks.light_s3.LightS3`: the folders served read-only by the proxy
    itself, a few times less server CPU a request)."""
    if server not in ("moto", "light"):
        raise ValueError(f"server must be 'moto' or 'light', got {server!r}")
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    server = context.Process(target=_serve, args=(bucket, list(uploads), latency, list(labels),
                                                  child, server), daemon=True)
    server.start()
    try:
        urls: dict[str, str] = parent.recv()
        os.environ.update(client_env(urls[labels[0]]))
        yield urls
    finally:
        with contextlib.suppress(OSError):
            parent.send("done")
        server.join(timeout=30)
        if server.is_alive():
            server.terminate()
