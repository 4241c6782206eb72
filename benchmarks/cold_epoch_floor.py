"""The floor under a global shuffle's cold epoch from a bucket that also serves its first
batch by byte range: the plainest fast code for the same work, beside copy-then-read and
datarax's global mode, against the same server, in one run (issue 43: "first batch ≤ 1 s"
and "cold epoch ≥ 0.8× copy-then-read", both from an empty cache).

Workload, server and two of the variants are :mod:`benchmarks.bucket_modes`' own (its 64
shards of W2 records, 633 MB; ``--server light``; 50 ms a request): each variant runs in
a fresh process, the variants alternating, ``--rounds`` times:

- ``copy_then_read``: bucket_modes' mode of that name (s3fs ``get`` of every file, then a
  global shuffle of the local copy through ``ArrayRecordSourceModule``).
- ``floor``: plain s3fs, no datarax storage: list the folder (one request), read the 64
  files' tails at once (postscript and footer: ``datarax.storage.array_record_layout``'s
  public parser finds the chunk offsets — parsing, not the work measured), fetch the
  chunks of the first batch's records by range at once (one request a run of neighbouring
  chunks) and decode them; THEN copy-then-read's own ``get`` of every file and its read
  of the local copy (the same source, config and batch). The first batch: the epoch's
  first 256 records of a seeded permutation of all records (like a global shuffle's, ~63
  of the 64 files); the epoch then reads all 200,000 records.
- ``floor_no_hold``: the same, the ``get`` started (in a thread) as soon as the listing
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
from collections.abc import Callable, Sequence
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

__all__ = ["VARIANTS", "first_batch_picks", "open_footers", "read_records"]

VARIANTS = ("copy_then_read", "floor", "floor_no_hold", "global")
TAIL = 64 << 10  # bytes read before the postscript (the footer is in them for these files)
CONNECTIONS = 64  # the ranged reads' connections (datarax's head start uses 64 too)
# ``cat_ranges(names, starts, ends)``: each file's bytes ``[start, end)``, all at once
CatRanges = Callable[[Sequence[str], Sequence[int], Sequence[int]], list[bytes]]


def open_footers(cat_ranges: CatRanges, names: Sequence[str],
                 sizes: Sequence[int]) -> list[Footer]:
    """Each file's footer from one request a file (its last ``TAIL`` + 64 KiB), all at once;
    a footer longer than that is read by a second request."""
    starts = [max(0, size - POSTSCRIPT - TAIL) for size in sizes]
    tails = cat_ranges(names, starts, list(sizes))
    footers = []
    for name, size, start, data in zip(names, sizes, starts, tails, strict=True):
        post = size - POSTSCRIPT
        offset = parse_postscript(data[post - start:], name)
        if offset < start:  # not in the tail: read the rest
            data = cat_ranges([name], [offset], [start])[0] + data
            start = offset
        footers.append(parse_footer(logical_bytes(data[offset - start:post - start], offset),
                                    size, offset, name))
    return footers


def first_batch_picks(counts: Sequence[int], batch: int, seed: int) -> list[tuple[int, int]]:
    """``(file, index in file)`` of the first ``batch`` records of a seeded permutation of
    all ``sum(counts)`` records (files in order, ``counts[f]`` records each)."""
    firsts = np.concatenate([[0], np.cumsum(counts)])
    order = np.random.default_rng(seed).permutation(int(firsts[-1]))[:batch]
    files = np.searchsorted(firsts, order, side="right") - 1
    return [(int(f), int(r - firsts[f])) for f, r in zip(files, order, strict=True)]


def read_records(cat_ranges: CatRanges, names: Sequence[str], footers: Sequence[Footer],
                 picks: Sequence[tuple[int, int]]) -> list[bytes]:
    """The records ``picks`` (``(file, index in file)``), in that order: the chunks holding
    them fetched at once (one range a run of neighbouring chunks), then decoded."""
    chunk_of = {}
    runs: list[tuple[int, int, int, list[int]]] = []  # (file, start, end, chunks)
    for f in sorted({f for f, _ in picks}):
        footer = footers[f]
        mine = [k for g, k in picks if g == f]
        chunks = np.searchsorted(footer.firsts, mine, side="right") - 1
        chunk_of.update({(f, k): int(c) for k, c in zip(mine, chunks, strict=True)})
        for c in sorted(set(chunks.tolist())):
            begin, end = int(footer.offsets[c]), footer.end(c)
            if runs and runs[-1][0] == f and runs[-1][2] == begin:
                runs[-1] = (f, runs[-1][1], end, runs[-1][3] + [c])
            else:
                runs.append((f, begin, end, [c]))
    answers = cat_ranges([names[f] for f, *_ in runs], [s for _, s, _, _ in runs],
                         [e for _, _, e, _ in runs])
    decoded: dict[tuple[int, int], list[bytes]] = {}
    for (f, start, _, chunks), data in zip(runs, answers, strict=True):
        footer = footers[f]
        for c in chunks:
            begin = int(footer.offsets[c])
            piece = logical_bytes(data[begin - start:footer.end(c) - start], begin)
            decoded[f, c] = simple_chunk_records(piece, f"{names[f]} chunk {c}")
    return [decoded[f, chunk_of[f, k]][k - int(footers[f].firsts[chunk_of[f, k]])]
            for f, k in picks]


# ------------------------------------------------------------- a floor's process
def floor_run(job: dict[str, Any]) -> dict[str, Any]:
    """In a fresh process: the floor (``job["hold"]``: downloads after the first batch)."""
    began = time.perf_counter()
    import jax
    import s3fs

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

    fs = s3fs.S3FileSystem(skip_instance_cache=True,
                           config_kwargs={"max_pool_connections": CONNECTIONS})
    listed = sorted((e for e in fs.ls(url, detail=True) if e["name"].endswith(".array_record")),
                    key=lambda e: e["name"])
    names, sizes = [e["name"] for e in listed], [int(e["size"]) for e in listed]
    mark("listed")

    def copy() -> None:  # exactly copy_then_read's copy
        s3fs.S3FileSystem(skip_instance_cache=True).get(url.rstrip("/") + "/", folder + "/",
                                                         recursive=True)
        mark("downloads_end")

    copier = None
    if not job["hold"]:
        copier = threading.Thread(target=copy)
        copier.start()

    def cat_ranges(paths: Sequence[str], starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
        return fs.cat_ranges(list(paths), list(starts), list(ends), batch_size=CONNECTIONS)

    footers = open_footers(cat_ranges, names, sizes)
    mark("footers")
    picks = first_batch_picks([f.num_records for f in footers], job["batch"], job["seed"])
    records = read_records(cat_ranges, names, footers, picks)
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
    total = sum(f.num_records for f in footers)
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
    print(f"round {one['round']} {one['variant']:15s} load {one['load_at_start'][0]:5.2f}"
          f"->{one['load_at_end'][0]:5.2f}  first batch {one['first_batch_from_open_s']:.2f} s  "
          f"cold {one['cold_records_per_s']:8.0f} rec/s (x{one.get('cold_vs_copy_then_read', 1):.2f})"
          f"  {phases}", flush=True)


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
