"""W2 from object storage: the W2 records as a datarax dataset read from a local S3 server
with injected latency, beside W2 from local disk and a copy-then-read baseline.

Workload: W2's records (100,000 x 3,072 bytes, ``uint8 (32, 32, 3)``, record ``i``
starting with its index) written with ``datarax.dataset.write_dataset`` in 8 shards; one
shuffled epoch, batch 256, through ``ArrayRecordSourceModule.get_batch_with_indices``.

The server is moto's S3 server behind the tests' fault-injecting proxy
(``tests/storage/conftest.py``) adding ``--latency`` seconds (default 0.05) to every
request, both in a separate process so they do not share this process's Python lock.
The client reads as a user would: ``paths="s3://bucket/w2"``, endpoint and credentials
from ``AWS_ENDPOINT_URL`` / ``AWS_ACCESS_KEY_ID`` ...

Contenders (one process, one after another):

* ``local`` — the dataset folder on local disk (page cache warm): the reference.
* ``remote_cold`` — ``s3://``, an empty cache: first batch latency and the whole epoch
  (downloads overlapped with reading by the read-ahead).
* ``remote_steady`` — the next epoch of the same source (files in the cache).
* ``remote_window`` — ``shuffle_window=2`` with a cache of 5 of the 8 shards: every epoch
  fetches again; its second epoch, against ``local`` in the same window mode.
* ``copy_then_read`` — download every file (s3fs ``get``, parallel), then read locally;
  the time of both.

MosaicML Streaming is not run: ``mosaicml-streaming`` needs PyTorch and pins
``numpy<2.2`` (installing it would downgrade this venv's NumPy 2.4).

Run: ``python -m benchmarks.w2_remote [--records N] [--latency S] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import pathlib
import shutil
import socket
import tempfile
import time
from typing import Any

import numpy as np

from benchmarks.bench_array_record import RECORD_BYTES, RECORD_SHAPE, Check

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / "data" / "bench_remote"
BUCKET = "datarax-bench"


def make_dataset(records: int, shards: int) -> pathlib.Path:
    """W2's records as a datarax dataset (written once under ``data/bench_remote``)."""
    from datarax.dataset import write_dataset

    folder = DATA_DIR / f"n{records}_s{shards}"
    if (folder / "DONE").exists():
        return folder / "ds"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)

    def rows() -> Any:
        for i in range(records):
            payload = rng.integers(0, 256, RECORD_BYTES, dtype=np.uint8)
            payload[:4] = np.frombuffer(np.uint32(i).tobytes(), np.uint8)
            yield {"image": payload.reshape(RECORD_SHAPE)}

    write_dataset(rows(), folder / "ds", shards=shards)
    (folder / "DONE").write_text("ok\n")
    return folder / "ds"


def _serve(folder: str, latency: float, ready: Any) -> None:
    """Child process: moto's server, the dataset uploaded, the latency proxy in front."""
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)

    from tests.storage.conftest import FaultyProxy

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    client.create_bucket(Bucket=BUCKET)
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            client.put_object(Bucket=BUCKET, Key=f"w2/{name}", Body=f.read())
    proxy = FaultyProxy(("127.0.0.1", port))
    proxy.latency = latency
    ready.send(proxy.url)
    ready.recv()  # until the parent is done
    proxy.close()
    server.stop()


def _epoch(source: Any, records: int, batch: int, name: str, epoch: int = 0) -> tuple[float, float]:
    """(seconds to the first batch, seconds for the whole pass) of epoch ``epoch``."""
    check = Check(records)
    start = time.perf_counter()
    source.seek(epoch)
    first = None
    while True:
        out, _ = source.get_batch_with_indices(batch)
        if out is None:
            break
        if first is None:
            first = time.perf_counter() - start
        check.add(out["image"])
    elapsed = time.perf_counter() - start
    check.verify(name)
    return float(first or 0.0), elapsed


def _source(paths: str, seed: int, window: int | None, **kwargs: Any) -> Any:
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    config = ArrayRecordSourceConfig(seed=seed, shuffle_files=True, shuffle_window=window)
    return ArrayRecordSourceModule(config, paths, **kwargs)


def _rate(records: int, seconds: float) -> float:
    return round(records / seconds, 1)


def run(records: int = 100_000, shards: int = 8, batch: int = 256, latency: float = 0.05,
        seed: int = 0) -> dict[str, Any]:
    """Run every contender once; records/s, first-batch seconds and the ratios."""
    from datarax.storage import ShardCache

    folder = make_dataset(records, shards)
    for name in os.listdir(folder):  # warm the page cache for the local reference
        pathlib.Path(folder, name).read_bytes()
    parent, child = multiprocessing.get_context("spawn").Pipe()
    server = multiprocessing.get_context("spawn").Process(
        target=_serve, args=(str(folder), latency, child), daemon=True)
    server.start()
    endpoint = parent.recv()
    os.environ.update({"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
                       "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"})
    url = f"s3://{BUCKET}/w2"
    out: dict[str, Any] = {
        "workload": f"W2 as a datarax dataset: {records} records x {RECORD_BYTES} B in {shards} "
                    f"shards, shuffled epoch, batch {batch}; S3 = moto server + {latency * 1000:.0f} ms "
                    "per request (proxy)",
    }
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="w2-remote-"))
    try:
        with _source(str(folder), seed, None) as src:
            _epoch(src, records, batch, "local warm-up")
            first, secs = _epoch(src, records, batch, "local", 1)
        out["local"] = {"records_per_s": _rate(records, secs), "first_batch_s": round(first, 4)}

        cache = ShardCache(scratch / "cache", max_bytes=4 << 30)
        t0 = time.perf_counter()
        with _source(url, seed, None, cache=cache) as src:
            opened = time.perf_counter() - t0
            first, secs = _epoch(src, records, batch, "remote cold")
            out["remote_cold"] = {"records_per_s": _rate(records, secs),
                                  "first_batch_s": round(first, 4), "open_s": round(opened, 4),
                                  "first_batch_from_open_s": round(opened + first, 4)}
            first, secs = _epoch(src, records, batch, "remote steady", 1)
            out["remote_steady"] = {"records_per_s": _rate(records, secs),
                                    "first_batch_s": round(first, 4)}
            stats = src.stats() or {}
            out["remote_stats"] = stats.get("storage", stats)

        with _source(str(folder), seed, 2) as src:
            _epoch(src, records, batch, "local window warm-up")
            _, secs = _epoch(src, records, batch, "local window", 1)
        out["local_window"] = {"records_per_s": _rate(records, secs)}
        shard_bytes = max(p.stat().st_size for p in folder.iterdir())
        small = ShardCache(scratch / "small", max_bytes=5 * shard_bytes + (1 << 20))
        try:
            with _source(url, seed, 2, cache=small) as src:
                _epoch(src, records, batch, "remote window 0")
                first, secs = _epoch(src, records, batch, "remote window 1", 1)
                out["remote_window"] = {"records_per_s": _rate(records, secs),
                                        "first_batch_s": round(first, 4),
                                        "cache_bytes": small.max_bytes}
        except Exception as err:  # reported beside the other results, not hidden
            out["remote_window"] = {"error": f"{type(err).__name__}: {err}"[:400]}

        import s3fs

        copy = scratch / "copy"
        t0 = time.perf_counter()
        fs = s3fs.S3FileSystem(skip_instance_cache=True)
        fs.get(f"{BUCKET}/w2/", str(copy) + "/", recursive=True)
        copied = time.perf_counter() - t0
        with _source(str(copy), seed, None) as src:
            first, secs = _epoch(src, records, batch, "copy then read")
        out["copy_then_read"] = {"records_per_s": _rate(records, copied + secs),
                                 "copy_s": round(copied, 3), "first_batch_s": round(copied + first, 3)}
    finally:
        parent.send("done")
        server.join(timeout=30)
        shutil.rmtree(scratch, ignore_errors=True)

    local = out["local"]["records_per_s"]
    out["ratios"] = {
        "remote_steady/local": round(out["remote_steady"]["records_per_s"] / local, 3),
        "remote_cold/local": round(out["remote_cold"]["records_per_s"] / local, 3),
        "remote_window/local_window": round(out["remote_window"]["records_per_s"]
                                            / out["local_window"]["records_per_s"], 3)
        if "records_per_s" in out["remote_window"] else None,
        "copy_then_read/local": round(out["copy_then_read"]["records_per_s"] / local, 3),
        "remote_cold/copy_then_read": round(out["remote_cold"]["records_per_s"]
                                            / out["copy_then_read"]["records_per_s"], 3),
    }
    out["mosaicml_streaming"] = ("not run: mosaicml-streaming needs torch and numpy<2.2 "
                                 "(it would downgrade this venv's numpy 2.4)")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    result = run(args.records, args.shards, args.batch, args.latency)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
