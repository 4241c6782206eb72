"""W2 from object storage: the W2 records as a datarax dataset read from a local S3 server
with injected latency, beside W2 from local disk and a copy-then-read baseline.

Workload: W2's records (100,000 x 3,072 bytes, ``uint8 (32, 32, 3)``, record ``i``
starting with its index) written with ``datarax.dataset.write_dataset`` in 8 shards; one
shuffled epoch, batch 256, through ``ArrayRecordSourceModule.get_batch_with_indices``.

The server is moto's S3 server behind a proxy adding ``--latency`` seconds (default 0.05)
to every request, both in a separate process so they do not share this process's Python
lock (:func:`benchmarks.local_bucket.local_bucket`).
The client reads as a user would: ``paths="s3://bucket/w2"``, endpoint and credentials
from ``AWS_ENDPOINT_URL`` / ``AWS_ACCESS_KEY_ID`` ...

Contenders (one process, one after another):

* ``local`` — the dataset folder on local disk (page cache warm): the reference.
* ``remote_cold`` — ``s3://``, an empty cache: first batch latency and the whole epoch
  (downloads overlapped with reading by the read-ahead).
* ``remote_steady`` — the next epoch of the same source (files in the cache).
* ``local_window`` — the local folder with ``shuffle_window=2`` (the reference of the
  window rows).
* ``remote_window_cold`` — ``s3://`` with ``shuffle_window=2`` (the mode for data sets
  larger than the cache) and a cache of 5 of the 8 shards, from an empty cache: its first
  batch needs only the first window's 2 files, not every file as a global shuffle's does.
  Its ``open_s`` is smaller than ``remote_cold``'s: the S3 client was made then.
* ``remote_window`` — the same source's second epoch: the cache is smaller than the data
  set, so every epoch fetches again; against ``local`` in the same window mode.
* ``copy_then_read`` — download every file (s3fs ``get``, parallel), then read locally;
  the time of both.
* ``streaming_cold`` / ``streaming_steady`` — MosaicML Streaming, the peer: the same
  records written in its own MDS format (``MDSWriter``, as many shards as the datarax
  dataset), uploaded to the same server under ``w2-mds/``, read through the same proxy
  by ``StreamingDataset(remote="s3://...", local=<tmp>, shuffle=True, batch_size=...)``
  in a ``torch`` ``DataLoader`` (``--streaming-workers``, default 2, persistent): its
  first epoch from an empty local folder, then its second. ``mosaicml-streaming`` needs
  PyTorch and pins ``numpy<2.2``, so it runs as a subprocess in its own venv,
  ``.venv-streaming`` (build it with ``make bench-streaming-env``), through
  ``benchmarks/streaming_peer.py``. Without that venv the peer is reported as not run.

Run: ``python -m benchmarks.w2_remote [--records N] [--latency S] [--json PATH] [--md PATH]``.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

from benchmarks.bench_array_record import RECORD_BYTES, RECORD_SHAPE, Check
from benchmarks.harness import emit, parser
from benchmarks.local_bucket import local_bucket

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / "data" / "bench_remote"
BUCKET = "datarax-bench"
# the workload's size and the added latency, as options (w2_head_start takes the same)
OPTIONS = {"records": 100_000, "shards": 8, "batch": 256, "latency": 0.05}
STREAMING_PYTHON = ROOT / ".venv-streaming" / "bin" / "python"
STREAMING_PEER = ROOT / "benchmarks" / "streaming_peer.py"
STREAMING_NOT_RUN = "not run (make bench-streaming-env)"


def _images(records: int) -> Any:
    """W2's records in order: ``uint8 (32, 32, 3)``, record ``i`` starting with ``uint32(i)``."""
    rng = np.random.default_rng(0)
    for i in range(records):
        payload = rng.integers(0, 256, RECORD_BYTES, dtype=np.uint8)
        payload[:4] = np.frombuffer(np.uint32(i).tobytes(), np.uint8)
        yield payload.reshape(RECORD_SHAPE)


def make_dataset(records: int, shards: int) -> pathlib.Path:
    """W2's records as a datarax dataset (written once under ``data/bench_remote``)."""
    from datarax.dataset import write_dataset

    folder = DATA_DIR / f"n{records}_s{shards}"
    if (folder / "DONE").exists():
        return folder / "ds"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    write_dataset(({"image": image} for image in _images(records)), folder / "ds", shards=shards)
    (folder / "DONE").write_text("ok\n")
    return folder / "ds"


def make_mds(records: int, shards: int) -> pathlib.Path:
    """The same records in MosaicML Streaming's MDS format, written once by the peer
    (``streaming_peer.py write``, in ``.venv-streaming``) from an ``.npy`` export."""
    folder = DATA_DIR / f"n{records}_s{shards}"
    if (folder / "MDS_DONE").exists():
        return folder / "mds"
    folder.mkdir(parents=True, exist_ok=True)
    npy = folder / "records.npy"
    out = np.lib.format.open_memmap(npy, mode="w+", dtype=np.uint8, shape=(records, *RECORD_SHAPE))
    for i, image in enumerate(_images(records)):
        out[i] = image
    out.flush()
    del out
    proc = subprocess.run([str(STREAMING_PYTHON), str(STREAMING_PEER), "write", str(npy),
                           str(folder / "mds"), "--shards", str(shards)],
                          capture_output=True, text=True, cwd=ROOT)
    npy.unlink()
    if proc.returncode != 0:
        raise RuntimeError(f"streaming_peer.py write failed (exit {proc.returncode}):\n"
                           f"{proc.stderr[-2000:]}")
    (folder / "MDS_DONE").write_text(proc.stdout)
    return folder / "mds"


def run_streaming(url: str, endpoint: str, records: int, batch: int, workers: int,
                  seed: int) -> dict[str, Any]:
    """The peer's two epochs (``streaming_peer.py read`` in its venv) against ``url``."""
    env = {**os.environ, "S3_ENDPOINT_URL": endpoint}
    with tempfile.TemporaryDirectory(prefix="w2-peer-") as tmp:
        result = pathlib.Path(tmp) / "result.json"
        proc = subprocess.run([str(STREAMING_PYTHON), str(STREAMING_PEER), "read", url,
                               "--records", str(records), "--batch", str(batch),
                               "--workers", str(workers), "--seed", str(seed),
                               "--json", str(result)],
                              capture_output=True, text=True, cwd=ROOT, env=env, timeout=1800)
        if proc.returncode != 0 or not result.exists():
            last = [line.strip() for line in proc.stderr.splitlines() if line.strip()][-3:]
            return {"error": f"streaming_peer.py read failed (exit {proc.returncode}): "
                             + " | ".join(last)[-600:]}
        out: dict[str, Any] = json.loads(result.read_text())
        return out


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
        seed: int = 0, streaming_workers: int = 2) -> dict[str, Any]:
    """Run every contender once; records/s, first-batch seconds and the ratios."""
    from datarax.storage import ShardCache

    folder = make_dataset(records, shards)
    for name in os.listdir(folder):  # warm the page cache for the local reference
        pathlib.Path(folder, name).read_bytes()
    uploads = [(str(folder), "w2")]
    mds, streaming_note = None, STREAMING_NOT_RUN
    if STREAMING_PYTHON.exists():
        try:
            mds = make_mds(records, shards)
            uploads.append((str(mds), "w2-mds"))
        except (OSError, RuntimeError) as err:  # reported beside the other results
            streaming_note = f"not run: {err}"[:600]
    else:
        print(f"MosaicML Streaming peer not run: {STREAMING_PYTHON.parent.parent.name} is missing; "
              "`make bench-streaming-env` builds it (torch CPU, mosaicml-streaming, numpy<2.2)",
              file=sys.stderr)
    url = f"s3://{BUCKET}/w2"
    out: dict[str, Any] = {
        "workload": f"W2 as a datarax dataset: {records} records x {RECORD_BYTES} B in {shards} "
                    f"shards, shuffled epoch, batch {batch}; S3 = moto server + {latency * 1000:.0f} ms "
                    "per request (proxy)",
        "machine": {"cpus": os.cpu_count(),
                    "load_average_at_start": [round(x, 2) for x in os.getloadavg()]},
    }
    with local_bucket(BUCKET, uploads, latency=latency) as urls:
        endpoint = urls["h0"]
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
                first, secs = _epoch(src, records, batch, "local window", 1)
            out["local_window"] = {"records_per_s": _rate(records, secs),
                                   "first_batch_s": round(first, 4)}
            shard_bytes = max(p.stat().st_size for p in folder.iterdir())
            small = ShardCache(scratch / "small", max_bytes=5 * shard_bytes + (1 << 20))
            try:
                t0 = time.perf_counter()
                with _source(url, seed, 2, cache=small) as src:
                    opened = time.perf_counter() - t0
                    first, secs = _epoch(src, records, batch, "remote window 0")
                    out["remote_window_cold"] = {"records_per_s": _rate(records, secs),
                                                 "first_batch_s": round(first, 4),
                                                 "open_s": round(opened, 4),
                                                 "first_batch_from_open_s": round(opened + first, 4),
                                                 "cache_bytes": small.max_bytes}
                    first, secs = _epoch(src, records, batch, "remote window 1", 1)
                    out["remote_window"] = {"records_per_s": _rate(records, secs),
                                            "first_batch_s": round(first, 4),
                                            "cache_bytes": small.max_bytes}
            except Exception as err:  # reported beside the other results, not hidden
                out["remote_window"] = {"error": f"{type(err).__name__}: {err}"[:400]}
                out.setdefault("remote_window_cold", out["remote_window"])

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

            if mds is None:
                out["mosaicml_streaming"] = streaming_note
            else:
                peer = run_streaming(f"s3://{BUCKET}/w2-mds", endpoint, records, batch,
                                     streaming_workers, seed)
                if "error" in peer:
                    out["mosaicml_streaming"] = peer["error"]
                else:
                    out.update(peer)
            out["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    local = out["local"]["records_per_s"]
    out["ratios"] = {
        "remote_steady/local": round(out["remote_steady"]["records_per_s"] / local, 3),
        "remote_cold/local": round(out["remote_cold"]["records_per_s"] / local, 3),
        "remote_window/local_window": round(out["remote_window"]["records_per_s"]
                                            / out["local_window"]["records_per_s"], 3)
        if "records_per_s" in out["remote_window"] else None,
        "remote_window_cold/local_window": round(out["remote_window_cold"]["records_per_s"]
                                                 / out["local_window"]["records_per_s"], 3)
        if "records_per_s" in out["remote_window_cold"] else None,
        "copy_then_read/local": round(out["copy_then_read"]["records_per_s"] / local, 3),
        "remote_cold/copy_then_read": round(out["remote_cold"]["records_per_s"]
                                            / out["copy_then_read"]["records_per_s"], 3),
    }
    if "streaming_steady" in out:
        out["ratios"].update({
            "streaming_steady/local": round(out["streaming_steady"]["records_per_s"] / local, 3),
            "streaming_cold/local": round(out["streaming_cold"]["records_per_s"] / local, 3),
            "remote_steady/streaming_steady": round(out["remote_steady"]["records_per_s"]
                                                    / out["streaming_steady"]["records_per_s"], 3),
            "remote_cold/streaming_cold": round(out["remote_cold"]["records_per_s"]
                                                / out["streaming_cold"]["records_per_s"], 3),
        })
    return out


_ROWS = (("local", "local disk", "local"),
         ("remote_steady", "datarax `s3://`, cache warm (the next epoch)", "local"),
         ("remote_cold", "datarax `s3://`, empty cache", "local"),
         ("copy_then_read", "copy everything, then read", "local"),
         ("streaming_steady", "MosaicML Streaming, shards local (the next epoch)", "local"),
         ("streaming_cold", "MosaicML Streaming, empty local folder", "local"),
         ("local_window", "local disk, `shuffle_window=2`", "local_window"),
         ("remote_window_cold", "datarax `s3://`, `shuffle_window=2`, empty cache "
          "(cache of 5 of the 8 files)", "local_window"),
         ("remote_window", "datarax `s3://`, `shuffle_window=2`, the next epoch "
          "(cache of 5 of the 8 files: fetched again)", "local_window"))


def table(result: dict[str, Any]) -> str:
    """The results as a markdown table: records/s, the ratio to local disk in the same
    shuffle (global, or the window rows against the local window shuffle), first batch."""
    lines = ["| contender | records/s | vs local disk, same shuffle | first batch |",
             "|---|---|---|---|"]
    for key, label, reference in _ROWS:
        row, ref = result.get(key), result.get(reference)
        if not isinstance(row, dict) or "records_per_s" not in row:
            if isinstance(row, dict) and "error" in row:
                lines.append(f"| {label} | {row['error'][:200].replace('|', '/')} | | |")
            continue
        first = f"{row['first_batch_s']:.2f} s" if "first_batch_s" in row else ""
        if "open_s" in row:
            first += f" (+{row['open_s']:.2f} s to open)"
        ratio = (f"{row['records_per_s'] / ref['records_per_s']:.2f}"
                 if isinstance(ref, dict) and ref.get("records_per_s") else "")
        lines.append(f"| {label} | {row['records_per_s']:,.0f} | {ratio} | {first} |")
    if isinstance(result.get("mosaicml_streaming"), str):
        note = " ".join(result["mosaicml_streaming"].split()).replace("|", "/")[:300]
        lines.append(f"| MosaicML Streaming | {note} | | |")
    return "\n".join(lines)


def markdown(result: dict[str, Any]) -> str:
    """The workload, the machine's load and the table, for ``--md``."""
    machine = result.get("machine", {})
    load = (f"{machine.get('cpus')} CPUs; load average (1, 5, 15 min) "
            f"{machine.get('load_average_at_start')} at the start, "
            f"{machine.get('load_average_at_end')} at the end.")
    return f"{result['workload']}\n\n{load}\n\n{table(result)}\n"


def main() -> None:
    options = parser(__doc__, **OPTIONS)
    options.add_argument("--streaming-workers", type=int, default=2,
                         help="DataLoader workers of the MosaicML Streaming peer")
    options.add_argument("--json", type=pathlib.Path)
    options.add_argument("--md", type=pathlib.Path, help="also write the table here")
    args = options.parse_args()
    result = run(args.records, args.shards, args.batch, args.latency,
                 streaming_workers=args.streaming_workers)
    emit(result, args.json)
    print(table(result))
    if args.md:
        args.md.write_text(markdown(result))


if __name__ == "__main__":
    main()
