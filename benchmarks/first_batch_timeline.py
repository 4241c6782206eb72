"""Where a global shuffle's first batch from an empty cache spends its time, measured as a
user meets it: each contender in a fresh process, the floor in the same run.

Each run starts two fresh processes one after the other against the same server:

- **datarax**: imports (JAX started), builds a source over the ``bucket_modes`` data set
  (64 shards of ~10 MB; ``--records``) with an empty cache and reads its first batch of
  256 (``cold``: what a user's first batch costs), then does the same with a second
  fresh source and empty cache in the same process (``warm``: the modules, s3fs's
  client and its connections already made, as the old same-process runs measured).
  Each reports its first batch (seconds from ``seek(0)``, this process's and the
  server's CPU seconds, ranged requests) and its steps: each call of
  ``Fetcher.read_ranges`` (a file's footer, a record, the footers of the batch's files,
  its records) with its start and end.
- **floor**: :mod:`benchmarks.first_batch_floor`'s plain clients issuing exactly the
  requests of the cold batch (its records, from the picks the datarax process saved),
  each client twice, alternating; ``cold`` is the first (boto3, the first requests of
  its process), ``best`` the fastest.

The server (``--server light|moto``, 50 ms added a request) runs in its own process
(:func:`benchmarks.local_bucket.local_bucket`); nothing else runs in the benchmark's
processes while a first batch is timed.

Run: ``python -m benchmarks.first_batch_timeline [--server light] [--runs 3] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks.bucket_modes import BUCKET, PREFIX, RECORDS, ROOT, SHARDS
from benchmarks.harness import emit

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def one_source(url: str, data_bytes: int, server_pid: int,
               picks: pathlib.Path | None = None) -> dict[str, Any]:
    """A fresh source with an empty cache: its first batch, timed step by step."""
    from benchmarks.first_batch_floor import process_cpu_s
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
    from datarax.storage import ShardCache
    from datarax.storage.fetch import Fetcher

    steps: list[dict[str, Any]] = []
    t0 = [0.0]
    read_ranges = Fetcher.read_ranges

    def timed(self: Any, wanted: Any, *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return read_ranges(self, wanted, *args, **kwargs)
        finally:
            steps.append({"requests": len(wanted), "from_s": round(began - t0[0], 3),
                          "to_s": round(time.perf_counter() - t0[0], 3)})

    folder = tempfile.mkdtemp(prefix="timeline-")  # the cache, removed at the end
    Fetcher.read_ranges = timed  # type: ignore[method-assign]
    try:
        cache = ShardCache(folder, max_bytes=int(1.1 * data_bytes))
        built = time.perf_counter()
        source = ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=0, shuffle_files=True),
                                         url, cache=cache)
        open_s = time.perf_counter() - built
        cpu0, server0 = time.process_time(), process_cpu_s(server_pid)
        t0[0] = time.perf_counter()
        source.seek(0)
        _, indices = source.get_batch_with_indices(256)
        first = time.perf_counter() - t0[0]
        out = {"open_s": round(open_s, 3), "first_batch_s": round(first, 3),
               "client_cpu_s": round(time.process_time() - cpu0, 3),
               "server_cpu_s": round(process_cpu_s(server_pid) - server0, 3),
               "ranged_requests": source.stats()["storage"]["ranged_requests"], "steps": steps}
        if picks is not None:  # the floor's plan: the batch's records' places
            picks.write_text(json.dumps([[os.path.basename(p), k] for p, k in
                                         (source.locate(int(i)) for i in indices.tolist())]))
        source.close()
        return out
    finally:
        Fetcher.read_ranges = read_ranges  # type: ignore[method-assign]
        shutil.rmtree(folder, ignore_errors=True)


def datarax_process(job: dict[str, Any]) -> dict[str, Any]:
    """In a fresh process: the cold first batch, then a warm one (a second fresh source)."""
    began = time.perf_counter()
    import jax

    import datarax.sources  # noqa: F401

    jax.devices()
    out: dict[str, Any] = {"import_s": round(time.perf_counter() - began, 3)}
    out["cold"] = one_source(job["url"], job["data_bytes"], job["server_pid"],
                             pathlib.Path(job["picks"]))
    out["warm"] = one_source(job["url"], job["data_bytes"], job["server_pid"])
    return out


def floor_process(job: dict[str, Any]) -> dict[str, Any]:
    """In a fresh process: the floor's clients on the cold batch's requests."""
    from benchmarks.counting_proxy import read_stats
    from benchmarks.first_batch_floor import first_batch_plan, measure

    plan = first_batch_plan(job["local"], json.loads(pathlib.Path(job["picks"]).read_text()))
    got = measure(plan, bucket=BUCKET, prefix=PREFIX, server_pid=job["server_pid"],
                  wire=lambda: read_stats(os.environ["AWS_ENDPOINT_URL"])["h0"])
    return {"cold": got["runs"][0], "best": got["floor"], "runs": got["runs"]}


def child(kind: str, job: dict[str, Any], scratch: pathlib.Path) -> dict[str, Any]:
    """``kind``'s process, fresh, its JSON back."""
    result = scratch / f"{kind}.json"
    subprocess.run([sys.executable, "-m", "benchmarks.first_batch_timeline", "--child", kind,
                    "--job", json.dumps(job), "--out", str(result)], cwd=ROOT, check=True)
    return json.loads(result.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=("light", "moto"), default="light")
    parser.add_argument("--records", type=int, default=RECORDS)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=pathlib.Path)
    parser.add_argument("--child", choices=("datarax", "floor"), help=argparse.SUPPRESS)
    parser.add_argument("--job", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=pathlib.Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run = datarax_process if args.child == "datarax" else floor_process
        args.out.write_text(json.dumps(run(json.loads(args.job))))
        return
    from benchmarks.local_bucket import local_bucket
    from benchmarks.w2_remote import make_dataset

    folder = make_dataset(args.records, SHARDS)
    data_bytes = sum(p.stat().st_size for p in folder.iterdir() if p.suffix == ".array_record")
    out: dict[str, Any] = {"server": args.server, "latency_s": 0.05,
                           "load_average_at_start": os.getloadavg()[0], "runs": []}
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="timeline-runs-"))
    with local_bucket(BUCKET, [(str(folder), PREFIX)], latency=0.05, server=args.server), \
            contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, scratch, ignore_errors=True)
        pid = next(p.pid for p in multiprocessing.active_children())
        job = {"url": f"s3://{BUCKET}/{PREFIX}", "data_bytes": data_bytes, "server_pid": pid,
               "picks": str(scratch / "picks.json"), "local": str(folder)}
        for _ in range(args.runs):
            run = {"datarax": child("datarax", job, scratch), "floor": child("floor", job, scratch),
                   "load_average": os.getloadavg()[0]}
            out["runs"].append(run)
            print(json.dumps({"datarax_cold": run["datarax"]["cold"]["first_batch_s"],
                              "datarax_warm": run["datarax"]["warm"]["first_batch_s"],
                              "floor_cold": run["floor"]["cold"]["seconds"],
                              "floor_best": run["floor"]["best"]["seconds"],
                              "cold_steps": run["datarax"]["cold"]["steps"][:4],
                              "load": run["load_average"]}), file=sys.stderr)
    out["load_average_at_end"] = os.getloadavg()[0]
    emit(out, args.json or RESULTS / f"first_batch_timeline_{args.server}.json")


if __name__ == "__main__":
    main()
