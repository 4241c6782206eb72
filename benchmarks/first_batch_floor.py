"""The floor under a first batch read by byte range: the plainest fast code issuing exactly
the requests datarax's head start makes for it, against the same server, through the same
proxy, in the same run (``benchmarks/bucket_modes.py`` reports it beside the batch).

The work: each file the batch touches opened from its tail (the bytes from ``size -
65,536 - TAIL`` to the end: the postscript and the footer before it, as
:class:`~datarax.storage.array_record_ranges.ArrayRecordRanges` asks), all files at
once; then the byte ranges of the batch's records (one request a run of neighbouring
chunks), all at once — the ranges taken from datarax's own plan (``ArrayRecordRanges.
ranges`` over the same files on local disk), so the bytes are the same. Nothing is
decoded and no footer parsed: the floor is the requests alone.

Each client is tried (:data:`CLIENTS`): ``boto3`` (``get_object`` in a pool of
``threads`` threads, a client of as many connections), ``s3fs`` (``cat_file`` in the same
pool: datarax's own path) and ``s3fs_async`` (``cat_ranges``, ``threads`` coroutines at
once on fsspec's loop). Each run reports its seconds, the requests and body bytes the proxy
counted, this process's CPU seconds (every thread) and the server process's (moto and the
proxy, one process: ``/proc/<pid>/stat``).

Example (not run here: it needs the benchmark's server):
    plan = first_batch_plan(local_folder, [("shard-00000.array_record", 17), ...])
    runs = measure(plan, bucket="b", prefix="ds", proxy=url, server_pid=pid)
"""

from __future__ import annotations

import concurrent.futures
import os
import pathlib
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["CLIENTS", "first_batch_plan", "measure", "process_cpu_s"]

CLIENTS = ("boto3", "s3fs", "s3fs_async")
PHASES = ("tails", "ranges")  # the second needs the first's footers: one after the other
Request = tuple[str, int, int]  # (file name, start, end)


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, every thread) process ``pid`` has used so far."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def first_batch_plan(folder: str | os.PathLike[str],
                     picks: Sequence[tuple[str, int]]) -> dict[str, Any]:
    """The requests datarax's head start makes for records ``picks`` (``(file name, index
    in file)``) of the ArrayRecord files in ``folder``: ``tails`` (one a file, in the order
    first touched) and ``ranges`` (the runs of chunks of each file's records)."""
    from datarax.storage.array_record_ranges import ArrayRecordRanges

    by_file: dict[str, list[int]] = {}
    for name, index in picks:
        by_file.setdefault(name, []).append(int(index))
    tails: list[Request] = []
    ranges: list[Request] = []
    chunks = in_tail = 0
    for name, positions in by_file.items():
        path = os.path.join(folder, name)
        opening: list[Request] = []  # the reads the open makes, as it makes them

        def read_range(offset: int, length: int, path: str = path, name: str = name,
                       opening: list[Request] = opening) -> bytes:
            opening.append((name, offset, offset + length))
            with open(path, "rb") as f:
                f.seek(offset)
                return f.read(length)

        reader = ArrayRecordRanges(read_range, os.path.getsize(path), name=path)
        tails += opening
        runs = reader.ranges(reader.chunks_of(positions))
        ranges += [(name, start, end) for start, end, _ in runs]
        chunks += sum(len(c) for _, _, c in runs)
        in_tail += sum(any(a <= start and end <= b for _, a, b in opening)
                       for start, end, _ in runs)
    # what fewer requests could save: chunks already read together (neighbours), and
    # record ranges inside the bytes a file's open reads anyway
    return {"tails": tails, "ranges": ranges,
            "counts": {"files": len(by_file), "records": len(picks), "chunks": chunks,
                       "ranges_in_tail": in_tail}}


def _getter(client: str, bucket: str, prefix: str, threads: int) -> Callable[[Request], bytes]:
    if client == "boto3":
        import boto3
        from botocore.config import Config

        s3 = boto3.client("s3", config=Config(max_pool_connections=threads,
                                              retries={"max_attempts": 1}))

        def get(req: Request) -> bytes:
            name, start, end = req
            answer = s3.get_object(Bucket=bucket, Key=f"{prefix}/{name}",
                                   Range=f"bytes={start}-{end - 1}")
            return answer["Body"].read()

        return get
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True,
                           config_kwargs={"max_pool_connections": threads})

    def cat(req: Request) -> bytes:
        name, start, end = req
        return fs.cat_file(f"{bucket}/{prefix}/{name}", start=start, end=end)

    if client == "s3fs":
        return cat

    def cat_all(reqs: Sequence[Request]) -> list[bytes]:
        return fs.cat_ranges([f"{bucket}/{prefix}/{n}" for n, _, _ in reqs],
                             [s for _, s, _ in reqs], [e for _, _, e in reqs], batch_size=threads)

    cat.many = cat_all  # type: ignore[attr-defined]
    return cat


def _one(client: str, plan: dict[str, Any], bucket: str, prefix: str, threads: int,
         wire: Callable[[], dict[str, int]], server_pid: int | None) -> dict[str, Any]:
    get = _getter(client, bucket, prefix, threads)
    before, server0 = wire(), process_cpu_s(server_pid) if server_pid else 0.0
    cpu0, t0 = time.process_time(), time.perf_counter()
    got = 0
    if client == "s3fs_async":
        for phase in PHASES:
            got += sum(map(len, get.many(plan[phase])))  # type: ignore[attr-defined]
    else:
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            for phase in PHASES:
                got += sum(map(len, pool.map(get, plan[phase])))
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    after = wire()
    expected = sum(e - s for phase in PHASES for _, s, e in plan[phase])
    if got != expected:
        raise AssertionError(f"{client}: {got} bytes read, the plan holds {expected}")
    return {"client": client, "seconds": round(seconds, 4),
            "requests": after["requests"] - before["requests"],
            "bytes": after["body_bytes"] - before["body_bytes"],
            "client_cpu_s": round(cpu, 3),
            "server_cpu_s": round(process_cpu_s(server_pid) - server0, 3) if server_pid else None}


def measure(plan: dict[str, Any], *, bucket: str, prefix: str,
            wire: Callable[[], dict[str, int]], server_pid: int | None, threads: int = 64,
            rounds: int = 2) -> dict[str, Any]:
    """Each client of :data:`CLIENTS` ``rounds`` times, alternating; every run and the
    fastest (``floor``)."""
    runs = [_one(client, plan, bucket, prefix, threads, wire, server_pid)
            for _ in range(rounds) for client in CLIENTS]
    return {"threads": threads, "tails": len(plan["tails"]), "ranges": len(plan["ranges"]),
            "plan_bytes": sum(e - s for phase in PHASES for _, s, e in plan[phase]),
            **plan["counts"],
            "runs": runs, "floor": min(runs, key=lambda r: r["seconds"])}
