"""First batch of W2 from object storage with an empty cache: with and without a head start.

The W2 dataset of :mod:`benchmarks.w2_remote` (100,000 records of 3 KB in 8 shards of
39 MB, a datarax dataset) on the same local S3 server (moto behind the tests' proxy,
``--latency`` seconds added to every request, in a separate process). For a global
shuffle and for ``shuffle_window=2``, each from an empty cache: seconds from building the
source to its first batch, then to the end of the epoch (``--epoch``), and what the
source fetched (whole files, ranged requests and bytes). Run it once with the code under
test on ``PYTHONPATH`` and once with the code before (``--label`` names the run).

Run: ``python -m benchmarks.w2_head_start [--records N] [--latency S] [--epoch]
[--label L] [--json PATH]``.
"""

from __future__ import annotations

import json
import os
import pathlib
import tempfile
import time
from typing import Any

from benchmarks.harness import emit, parser
from benchmarks.local_bucket import local_bucket
from benchmarks.w2_remote import BUCKET, OPTIONS, _source, make_dataset


def _first_batch(url: str, window: int | None, cache_dir: str, batch: int,
                 epoch: bool) -> dict[str, Any]:
    from datarax.storage import ShardCache

    t0 = time.perf_counter()
    with _source(url, 0, window, cache=ShardCache(cache_dir, max_bytes=4 << 30)) as src:
        built = time.perf_counter() - t0
        out, _ = src.get_batch_with_indices(batch)
        first = time.perf_counter() - t0
        assert out is not None
        result: dict[str, Any] = {"build_s": round(built, 3), "first_batch_s": round(first, 3)}
        result["at_first_batch"] = _storage(src)
        if epoch:
            records = len(out["image"])
            while True:
                out, _ = src.get_batch_with_indices(batch)
                if out is None:
                    break
                records += len(out["image"])
            result["epoch_s"] = round(time.perf_counter() - t0, 3)
            result["records"] = records
            result["at_epoch_end"] = _storage(src)
    return result


def _storage(src: Any) -> dict[str, Any]:
    storage = (src.stats() or {}).get("storage", {})
    keys = ("fetched", "fetched_bytes", "ranged_requests", "ranged_bytes", "ranged_records")
    return {k: storage[k] for k in keys if k in storage}


def run(records: int, shards: int, batch: int, latency: float, epoch: bool) -> dict[str, Any]:
    folder = make_dataset(records, shards)
    url = f"s3://{BUCKET}/w2"
    out: dict[str, Any] = {
        "workload": f"{records} records x 3 KB in {shards} shards, batch {batch}, "
                    f"+{latency * 1000:.0f} ms a request",
        "dataset_bytes": sum(p.stat().st_size for p in pathlib.Path(folder).iterdir()),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    with local_bucket(BUCKET, [(str(folder), "w2")], latency=latency), \
            tempfile.TemporaryDirectory(prefix="w2-head-") as scratch:
        for name, window in (("global", None), ("window_2", 2)):
            out[name] = _first_batch(url, window, os.path.join(scratch, name), batch, epoch)
            print(name, json.dumps(out[name]), flush=True)
    out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return out


def main() -> None:
    options = parser(__doc__, **OPTIONS)
    options.add_argument("--epoch", action="store_true", help="also read the rest of the epoch")
    options.add_argument("--label", default="")
    options.add_argument("--json", type=pathlib.Path)
    args = options.parse_args()
    result = {"label": args.label,
              **run(args.records, args.shards, args.batch, args.latency, args.epoch)}
    emit(result, args.json, indent=1)


if __name__ == "__main__":
    main()
