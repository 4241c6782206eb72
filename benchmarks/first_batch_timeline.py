"""Where a global shuffle's first batch from an empty cache spends its time: each call of
``Fetcher.read_ranges`` (the head start's steps: a file's footer, a record, the footers
of the batch's files, its records) with its start and end, from ``seek(0)``.

The ``bucket_modes`` data set (64 shards of ~10 MB; ``--records``) on a local server
(``--server light|moto``, 50 ms added a request), read in this one process
(``benchmarks.local_bucket``); ``--runs`` fresh sources, each with an empty cache.
Reports each run's first batch (seconds, this process's and the server's CPU seconds,
ranged requests) and its steps.

Run: ``python -m benchmarks.first_batch_timeline [--server light] [--runs 3] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import pathlib
import sys
import tempfile
import time
from typing import Any

from benchmarks.bucket_modes import RECORDS, SHARDS


def one_run(url: str, data_bytes: int, server_pid: int) -> dict[str, Any]:
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

    Fetcher.read_ranges = timed  # type: ignore[method-assign]
    try:
        cache = ShardCache(tempfile.mkdtemp(prefix="timeline-"), max_bytes=int(1.1 * data_bytes))
        built = time.perf_counter()
        source = ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=0, shuffle_files=True),
                                         url, cache=cache)
        open_s = time.perf_counter() - built
        cpu0, server0 = time.process_time(), process_cpu_s(server_pid)
        t0[0] = time.perf_counter()
        source.seek(0)
        source.get_batch_with_indices(256)
        first = time.perf_counter() - t0[0]
        out = {"open_s": round(open_s, 3), "first_batch_s": round(first, 3),
               "client_cpu_s": round(time.process_time() - cpu0, 3),
               "server_cpu_s": round(process_cpu_s(server_pid) - server0, 3),
               "ranged_requests": source.stats()["storage"]["ranged_requests"], "steps": steps}
        source.close()
        return out
    finally:
        Fetcher.read_ranges = read_ranges  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=("light", "moto"), default="light")
    parser.add_argument("--records", type=int, default=RECORDS)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    import jax

    from benchmarks.local_bucket import local_bucket
    from benchmarks.w2_remote import make_dataset

    jax.devices()
    folder = make_dataset(args.records, SHARDS)
    data_bytes = sum(p.stat().st_size for p in folder.iterdir() if p.suffix == ".array_record")
    out: dict[str, Any] = {"server": args.server, "latency_s": 0.05,
                           "load_average_at_start": os.getloadavg()[0], "runs": []}
    with local_bucket("datarax-timeline", [(str(folder), "ds")], latency=0.05,
                      server=args.server):
        pid = next(p.pid for p in multiprocessing.active_children())
        for _ in range(args.runs):
            out["runs"].append(one_run("s3://datarax-timeline/ds", data_bytes, pid))
            print(json.dumps(out["runs"][-1]), file=sys.stderr)
    out["load_average_at_end"] = os.getloadavg()[0]
    path = args.json or pathlib.Path(__file__).parent / "results" / \
        f"first_batch_timeline_{args.server}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"written: {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
