"""The floor under a global shuffle's cold epoch from a bucket that also serves its first
batch by byte range: the plainest fast code for the same work, beside copy-then-read and
datarax's global mode, against the same server, in one run (issue 43: "first batch ≤ 1 s"
and "cold epoch ≥ 0.8× copy-then-read", both from an empty cache).

Workload, server and two of the variants are :mod:`benchmarks.bucket_modes`' own (its 64
shards of W2 records, 633 MB; ``--server light``; 50 ms a request): each variant runs in
a fresh process, the variants alternating, ``--rounds`` times:

- ``copy_then_read``: bucket_modes' mode of that name (s3fs ``get`` of every file, then a
  global shuffle of the local copy through ``ArrayRecordSourceModule``).
- ``floor``: plain s3fs, no datarax storage: read the dataset's metadata
  (``datarax_dataset.json``: the files, their sizes and record counts; one request, as
  datarax's build), request the 64 files' tails at once (postscript and footer:
  ``datarax.storage.array_record_layout``'s public parser finds the chunk offsets —
  parsing, not the work measured) and each file's chunk ranges for the first batch as
  soon as its own footer is parsed (one request a run of neighbouring chunks, at most 64
  requests in flight, on fsspec's event loop; botocore set as datarax sets it: one
  attempt, a fixed User-Agent), decode them; THEN copy-then-read's own
  ``get`` of every file and its read of the local copy (the same source, config and
  batch). The first batch: the first 256 records of a seeded permutation of all records
  (like a global shuffle's, ~63 of the 64 files); the epoch then reads all 200,000.
  (Results ``cold_epoch_floor_phased_*``: an earlier floor that listed the folder and
  read every tail before any chunk range; ``_default_config_*``: botocore's defaults;
  both slower, see docs/benchmarks.md.)
- ``floor_no_hold``: the same, the ``get`` started (in a thread) as soon as the metadata
  is in, beside the first batch's ranged reads.
- ``global``: bucket_modes' ``global`` mode (datarax: the first batch by range while the
  downloads are held back, then whole files into the cache).

Per run: the first batch from the clock's start (build included: for copy-then-read the
copy), the cold rate (records of epoch 0 / (build + epoch 0)), its ratio to the same
round's copy-then-read, the load average at the run's start and end, and for the floors
their phases (seconds from the start), requests and bytes at the proxy, and process CPU.
The floors check what they read: each first-batch record's number (its first 4 bytes) is
the one ``write_dataset`` put at that place (records dealt round-robin over the files),
and the epoch serves every record once.

Run: ``python -m benchmarks.cold_epoch_floor --rounds 3 [--json X]``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np

from benchmarks import bucket_modes
from benchmarks.local_bucket import client_env, local_bucket
from datarax.storage.array_record_layout import (
    POSTSCRIPT,
    Footer,
    logical_bytes,
    parse_footer,
    parse_postscript,
    simple_chunk_records,
)

__all__ = ["VARIANTS", "chunk_runs", "decode", "first_batch_picks", "footer_of",
           "read_first_batch", "tail_span"]

VARIANTS = ("copy_then_read", "floor", "floor_no_hold", "global")
TAIL = 64 << 10  # bytes read before the postscript (the footer is in them for these files)
CONNECTIONS = 64  # the ranged reads' connections (datarax's head start uses 64 too)
Cat = Callable[[str, int, int], Awaitable[bytes]]  # (file, start, end) -> its bytes


def tail_span(size: int) -> tuple[int, int]:
    """``(start, end)`` of the request opening a file of ``size`` bytes: its postscript
    (the last 64 KiB) and the ``TAIL`` bytes before it."""
    return max(0, size - POSTSCRIPT - TAIL), size


def footer_of(name: str, size: int, start: int, data: bytes) -> Footer | int:
    """The file's footer from its bytes ``data`` at ``start`` (to its end); or, when the
    footer begins before ``start``, the offset it begins at (read from there, again)."""
    post = size - POSTSCRIPT
    offset = parse_postscript(data[post - start:], name)
    if offset < start:
        return offset
    return parse_footer(logical_bytes(data[offset - start:post - start], offset), size, offset,
                        name)


def chunk_runs(footer: Footer, indices: Sequence[int]) -> list[tuple[int, int, list[int]]]:
    """``(start, end, chunks)``: one request a run of neighbouring chunks holding ``indices``."""
    runs: list[tuple[int, int, list[int]]] = []
    for c in sorted(set((np.searchsorted(footer.firsts, indices, side="right") - 1).tolist())):
        begin, end = int(footer.offsets[c]), footer.end(c)
        if runs and runs[-1][1] == begin:
            runs[-1] = (runs[-1][0], end, runs[-1][2] + [c])
        else:
            runs.append((begin, end, [c]))
    return runs


def decode(name: str, footer: Footer, runs: list[tuple[int, int, list[int]]],
           answers: Sequence[bytes], indices: Sequence[int]) -> list[bytes]:
    """The records ``indices`` of one file (in that order) from its ``runs``' answers."""
    decoded = {}
    for (start, _, chunks), data in zip(runs, answers, strict=True):
        for c in chunks:
            begin = int(footer.offsets[c])
            piece = logical_bytes(data[begin - start:footer.end(c) - start], begin)
            decoded[c] = simple_chunk_records(piece, f"{name} chunk {c}")
    firsts = footer.firsts
    chunks = np.searchsorted(firsts, indices, side="right") - 1
    return [decoded[int(c)][k - int(firsts[c])] for k, c in zip(indices, chunks, strict=True)]


async def read_first_batch(cat: Cat, names: Sequence[str], sizes: Sequence[int],
                           picks: Sequence[tuple[int, int]]) -> list[bytes]:
    """The records ``picks`` (``(file, index in file)``), in that order, by range: every
    file's tail requested at once, and each file's chunk ranges as soon as its own footer
    is parsed (no file waits for another's)."""
    by_file: dict[int, list[int]] = {}
    for f, k in picks:
        by_file.setdefault(f, []).append(k)

    async def one(f: int) -> list[bytes]:
        start, end = tail_span(sizes[f])
        footer = footer_of(names[f], sizes[f], start, await cat(names[f], start, end))
        if isinstance(footer, int):  # a footer longer than the tail (not in these files)
            footer = footer_of(names[f], sizes[f], footer, await cat(names[f], footer, end))
        assert isinstance(footer, Footer)
        runs = chunk_runs(footer, by_file[f])
        answers = await asyncio.gather(*(cat(names[f], s, e) for s, e, _ in runs))
        return decode(names[f], footer, runs, answers, by_file[f])

    files = sorted(by_file)
    got = dict(zip(files, await asyncio.gather(*(one(f) for f in files)), strict=True))
    place = {f: iter(records) for f, records in got.items()}
    return [next(place[f]) for f, _ in picks]


def first_batch_picks(counts: Sequence[int], batch: int, seed: int) -> list[tuple[int, int]]:
    """``(file, index in file)`` of the first ``batch`` records of a seeded permutation of
    all ``sum(counts)`` records (files in order, ``counts[f]`` records each)."""
    firsts = np.concatenate([[0], np.cumsum(counts)])
    order = np.random.default_rng(seed).permutation(int(firsts[-1]))[:batch]
    files = np.searchsorted(firsts, order, side="right") - 1
    return [(int(f), int(r - firsts[f])) for f, r in zip(files, order, strict=True)]


# ------------------------------------------------------------- a floor's process
def floor_run(job: dict[str, Any]) -> dict[str, Any]:
    """In a fresh process: the floor (``job["hold"]``: downloads after the first batch)."""
    began = time.perf_counter()
    import jax
    import s3fs

    from fsspec.asyn import sync

    import datarax.sources  # noqa: F401 - imported before the clock, as bucket_modes does
    from datarax.sources import ArrayRecordSourceModule  # noqa: F401

    jax.devices()
    from benchmarks.bench_array_record import record_ids
    from benchmarks.counting_proxy import read_stats

    out: dict[str, Any] = {"import_s": round(time.perf_counter() - began, 3)}
    url, folder = job["url"], job["copy"]
    before = read_stats(job["proxy"])["h0"]
    cpu0, t0 = time.process_time(), time.perf_counter()
    phases: dict[str, float] = {}

    def mark(name: str) -> None:
        phases[name] = round(time.perf_counter() - t0, 4)

    # botocore's settings as datarax sets them: 64 connections, one attempt (no retry
    # bookkeeping), a User-Agent given (not rebuilt per request)
    fs = s3fs.S3FileSystem(skip_instance_cache=True, config_kwargs={
        "max_pool_connections": CONNECTIONS, "user_agent": "floor",
        "retries": {"mode": "standard", "total_max_attempts": 1}})
    meta = json.loads(fs.cat_file(url.rstrip("/") + "/datarax_dataset.json"))  # as datarax's
    # build: one request for the files, their sizes and record counts
    names = [f"{url.rstrip('/')}/{shard['file']}" for shard in meta["shards"]]
    sizes = [int(shard["bytes"]) for shard in meta["shards"]]
    counts = [int(shard["records"]) for shard in meta["shards"]]
    picks = first_batch_picks(counts, job["batch"], job["seed"])
    mark("metadata")

    def copy() -> None:  # exactly copy_then_read's copy
        s3fs.S3FileSystem(skip_instance_cache=True).get(url.rstrip("/") + "/", folder + "/",
                                                         recursive=True)
        mark("downloads_end")

    copier = None
    if not job["hold"]:
        copier = threading.Thread(target=copy)
        copier.start()

    limit = asyncio.Semaphore(CONNECTIONS)

    async def cat(path: str, start: int, end: int) -> bytes:
        async with limit:
            return await fs._cat_file(path, start=start, end=end)

    records = sync(fs.loop, read_first_batch, cat, names, sizes, picks)
    first = np.frombuffer(b"".join(records), np.uint8).reshape(len(records), 32, 32, 3)
    mark("first_batch")
    if copier is None:
        copy()
    else:
        copier.join()
    source = bucket_modes.array_record_source(
        bucket_modes.Setup(folder, None, job["seed"], {"shuffle_files": True}))
    mark("local_open")
    source.seek(0)
    served = []
    while True:
        batch, _ = source.get_batch_with_indices(job["batch"])
        if batch is None:
            break
        served.append(record_ids(batch["image"]))
    mark("epoch_end")
    cpu = time.process_time() - cpu0
    after = read_stats(job["proxy"])["h0"]
    source.close()
    ids = np.concatenate(served)
    total = sum(counts)
    want = [k * len(names) + f for f, k in picks]  # write_dataset deals records round-robin
    if record_ids(first).tolist() != want:
        raise AssertionError("the floor's first batch is not the records it asked for")
    if len(ids) != total or len(np.unique(ids)) != len(ids):
        raise AssertionError(f"the floor's epoch served {len(ids)} records, "
                             f"{len(np.unique(ids))} distinct, of {total}")
    out.update({"phases_s": phases, "first_batch_from_open_s": phases["first_batch"],
                "records": len(ids), "cpu_s": round(cpu, 3),
                "cold_records_per_s": round(len(ids) / phases["epoch_end"], 1),
                "requests": after["requests"] - before["requests"],
                "bytes": after["body_bytes"] - before["body_bytes"]})
    return out


# ------------------------------------------------------------------ the run
def _one(variant: str, ctx: dict[str, Any], scratch: pathlib.Path) -> dict[str, Any]:
    load = os.getloadavg()
    if variant in ("copy_then_read", "global"):  # bucket_modes' own run of the mode
        mode = dataclasses.replace(bucket_modes.mode_named(variant), floor=False)
        m = bucket_modes.run_mode(mode, ctx["url"], ctx["local"], ctx["proxies"],
                                  ctx["data_bytes"], ctx["records"], epochs=2, batch=256,
                                  seed=0, scratch=scratch, server_pid=ctx["server_pid"])
        host = m["per_host"][0]
        out = {"first_batch_from_open_s": m["first_batch_from_open_s"],
               "cold_records_per_s": m["cold_records_per_s"],
               "phases_s": {"build": host["open_s"],
                            "first_batch": m["first_batch_from_open_s"],
                            "epoch_end": round(host["open_s"] + host["epochs"][0]["seconds"], 4)},
               "requests": m["open"]["requests"] + m["epochs"][0]["requests"],
               "bytes": m["open"]["bytes"] + m["epochs"][0]["bytes"],
               "exactly_once": all(m["exactly_once"])}
    else:
        job = {"url": ctx["url"], "copy": str(scratch / "copy"), "proxy": ctx["proxies"]["h0"],
               "hold": variant == "floor", "batch": 256, "seed": 0}
        result = scratch / "floor.json"
        env = {**os.environ, **client_env(ctx["proxies"]["h0"]), "JAX_PLATFORMS": "cpu"}
        subprocess.run([sys.executable, "-m", "benchmarks.cold_epoch_floor", "--worker",
                        json.dumps(job), "--worker-out", str(result)],
                       cwd=bucket_modes.ROOT, env=env, check=True)
        out = json.loads(result.read_text())
    return {"variant": variant, "load_at_start": [round(x, 2) for x in load],
            "load_at_end": [round(x, 2) for x in os.getloadavg()], **out}


def run(rounds: int, variants: Sequence[str], json_path: pathlib.Path | None,
        latency: float = 0.05) -> list[dict[str, Any]]:
    from benchmarks.w2_remote import make_dataset

    folder = make_dataset(bucket_modes.RECORDS, bucket_modes.SHARDS)
    files = sorted(folder.iterdir())
    for path in files:  # the page cache warm, as bucket_modes does
        path.read_bytes()
    ctx: dict[str, Any] = {
        "url": f"s3://{bucket_modes.BUCKET}/{bucket_modes.PREFIX}", "local": str(folder),
        "records": bucket_modes.RECORDS,
        "data_bytes": sum(p.stat().st_size for p in files if p.suffix == ".array_record")}
    runs: list[dict[str, Any]] = []
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="cold-epoch-floor-"))
    try:
        with local_bucket(bucket_modes.BUCKET, [(str(folder), bucket_modes.PREFIX)],
                          latency=latency, server="light") as proxies:
            import multiprocessing

            ctx["proxies"] = proxies
            ctx["server_pid"] = next((p.pid for p in multiprocessing.active_children()), None)
            for r in range(rounds):
                for variant in variants:
                    place = scratch / f"{variant}-{r}"
                    place.mkdir()
                    try:
                        one = {"round": r, **_one(variant, ctx, place)}
                    finally:
                        shutil.rmtree(place, ignore_errors=True)
                    runs.append(one)
                    _report(one, runs)
                    if json_path:  # after each run: a failure later keeps those before
                        json_path.write_text(json.dumps(runs, indent=1) + "\n")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return runs


def _report(one: dict[str, Any], runs: list[dict[str, Any]]) -> None:
    base = next((x for x in runs if x["round"] == one["round"]
                 and x["variant"] == "copy_then_read"), None)
    if base is not None:
        one["cold_vs_copy_then_read"] = round(one["cold_records_per_s"]
                                              / base["cold_records_per_s"], 3)
    phases = "  ".join(f"{k} {v:.2f}" for k, v in one["phases_s"].items())
    ratio = one.get("cold_vs_copy_then_read", 1.0)
    print(f"round {one['round']} {one['variant']:15s} load {one['load_at_start'][0]:5.2f}"
          f"->{one['load_at_end'][0]:5.2f}  first batch {one['first_batch_from_open_s']:.2f} s  "
          f"cold {one['cold_records_per_s']:8.0f} rec/s (x{ratio:.2f})  {phases}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--json", type=pathlib.Path)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", type=pathlib.Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        args.worker_out.write_text(json.dumps(floor_run(json.loads(args.worker))))
        return
    variants = args.variants.split(",")
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    run(args.rounds, variants, args.json)


if __name__ == "__main__":
    main()
