"""Where a global shuffle's build and first batch from an empty cache spend CPU, thread by
thread, in fresh processes; two versions of datarax alternating.

Each run is a fresh process (``python -m benchmarks.first_batch_cpu --child``) against the
light S3 server (:mod:`benchmarks.light_s3` behind the counting proxy, 50 ms added a
request) serving ``bucket_modes``' data set (64 shards of ~10 MB, 200,000 records of
3 KB): it imports (JAX started), builds ``ArrayRecordSourceModule`` (global shuffle, an
empty cache of 1.1x the data set), then ``seek(0)`` and one batch of 256. Reported per
run: the build's and the first batch's seconds and process CPU seconds (user and
system apart, context switches), the requests and bytes the proxy saw, each thread's
CPU seconds during the first batch (``/proc/self/task/*/schedstat``, named by Python
thread, pool threads summed: ``fsspecIO`` is s3fs's event loop, where every request's
botocore work runs), each ``Fetcher.read_ranges`` call (its requests, start and end),
and a digest of the batch's stable indices (equal across versions: the same records).

``--src LABEL=PATH`` (repeatable): a ``src`` folder to put first on ``PYTHONPATH``
(e.g. ``before=/tmp/before/src`` from ``git archive``, ``after=src``); the versions run
in turn, ``--runs`` rounds, so load drifts reach each alike. Compare CPU seconds (less
sensitive to the machine's load than wall seconds).

Run: ``python -m benchmarks.first_batch_cpu --src before=/tmp/before/src --src after=src
--runs 8 --json benchmarks/results/first_batch_cpu.json``.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from benchmarks.bucket_modes import BUCKET, PREFIX, RECORDS, ROOT, SHARDS
from benchmarks.harness import emit

RESULTS = ROOT / "benchmarks" / "results"


def thread_cpu() -> dict[str, tuple[str, float]]:
    """Each live thread's CPU seconds so far, by native id, with its Python name."""
    names = {str(t.native_id): t.name for t in threading.enumerate()}
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except OSError:
            continue
        out[tid] = (names.get(tid, "other"), ns / 1e9)
    return out


def by_thread(before: dict[str, tuple[str, float]],
              after: dict[str, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds between two :func:`thread_cpu` snapshots, pool threads summed."""
    spent: collections.Counter[str] = collections.Counter()
    for tid, (name, seconds) in after.items():
        spent[re.sub(r"_\d+$", "_N", name)] += seconds - before.get(tid, (name, 0.0))[1]
    return {k: round(v, 3) for k, v in spent.most_common() if v > 0.0005}


def child(job: dict[str, Any]) -> dict[str, Any]:
    """In a fresh process: imports, the build, the first batch, measured."""
    began = time.perf_counter()
    import jax
    import numpy as np
    import s3fs  # noqa: F401 - imported before the clocks, as bucket_modes does

    import datarax
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    jax.devices()
    from benchmarks.counting_proxy import read_stats
    from datarax.storage import ShardCache
    from datarax.storage.fetch import Fetcher

    out: dict[str, Any] = {"datarax": datarax.__file__,
                           "import_s": round(time.perf_counter() - began, 3)}
    wire = lambda: read_stats(job["proxy"])["h0"]  # noqa: E731
    steps: list[list[float]] = []
    read_ranges, clock = Fetcher.read_ranges, [0.0]

    def timed(self: Any, wanted: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return read_ranges(self, wanted, *args, **kwargs)
        finally:
            steps.append([len(wanted), round(start - clock[0], 3),
                          round(time.perf_counter() - clock[0], 3)])

    Fetcher.read_ranges = timed  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory(prefix="first-batch-cpu-") as folder:
        w0, c0, t0 = wire(), time.process_time(), time.perf_counter()
        source = ArrayRecordSourceModule(
            ArrayRecordSourceConfig(seed=0, shuffle_files=True), job["url"],
            cache=ShardCache(folder, max_bytes=int(1.1 * job["data_bytes"])))
        c1, t1 = time.process_time(), time.perf_counter()
        w1 = wire()
        threads0, usage0 = thread_cpu(), resource.getrusage(resource.RUSAGE_SELF)
        c2, clock[0] = time.process_time(), time.perf_counter()
        source.seek(0)
        _, indices = source.get_batch_with_indices(256)
        c3, t3 = time.process_time(), time.perf_counter()
        threads1, usage1 = thread_cpu(), resource.getrusage(resource.RUSAGE_SELF)
        w2 = wire()
        out.update(
            build_s=round(t1 - t0, 3), build_cpu_s=round(c1 - c0, 3),
            build_requests=w1["requests"] - w0["requests"],
            first_batch_s=round(t3 - clock[0], 3), first_batch_cpu_s=round(c3 - c2, 3),
            user_s=round(usage1.ru_utime - usage0.ru_utime, 3),
            system_s=round(usage1.ru_stime - usage0.ru_stime, 3),
            voluntary_switches=usage1.ru_nvcsw - usage0.ru_nvcsw,
            involuntary_switches=usage1.ru_nivcsw - usage0.ru_nivcsw,
            requests=w2["requests"] - w1["requests"], bytes=w2["body_bytes"] - w1["body_bytes"],
            threads_cpu_s=by_thread(threads0, threads1), read_ranges=steps[:4],
            indices_digest=int(np.asarray(indices, np.int64).sum()),
            load=round(os.getloadavg()[0], 2))
        source.close()
    return out


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians (and ranges) of one version's runs."""
    def stat(key: str) -> list[float]:
        values = [r[key] for r in runs]
        return [round(statistics.median(values), 3), min(values), max(values)]

    names = sorted({k for r in runs for k in r["threads_cpu_s"]})
    return {"runs": len(runs), **{k: stat(k) for k in (
        "build_s", "build_cpu_s", "first_batch_s", "first_batch_cpu_s", "user_s", "system_s",
        "voluntary_switches", "requests", "load")},
        "threads_cpu_s_median": {n: round(statistics.median(
            [r["threads_cpu_s"].get(n, 0.0) for r in runs]), 3) for n in names},
        "indices_digests": sorted({r["indices_digest"] for r in runs})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", action="append", default=[], metavar="LABEL=PATH")
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--json", type=str)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    from benchmarks.local_bucket import client_env, local_bucket
    from benchmarks.w2_remote import make_dataset

    sources = dict(s.split("=", 1) for s in args.src) or {"datarax": str(ROOT / "src")}
    folder = make_dataset(RECORDS, SHARDS)
    data_bytes = sum(p.stat().st_size for p in folder.iterdir() if p.suffix == ".array_record")
    out: dict[str, Any] = {"workload": f"{RECORDS} records x 3,072 B in {SHARDS} shards, "
                           "global shuffle, batch 256, light S3 server + 50 ms a request",
                           "cpus": os.cpu_count(), "sources": sources, "runs": []}
    with local_bucket(BUCKET, [(str(folder), PREFIX)], latency=0.05, server="light") as urls:
        job = {"url": f"s3://{BUCKET}/{PREFIX}", "data_bytes": data_bytes, "proxy": urls["h0"]}
        for round_ in range(args.runs):
            for label, src in sources.items():
                env = {**os.environ, **client_env(urls["h0"]), "JAX_PLATFORMS": "cpu",
                       "PYTHONPATH": os.pathsep.join([str(src), str(ROOT)])}
                done = subprocess.run(
                    [sys.executable, "-m", "benchmarks.first_batch_cpu", "--child",
                     json.dumps(job)], cwd=ROOT, env=env, check=True, capture_output=True,
                    text=True)
                run = {"label": label, "round": round_,
                       **json.loads(done.stdout.strip().splitlines()[-1])}
                out["runs"].append(run)
                print(json.dumps({k: run[k] for k in ("label", "first_batch_s",
                                                      "first_batch_cpu_s", "load")}),
                      file=sys.stderr, flush=True)
    out["summary"] = {label: summary([r for r in out["runs"] if r["label"] == label])
                      for label in sources}
    emit(out, args.json or RESULTS / "first_batch_cpu.json")


if __name__ == "__main__":
    multiprocessing.freeze_support()
    main()
