"""Reading a bucket at scale: each reading mode against a local S3 server with latency,
bytes and requests counted exactly at the wire.

Workload: 64 ArrayRecord shards of ~10 MB (W2's records: 3,072-byte ``uint8 (32, 32, 3)``
images, record ``i`` starting with ``uint32(i)``; 200,000 records, 633 MB), written once by
``write_dataset`` under ``data/bench_remote``. ``--quick``: 20,000 records (64 × ~1 MB).

Server: moto's S3 server in a child process behind :class:`~benchmarks.counting_proxy.
CountingProxy` (``--latency`` seconds, default 0.05, added to every request), one proxy
port per simulated host, so each host's requests and body bytes are counted apart, exactly
(:func:`benchmarks.local_bucket.local_bucket`). ``--server light``: the folder served by
:class:`~benchmarks.light_s3.LightS3` instead of moto (the same proxy and counts; GET with
Range, HEAD, ListObjectsV2; a few times less server CPU a request, which on this machine
competes with the client for the same cores).

Each mode (:data:`MODES`) runs in fresh processes, one per host (``process_index``
0 … H-1 through ``source.set_shard``, the hosts at once), each with an empty cache
folder of its own: it imports (``import_s``, JAX started), builds the source
(``open_s``), reads ``--epochs`` epochs (default 3, batch 256), each after the first
followed by the same epoch from the local folder (page cache warm) through
``ArrayRecordSourceModule`` with the mode's config (built after epoch 0): the local-disk
reference, measured
under the same load (each source's reads stopped at its epoch's end: a local source would
read its next epoch's start during the other's epoch). Per host and epoch it reports the first batch's time
(``first_batch_s`` from the epoch's start; the first batch from an empty cache is
``open_s`` + epoch 0's), records/s, and the requests and bytes the proxy saw between
the epoch's start and end (read-ahead of the next epoch that starts early counts in the
epoch it happens in). The parent checks that every host served
its share's records exactly once per epoch, the shares disjoint and together the whole
epoch (less the remainder ``records % H`` that equal shares leave out), by the record
number each record's bytes start with.

**The first batch's floor** (modes with ``floor=True``: ``global``): once the mode's
processes are done, a fresh process issues exactly the requests datarax's first batch of
epoch 0 needed (its files' tails, then its records' chunk ranges, from datarax's own
plan: :mod:`benchmarks.first_batch_floor`) from plain clients (boto3 and s3fs, 64 at
once), against the same server through the same proxy; ``first_batch_floor`` in the JSON
holds each run, the fastest, datarax's first batch (seconds, requests, bytes, this
process's and the server process's CPU seconds) and their ratios, and ``floor_cold``: the
floor's first run (boto3), like datarax's batch the first requests of a fresh process
(``datarax_vs_floor_cold``). A host's epoch 0 runs with nothing else in its process (the
local-disk reference is built after it; the proxy's counts read before the clock starts).

**Adding a mode** is one more :class:`Mode` in :data:`MODES`: a name, a line saying what
it is, the cache per host as a fraction of the data set, the hosts, and either ``config``
(fields of ``ArrayRecordSourceConfig``) or ``build`` (a function of a :class:`Setup`
returning any source with ``seek``, ``set_shard``, ``get_batch_with_indices``, ``close``
and optionally ``stats``).

Run: ``python -m benchmarks.bucket_modes [--quick] [--modes a,b] [--json PATH]``
(default JSON: ``benchmarks/results/bucket_modes[_quick].json``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.local_bucket import client_env, local_bucket

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
BUCKET = "datarax-bucket-modes"
PREFIX = "ds"
SHARDS = 64
RECORDS, QUICK_RECORDS = 200_000, 20_000
SERVERS = {"moto": "moto S3 server",
           "light": "benchmarks/light_s3.py (GET with Range, HEAD, ListObjectsV2 from the folder)"}


@dataclasses.dataclass(frozen=True)
class Setup:
    """What a mode's ``build`` gets, in its host's process."""

    paths: str  # the s3:// URL of the dataset, or its local folder for the baseline
    cache: Any  # a ShardCache of this host (None for the local folder)
    seed: int
    config: dict[str, Any]


def array_record_source(setup: Setup) -> Any:
    """``ArrayRecordSourceModule`` with the mode's config (the default ``build``)."""
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    kwargs = {} if setup.cache is None else {"cache": setup.cache}
    return ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=setup.seed, **setup.config),
                                   setup.paths, **kwargs)


def copy_then_read_source(setup: Setup) -> Any:
    """The baseline: download every file (s3fs ``get``, in parallel) into the host's cache
    folder, then read the local copy with the mode's config."""
    import s3fs

    folder = pathlib.Path(str(setup.cache.directory) + "-copy")
    s3fs.S3FileSystem(skip_instance_cache=True).get(setup.paths.rstrip("/") + "/",
                                                     str(folder) + "/", recursive=True)
    return array_record_source(Setup(str(folder), None, setup.seed, setup.config))


@dataclasses.dataclass(frozen=True)
class Mode:
    """One way of reading the bucket (see the module docstring)."""

    name: str
    about: str
    cache_fraction: float  # each host's cache limit, as a fraction of the data set's bytes
    hosts: int = 1
    config: dict[str, Any] = dataclasses.field(default_factory=lambda: {"shuffle_files": True})
    build: Callable[[Setup], Any] = array_record_source
    floor: bool = False  # measure the first batch's floor (first_batch_floor.py) after it


WINDOW = {"shuffle_files": True, "shuffle_window": 4}
BLOCKS = {"shuffle_files": True, "shuffle_window": 4, "shuffle_block": "8M"}
QUICK_BLOCKS = {"shuffle_files": True, "shuffle_window": 4, "shuffle_block": "256K"}


def ranged_source(setup: Setup) -> Any:
    """A global shuffle read record by record by byte range (``ranged_reads=True``)."""
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    return ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=setup.seed, **setup.config),
                                   setup.paths, cache=setup.cache, ranged_reads=True)


MODES: list[Mode] = [
    Mode("global", "global shuffle, cache 1.1x the data set", 1.1, floor=True),
    Mode("global_small_cache", "global shuffle, cache 1/4 of the data set", 0.25),
    Mode("window4", "shuffle_window=4, cache 1/4 of the data set", 0.25, config=WINDOW),
    Mode("global_2hosts", "global shuffle, 2 hosts, cache 1.1x the data set each", 1.1, hosts=2),
    Mode("window4_2hosts", "shuffle_window=4, 2 hosts, cache 1/4 of the data set each", 0.25,
         hosts=2, config=WINDOW),
    Mode("blocks", "shuffle_block='8M' (256K with --quick), shuffle_window=4 blocks, "
         "cache 1/4 of the data set", 0.25, config=BLOCKS),
    Mode("blocks_cache_all", "shuffle_block='8M' (256K with --quick), shuffle_window=4 "
         "blocks, cache 1.1x the data set (the later epochs read a warm cache)", 1.1,
         config=BLOCKS),
    Mode("blocks_2hosts", "shuffle_block='8M' (256K with --quick), shuffle_window=4 blocks, "
         "2 hosts, cache 1/4 of the data set each", 0.25, hosts=2, config=BLOCKS),
    Mode("ranged_2hosts", "global shuffle by byte range (ranged_reads=True), 2 hosts, cache "
         "1/4 of the data set each (--quick only: a request a record)", 0.25, hosts=2,
         build=ranged_source),
    Mode("copy_then_read", "baseline: copy every file (s3fs get), then a global shuffle of "
         "the local copy; the copy is part of the build", 1.1, build=copy_then_read_source),
]


def mode_named(name: str) -> Mode:
    for mode in MODES:
        if mode.name == name:
            return mode
    raise KeyError(f"no mode named {name!r}; the modes are {[m.name for m in MODES]}")


# -------------------------------------------------------------- one host's run
def host_run(job: dict[str, Any]) -> dict[str, Any]:
    """In a fresh process: one host of one mode (``job`` from :func:`run_mode`)."""
    began = time.perf_counter()
    import jax
    import s3fs  # noqa: F401 - imports and JAX's start timed apart from building the source

    import datarax.sources  # noqa: F401
    from datarax.sources import ArrayRecordSourceModule  # noqa: F401 - a lazy export: its
    # module's import (0.3-1.4 s on this machine) timed here, not in the build

    jax.devices()
    from benchmarks.bench_array_record import record_ids
    from benchmarks.counting_proxy import read_stats
    from benchmarks.first_batch_floor import process_cpu_s
    from datarax.storage import ShardCache

    mode = mode_named(job["mode"])
    host, hosts, label, proxy = job["host"], mode.hosts, f"h{job['host']}", job["proxy"]
    out: dict[str, Any] = {"host": host, "import_s": round(time.perf_counter() - began, 3)}

    def wire() -> dict[str, Any]:
        return read_stats(proxy)[label]

    def delta(now: dict[str, Any], then: dict[str, Any]) -> dict[str, int]:
        return {"requests": now["requests"] - then["requests"],
                "bytes": now["body_bytes"] - then["body_bytes"]}

    server = job.get("server_pid")

    def epoch(source: Any, e: int, ids_path: pathlib.Path | None) -> dict[str, Any]:
        before = wire()  # a request to the proxy: before the clock starts
        cpu0, server0 = time.process_time(), process_cpu_s(server) if server else 0.0
        start = time.perf_counter()
        source.seek(e)
        first, served, stable = None, [], []
        while True:
            batch, indices = source.get_batch_with_indices(job["batch"])
            if batch is None:
                break
            if first is None:
                first = time.perf_counter() - start
                # what the first batch cost: the client's and the server's CPU, the wire's
                first_cost = {"client_cpu_s": round(time.process_time() - cpu0, 3),
                              "server_cpu_s": round(process_cpu_s(server) - server0, 3)
                              if server else None, **delta(wire(), before)}
                if e == 0 and ids_path is not None:  # the floor's plan: its records' places
                    picks = [[os.path.basename(p), k] for p, k in
                             (source.locate(int(i)) for i in np.asarray(indices))]
                    ids_path.with_name(f"first-batch-h{host}.json").write_text(json.dumps(picks))
            served.append(record_ids(batch["image"]))  # each record's number, in its bytes
            stable.append(np.asarray(indices))
        seconds = time.perf_counter() - start
        # a local source goes on reading its next epoch's start once this one is read: it
        # would run during the other source's epoch (taking its CPU) and hand its own next
        # epoch a head start (warm remote epochs measured 0.74-0.99x the local ones with
        # it, 0.86-1.28x without, load 8-17); so each epoch is timed from its own start
        reader = getattr(source, "host_reader", None)  # (a mode's source may have none)
        if reader is not None:
            reader.stop()
        ids = np.concatenate(served) if served else np.zeros(0, np.uint32)
        if ids_path is not None:
            np.save(ids_path, ids)
            if e == 0 and host == 0:  # the shard each record came from, for the mixing
                files = {p: k for k, p in enumerate(source.paths)}
                every = np.concatenate(stable) if stable else np.zeros(0, np.int64)
                np.save(ids_path.with_name("shards.npy"),
                        np.asarray([files[source.locate(int(i))[0]] for i in every]))
        return {"records": len(ids), "first_batch_s": round(first or 0.0, 4),
                "first_batch": first_cost if first is not None else None,
                "seconds": round(seconds, 3), "records_per_s": round(len(ids) / seconds, 1),
                **delta(wire(), before)}

    cache = ShardCache(job["cache_dir"], max_bytes=job["cache_bytes"])
    config = dict(mode.config)
    if job.get("quick") and config.get("shuffle_block"):
        config = dict(QUICK_BLOCKS)  # ~1 MB shards: blocks of 256 KB
    setup = Setup(job["url"], cache, job["seed"], config)
    start = wire()
    t0 = time.perf_counter()
    try:
        source = mode.build(setup)
        if hosts > 1:
            source.set_shard(host, hosts)
    except Exception as err:  # noqa: BLE001 - a refusal is this mode's result
        out["refused"] = f"{type(err).__name__}: {err}"[:600]
        out["open"] = delta(wire(), start)
        return out
    out["open_s"] = round(time.perf_counter() - t0, 4)
    out["open"] = delta(wire(), start)
    ids_dir = pathlib.Path(job["ids_dir"])
    local = None
    try:
        # epoch 0 (the first batch from an empty cache) with nothing else in the process
        out["epochs"], out["local_epochs"] = [epoch(source, 0, ids_dir / f"h{host}-e0.npy")], []
        # the reference: the same files on local disk, ArrayRecord's own reader, same
        # config; its epochs alternate with the later remote ones (the same load for both)
        local = array_record_source(Setup(job["local"], None, job["seed"], config))
        if hosts > 1:
            local.set_shard(host, hosts)
        for e in range(1, job["epochs"]):
            out["epochs"].append(epoch(source, e, ids_dir / f"h{host}-e{e}.npy"))
            out["local_epochs"].append(epoch(local, e, None))
        stats = source.stats() if hasattr(source, "stats") else None
        out["storage"] = (stats or {}).get("storage")
    finally:
        source.close()
        if local is not None:
            local.close()
    out["first_batch_from_open_s"] = round(out["open_s"] + out["epochs"][0]["first_batch_s"], 4)
    return out


# ---------------------------------------------------------------- one mode
def run_mode(mode: Mode, url: str, local: str, proxies: dict[str, str], data_bytes: int,
             records: int, *, epochs: int, batch: int, seed: int,
             scratch: pathlib.Path, server_pid: int | None = None) -> dict[str, Any]:
    """The mode's hosts at once, each in a fresh process; their results and the checks."""
    ids_dir = scratch / mode.name / "ids"
    ids_dir.mkdir(parents=True)
    cache_bytes = int(mode.cache_fraction * data_bytes)
    procs = []
    for host in range(mode.hosts):
        job = {"mode": mode.name, "host": host, "url": url, "local": local,
               "proxy": proxies[f"h{host}"], "cache_dir": str(scratch / mode.name / f"cache{host}"),
               "cache_bytes": cache_bytes, "epochs": epochs, "batch": batch, "seed": seed,
               "ids_dir": str(ids_dir), "quick": records < RECORDS, "server_pid": server_pid}
        result = scratch / mode.name / f"h{host}.json"
        env = {**os.environ, **client_env(proxies[f"h{host}"]), "JAX_PLATFORMS": "cpu"}
        procs.append((result, subprocess.Popen(
            [sys.executable, "-m", "benchmarks.bucket_modes", "--worker", json.dumps(job),
             "--worker-out", str(result)], cwd=ROOT, env=env)))
    hosts_out = []
    for result, proc in procs:
        code = proc.wait()
        if code != 0 or not result.exists():
            raise RuntimeError(f"{mode.name}: a host's process failed (exit {code})")
        hosts_out.append(json.loads(result.read_text()))
    out: dict[str, Any] = {"about": mode.about, "hosts": mode.hosts, "cache_bytes": cache_bytes,
                           "cache_fraction": mode.cache_fraction, "per_host": hosts_out}
    if any("refused" in h for h in hosts_out):
        out["refused"] = next(h["refused"] for h in hosts_out if "refused" in h)
        return out
    out["exactly_once"] = [check_shares(ids_dir, mode.hosts, e, records) for e in range(epochs)]
    out["mixing"] = mixing(np.load(ids_dir / "shards.npy"), batch)
    out["epochs"] = [{
        "bytes": sum(h["epochs"][e]["bytes"] for h in hosts_out),
        "requests": sum(h["epochs"][e]["requests"] for h in hosts_out),
        "bytes_vs_data_set": round(sum(h["epochs"][e]["bytes"] for h in hosts_out) / data_bytes, 3),
        "max_host_bytes_vs_its_share": round(max(h["epochs"][e]["bytes"] for h in hosts_out)
                                             / (data_bytes / mode.hosts), 3),
    } for e in range(epochs)]
    out["first_batch_from_open_s"] = max(h["first_batch_from_open_s"] for h in hosts_out)
    out["open"] = {"bytes": sum(h["open"]["bytes"] for h in hosts_out),
                   "requests": sum(h["open"]["requests"] for h in hosts_out),
                   "seconds": max(h["open_s"] for h in hosts_out)}
    cold = [h["open_s"] + h["epochs"][0]["seconds"] for h in hosts_out]  # build + epoch 0
    out["cold_records_per_s"] = round(sum(h["epochs"][0]["records"] / c
                                          for h, c in zip(hosts_out, cold)), 1)
    # the best later epoch against the best local one, summed over the hosts
    warm = sum(max(e["records_per_s"] for e in h["epochs"][1:]) for h in hosts_out)
    disk = sum(max(e["records_per_s"] for e in h["local_epochs"]) for h in hosts_out)
    out["later_epochs_vs_local_disk"] = round(warm / disk, 3)
    if mode.floor and mode.hosts == 1:
        out["first_batch_floor"] = run_floor(hosts_out[0], ids_dir / "first-batch-h0.json",
                                             local, proxies["h0"], server_pid, scratch / mode.name)
    return out


def run_floor(host: dict[str, Any], picks: pathlib.Path, local: str, proxy: str,
              server_pid: int | None, scratch: pathlib.Path) -> dict[str, Any]:
    """The floor of the host's first batch of epoch 0 (``first_batch_floor.py``), in a
    fresh process once the mode's are done (the server idle), beside datarax's."""
    job = {"picks": str(picks), "local": local, "proxy": proxy, "server_pid": server_pid}
    result = scratch / "floor.json"
    env = {**os.environ, **client_env(proxy)}
    subprocess.run([sys.executable, "-m", "benchmarks.bucket_modes", "--floor", json.dumps(job),
                    "--worker-out", str(result)], cwd=ROOT, env=env, check=True)
    floor = json.loads(result.read_text())
    ours = {"seconds": host["epochs"][0]["first_batch_s"], **host["epochs"][0]["first_batch"]}
    best = floor["floor"]
    floor["datarax"] = ours
    floor["datarax_vs_floor"] = {
        k: round(ours[k] / best[k], 2) if best.get(k) else None
        for k in ("seconds", "requests", "bytes", "client_cpu_s", "server_cpu_s")}
    # datarax's batch is its process's first requests; so is the floor's first run (its
    # later ones reuse warm code paths): the like-for-like comparison
    floor["floor_cold"] = floor["runs"][0]
    floor["datarax_vs_floor_cold"] = round(ours["seconds"] / floor["runs"][0]["seconds"], 2)
    return floor


def floor_run(job: dict[str, Any]) -> dict[str, Any]:
    """In a fresh process: the floor's requests for the picks datarax's first batch read."""
    from benchmarks.counting_proxy import read_stats
    from benchmarks.first_batch_floor import first_batch_plan, measure

    plan = first_batch_plan(job["local"], json.loads(pathlib.Path(job["picks"]).read_text()))
    return measure(plan, bucket=BUCKET, prefix=PREFIX, server_pid=job["server_pid"],
                   wire=lambda: read_stats(job["proxy"])["h0"])


def mixing(shard: np.ndarray, batch: int) -> dict[str, float]:
    """How well an epoch's order mixes (host 0's epoch 0; ``shard``: each record's shard):
    the fraction of neighbours from one shard, and the distinct shards in a batch."""
    usable = len(shard) - len(shard) % batch
    rows = shard[:usable].reshape(-1, batch)
    return {"same_shard_neighbours": round(float(np.mean(shard[1:] == shard[:-1])), 3),
            "shards_per_batch": round(float(np.mean([len(np.unique(r)) for r in rows])), 1)}


def check_shares(ids_dir: pathlib.Path, hosts: int, epoch: int, records: int) -> bool:
    """Whether the hosts' records of ``epoch`` are each served once, the shares disjoint
    and together the epoch less its remainder (raises naming what is wrong)."""
    shares = [np.load(ids_dir / f"h{h}-e{epoch}.npy") for h in range(hosts)]
    every = np.concatenate(shares)
    expected = records - records % hosts
    if len(every) != expected or len(np.unique(every)) != expected:
        raise AssertionError(f"epoch {epoch}: {len(every)} records served, "
                             f"{len(np.unique(every))} distinct, expected {expected} once each")
    return True


# ------------------------------------------------------------------- the run
def run(records: int, modes: list[Mode], *, latency: float = 0.05, epochs: int = 2,
        batch: int = 256, seed: int = 0, server: str = "moto") -> dict[str, Any]:
    from benchmarks.w2_remote import make_dataset

    folder = make_dataset(records, SHARDS)
    files = sorted(folder.iterdir())
    for path in files:  # the page cache warm for the local baseline
        path.read_bytes()
    data_bytes = sum(p.stat().st_size for p in files if p.suffix == ".array_record")
    hosts = max(m.hosts for m in modes)
    out: dict[str, Any] = {
        "workload": f"{records} records x 3,072 B in {SHARDS} ArrayRecord shards "
                    f"({data_bytes / 1e6:.0f} MB; {data_bytes / SHARDS / 1e6:.1f} MB a shard), "
                    f"batch {batch}, {epochs} epochs; {SERVERS[server]} + "
                    f"{latency * 1000:.0f} ms a request (counting proxy, one port per host)",
        "server": server,
        "data_bytes": data_bytes, "records": records,
        "machine": {"cpus": os.cpu_count(),
                    "load_average_at_start": [round(x, 2) for x in os.getloadavg()]},
        "modes": {},
    }
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="bucket-modes-"))
    try:
        with local_bucket(BUCKET, [(str(folder), PREFIX)], latency=latency,
                          labels=[f"h{i}" for i in range(hosts)], server=server) as proxies:
            server_pid = next((p.pid for p in multiprocessing.active_children()), None)
            for mode in modes:
                print(f"mode {mode.name} ...", file=sys.stderr, flush=True)
                out["modes"][mode.name] = run_mode(
                    mode, f"s3://{BUCKET}/{PREFIX}", str(folder), proxies, data_bytes, records,
                    epochs=epochs, batch=batch, seed=seed, scratch=scratch,
                    server_pid=server_pid)
                shutil.rmtree(scratch / mode.name, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    out["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return out


def table(result: dict[str, Any]) -> str:
    """One row per mode: build and first batch, the cold epoch's rate, bytes and requests
    per epoch (all hosts), the later epochs' best rate against local disk's best."""
    lines = ["| mode | cache / host | build, first batch | cold epoch (build + epoch 0) "
             "| build: requests | epoch 0: downloaded, requests | epoch 1: downloaded, requests "
             "| epochs 1+ vs local disk | each record once | mixing: same-shard neighbours, "
             "shards a batch |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, m in result["modes"].items():
        cache = f"{m['cache_fraction']:g}x"
        if "refused" in m:
            lines.append(f"| {name} | {cache} | refused at build: "
                         f"{m['refused'].split(':')[0]} | | | | | | | |")
            continue
        first = max(h["epochs"][0]["first_batch_s"] for h in m["per_host"])
        cells = [f"{e['bytes_vs_data_set']:.2f}x ({e['bytes'] / 1e6:,.0f} MB), "
                 f"{e['requests']:,}" for e in m["epochs"]]
        cells += [""] * (2 - len(cells))
        opened = m["open"]
        lines.append(
            f"| {name} | {cache} | {opened['seconds']:.2f} s + {first:.2f} s "
            f"| {m['cold_records_per_s']:,.0f} rec/s | {opened['requests']:,} "
            f"({opened['bytes'] / 1e6:,.1f} MB) | {cells[0]} | {cells[1]} "
            f"| {m['later_epochs_vs_local_disk']:.2f} | {all(m['exactly_once'])} "
            f"| {m['mixing']['same_shard_neighbours']:.3f}, {m['mixing']['shards_per_batch']:.1f} |")
    for name, m in result["modes"].items():
        if "first_batch_floor" in m:
            f, best = m["first_batch_floor"], m["first_batch_floor"]["floor"]
            ours, ratio = f["datarax"], f["datarax_vs_floor"]
            lines.append(f"\n{name}: first batch {ours['seconds']:.2f} s, {ours['requests']} "
                         f"requests, {ours['bytes']:,} B, CPU client {ours['client_cpu_s']} s "
                         f"server {ours['server_cpu_s']} s; floor ({best['client']}) "
                         f"{best['seconds']:.2f} s (cold, its process's first: "
                         f"{f['floor_cold']['seconds']:.2f} s), {best['requests']} requests, "
                         f"{best['bytes']:,} B, CPU client {best['client_cpu_s']} s server "
                         f"{best['server_cpu_s']} s; datarax / floor: {ratio}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_RECORDS} records (~1 MB "
                        "a shard) instead of {RECORDS}")
    parser.add_argument("--records", type=int, help="records in all (overrides --quick)")
    parser.add_argument("--modes", help="comma-separated mode names (default: all)")
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--server", choices=sorted(SERVERS), default="moto",
                        help="the S3 server: moto's, or benchmarks/light_s3.py's (a few times "
                        "less CPU a request on the benchmark's own cores)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per host (>= 2): "
                        "epoch 0 from an empty cache, the later ones each followed by the "
                        "same epoch from local disk")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--json", type=pathlib.Path)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", type=pathlib.Path, help=argparse.SUPPRESS)
    parser.add_argument("--floor", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor:
        args.worker_out.write_text(json.dumps(floor_run(json.loads(args.floor))))
        return
    if args.worker:
        args.worker_out.write_text(json.dumps(host_run(json.loads(args.worker))))
        return
    records = args.records or (QUICK_RECORDS if args.quick else RECORDS)
    modes = [mode_named(n) for n in args.modes.split(",")] if args.modes else MODES
    result = run(records, modes, latency=args.latency, epochs=args.epochs, batch=args.batch,
                 server=args.server)
    text = json.dumps(result, indent=2)
    path = args.json or RESULTS / f"bucket_modes{'_quick' if args.quick else ''}.json"
    path.write_text(text + "\n")
    print(table(result))
    print(f"written: {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
