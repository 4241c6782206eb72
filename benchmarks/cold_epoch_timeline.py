"""A global shuffle's epoch 0 from a bucket, as a timeline: when each file's download
started and ended (and which thread ran it: read-ahead's ``datarax-fetch`` or a reader's),
when the first batch came, when the epoch ended; the phases these make (the first batch
by range while downloads are held back, the downloads, the reading once the last file is
in) and the process's CPU seconds.

Workload: ``bucket_modes``' data set (64 shards, 200,000 records of 3 KB) on its light S3
server with 50 ms added per request, a cache of 1.1x the data set, one fresh process.

Run: ``python -m benchmarks.cold_epoch_timeline`` (prints one JSON line; seconds from
the build's start).
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from typing import Any


def main() -> None:
    from benchmarks.local_bucket import local_bucket
    from benchmarks.w2_remote import make_dataset

    folder = make_dataset(200_000, 64)
    for path in folder.iterdir():
        path.read_bytes()  # the page cache warm, as bucket_modes does
    with local_bucket("timeline-bucket", [(str(folder), "ds")], latency=0.05, server="light"):
        import jax

        jax.devices()
        from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
        from datarax.storage import ShardCache
        from datarax.storage.fetch import Fetcher

        began, cpu = time.perf_counter(), time.process_time()
        downloads: list[tuple[float, float, str]] = []
        download = Fetcher.download

        def timed(self: Fetcher, obj: Any, part: str) -> None:  # Fetcher.download, timed
            start = time.perf_counter() - began
            download(self, obj, part)
            downloads.append((start, time.perf_counter() - began, threading.current_thread().name))

        Fetcher.download = timed
        # the 633 MB cache goes with the run (removed at exit, also on an error)
        cache_folder = tempfile.TemporaryDirectory(prefix="datarax-timeline-")
        source = ArrayRecordSourceModule(
            ArrayRecordSourceConfig(seed=0, shuffle_files=True), "s3://timeline-bucket/ds",
            cache=ShardCache(cache_folder.name, max_bytes=int(1.1 * 633e6)))
        built = time.perf_counter() - began
        source.seek(0)
        first = None
        while True:
            batch, _ = source.get_batch_with_indices(256)
            if batch is None:
                break
            first = first or time.perf_counter() - began
        end = time.perf_counter() - began
        source.close()
        downloads.sort(key=lambda d: d[1])
        print(json.dumps({
            "build_s": round(built, 3), "first_batch_s": round(first or 0.0, 3),
            "epoch_end_s": round(end, 3), "downloads": len(downloads),
            "first_download_start_s": round(min(d[0] for d in downloads), 3),
            "last_download_end_s": round(downloads[-1][1], 3),
            "by_reader_threads": sum(not d[2].startswith("datarax-fetch") for d in downloads),
            "last_6": [(round(a, 3), round(b, 3), name) for a, b, name in downloads[-6:]],
            "phases_s": {"build": round(built, 3), "first_batch": round((first or built) - built, 3),
                         "downloads": round(downloads[-1][1] - min(d[0] for d in downloads), 3),
                         "reading_after_last_download": round(end - downloads[-1][1], 3)},
            "cpu_s": round(time.process_time() - cpu, 3)}))


if __name__ == "__main__":
    main()
