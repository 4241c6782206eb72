"""What one ranged request costs the client and the server: the same ranged GETs (3,139 B
from 8 objects of 10 MB, ``--requests`` of them, 0 ms added) asked through each client, one
at a time and all at once, against moto's S3 server or ``benchmarks/light_s3.py``
(``benchmarks.local_bucket``), in one process.

Clients: ``boto3`` (``get_object``; one at a time, and in 64 threads), datarax's
``Fetcher.read_range`` (one at a time, and in 64 threads: what the head start did before
``read_ranges``), ``Fetcher.read_ranges`` (all at once: one hand-off to s3fs's loop) and
s3fs's own client gathered on its loop with no datarax layer (``gather``). Each reports
its wall seconds and the CPU milliseconds a request of this process and of the server's
(``/proc/<pid>/stat``).

Run: ``python -m benchmarks.request_cost --server light|moto [--requests 300] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import multiprocessing
import os
import pathlib
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from benchmarks.harness import emit

BUCKET, PREFIX, FILES, SIZE, RECORD = "datarax-request-cost", "p", 8, 10 << 20, 3139

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def _clients(objs: dict[str, Any]) -> dict[str, Callable[[list[tuple[str, int, int]]], Any]]:
    import boto3
    import fsspec.asyn
    from botocore.config import Config

    from datarax.storage.fetch import Fetcher
    from datarax.storage.urls import filesystem

    s3 = boto3.client("s3", config=Config(max_pool_connections=64, retries={"max_attempts": 1}))
    fetcher = Fetcher()
    pool = concurrent.futures.ThreadPoolExecutor(64)
    fs, _ = filesystem(f"s3://{BUCKET}/{PREFIX}/f0.bin")

    def boto_get(r: tuple[str, int, int]) -> bytes:
        return s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}/{r[0]}",
                             Range=f"bytes={r[1]}-{r[2] - 1}")["Body"].read()

    async def gathered(rs: list[tuple[str, int, int]]) -> list[bytes]:
        client = await fs.set_session()

        async def one(r: tuple[str, int, int]) -> bytes:
            answer = await client.get_object(Bucket=BUCKET, Key=f"{PREFIX}/{r[0]}",
                                             Range=f"bytes={r[1]}-{r[2] - 1}")
            body = answer["Body"]
            try:
                return await body.read()
            finally:
                body.close()

        return await asyncio.gather(*(one(r) for r in rs))

    return {
        "boto3, one at a time": lambda rs: [boto_get(r) for r in rs],
        "boto3, 64 threads": lambda rs: list(pool.map(boto_get, rs)),
        "Fetcher.read_range, one at a time": lambda rs: [
            fetcher.read_range(objs[n], a, b) for n, a, b in rs],
        "Fetcher.read_range, 64 threads": lambda rs: list(pool.map(
            lambda r: fetcher.read_range(objs[r[0]], r[1], r[2]), rs)),
        "Fetcher.read_ranges": lambda rs: fetcher.read_ranges(
            [(objs[n], a, b) for n, a, b in rs]),
        "s3fs's client, gathered": lambda rs: fsspec.asyn.sync(fs.loop, gathered, rs),
    }


def run(server: str, requests: int) -> dict[str, Any]:
    folder = pathlib.Path(tempfile.mkdtemp(prefix="request-cost-"))  # removed at the end
    try:
        return _measure(server, requests, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _measure(server: str, requests: int, folder: pathlib.Path) -> dict[str, Any]:
    from benchmarks.first_batch_floor import process_cpu_s
    from benchmarks.local_bucket import local_bucket
    from datarax.storage.urls import RemoteObject

    rng = random.Random(0)
    for i in range(FILES):
        (folder / f"f{i}.bin").write_bytes(rng.randbytes(SIZE))
    wanted = []
    for _ in range(requests):
        start = rng.randrange(0, SIZE - RECORD)
        wanted.append((f"f{rng.randrange(FILES)}.bin", start, start + RECORD))
    out: dict[str, Any] = {"server": server, "requests": requests, "record_bytes": RECORD,
                           "load_average_at_start": os.getloadavg()[0], "clients": {}}
    with local_bucket(BUCKET, [(str(folder), PREFIX)], latency=0.0, server=server):
        pid = next(p.pid for p in multiprocessing.active_children())
        objs = {f"f{i}.bin": RemoteObject(f"s3://{BUCKET}/{PREFIX}/f{i}.bin", SIZE)
                for i in range(FILES)}
        for name, ask in _clients(objs).items():
            ask(wanted[:20])  # connections and imports warm
            cpu0, server0, t0 = time.process_time(), process_cpu_s(pid), time.perf_counter()
            got = ask(wanted)
            seconds = time.perf_counter() - t0
            assert sum(map(len, got)) == RECORD * requests, name
            out["clients"][name] = {
                "seconds": round(seconds, 3),
                "client_cpu_ms_a_request": round((time.process_time() - cpu0) * 1e3 / requests, 2),
                "server_cpu_ms_a_request": round((process_cpu_s(pid) - server0) * 1e3 / requests,
                                                 2)}
            print(f"{server:5s} {name:36s} {json.dumps(out['clients'][name])}", file=sys.stderr)
    out["load_average_at_end"] = os.getloadavg()[0]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=("light", "moto"), default="light")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    result = run(args.server, args.requests)
    emit(result, args.json or RESULTS / f"request_cost_{args.server}.json")


if __name__ == "__main__":
    main()
