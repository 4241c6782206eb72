"""MosaicML Streaming as the peer of ``benchmarks/w2_remote.py``, run in its own venv.

``mosaicml-streaming`` needs PyTorch and pins ``numpy<2.2``, so it cannot live in the
project's venv; ``make bench-streaming-env`` builds ``.venv-streaming`` for it, and
``w2_remote`` runs this script with that venv's python as a subprocess. The script
imports nothing from datarax.

Two commands:

* ``write RECORDS_NPY OUT --shards N`` — the W2 records (a ``uint8 (n, 32, 32, 3)``
  ``.npy`` file that ``w2_remote`` exports from the same generator as its datarax
  dataset) in Streaming's own MDS format (``MDSWriter``, column ``image`` as a
  fixed-shape ``ndarray``), the shard size chosen to give ``N`` shards like the datarax
  dataset.
* ``read REMOTE --records N --batch B --workers W --json PATH`` — a shuffled
  ``StreamingDataset(remote=REMOTE, local=<tmp>, shuffle=True, batch_size=B)`` through a
  ``torch.utils.data.DataLoader``: the first epoch from an empty local folder (cold),
  then the second (shards already local: steady). Every epoch checks that each record
  came exactly once (record ``i`` starts with ``uint32(i)``). The endpoint comes from
  ``S3_ENDPOINT_URL`` (Streaming's variable), credentials from ``AWS_ACCESS_KEY_ID``...

Run (normally through ``w2_remote``):
``.venv-streaming/bin/python benchmarks/streaming_peer.py read s3://bucket/w2-mds
--records 100000``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import shutil
import sys
import tempfile
import time
import types
from typing import Any

import numpy as np


def _import_streaming() -> Any:
    """``import streaming`` beside the CPU torch.

    ``streaming`` imports torchvision (for its vision datasets, not used here), and the
    torchvision wheel on the index is a CUDA build: its Python parts work with the CPU
    torch, but ``torchvision._meta_registrations`` registers shapes for compiled ops the
    CUDA-linked extension could not define (``operator torchvision::nms does not
    exist``). An empty module in that name's place skips them, as in
    ``benchmarks/w7_contenders.py``; it is set only if torchvision is not imported yet.
    """
    name = "torchvision._meta_registrations"
    if "torchvision" not in sys.modules and name not in sys.modules:
        sys.modules[name] = types.ModuleType(name)
    import streaming

    return streaming


def record_ids(images: Any) -> np.ndarray:
    """The index each record starts with (its first four bytes as ``uint32``)."""
    flat = np.ascontiguousarray(np.asarray(images).reshape(len(images), -1)[:, :4])
    return flat.view(np.uint32).reshape(-1)


def write(records_npy: pathlib.Path, out: pathlib.Path, shards: int) -> dict[str, Any]:
    """Write the records as MDS shards under ``out`` (replaced); returns what was written."""
    streaming = _import_streaming()
    data = np.load(records_npy, mmap_mode="r")
    n, shape = len(data), data.shape[1:]
    # An MDS shard holds a small header, a 4-byte offset per sample and the samples;
    # the limit leaves room for that so that the data splits into ``shards`` files.
    size_limit = math.ceil(n / shards) * (data[0].nbytes + 4) + 4096
    shutil.rmtree(out, ignore_errors=True)
    column = f"ndarray:{data.dtype.name}:{','.join(str(d) for d in shape)}"
    with streaming.MDSWriter(out=str(out), columns={"image": column},
                             size_limit=size_limit) as writer:
        for start in range(0, n, 4096):
            for image in np.asarray(data[start:start + 4096]):
                writer.write({"image": image})
    written = sorted(p.name for p in out.iterdir() if p.name != "index.json")
    return {"records": n, "column": column, "size_limit": size_limit, "shards": len(written)}


def _epoch(loader: Any, records: int, name: str) -> tuple[float, float]:
    """(seconds to the first batch, seconds for the whole pass) of one pass of ``loader``."""
    ids: list[np.ndarray] = []
    start = time.perf_counter()
    first = None
    for batch in loader:
        if first is None:
            first = time.perf_counter() - start
        ids.append(record_ids(batch["image"].numpy()))
    elapsed = time.perf_counter() - start
    got = np.concatenate(ids) if ids else np.zeros(0, np.uint32)
    distinct = len(np.unique(got))
    if len(got) != records or distinct != records:
        raise AssertionError(f"{name}: served {len(got)} records, {distinct} distinct, "
                             f"expected {records}")
    return float(first or 0.0), elapsed


def _fetch_index(remote: str, local: str) -> None:
    """Download ``REMOTE/index.json`` into ``local`` with a client of our own, closed after.

    Left to itself, ``StreamingDataset`` downloads ``index.json`` in this process with
    an S3 client that keeps its connection open; the DataLoader's forked workers then
    inherit that client and share the socket, reading each other's responses (seen
    here as ``412`` ETag mismatches and a shard written with another request's bytes).
    With the index already in ``local`` it downloads nothing here, and each worker
    opens its own connections.
    """
    import boto3

    bucket, _, prefix = remote.removeprefix("s3://").partition("/")
    client = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT_URL"])
    try:
        client.download_file(bucket, f"{prefix.rstrip('/')}/index.json",
                             os.path.join(local, "index.json"))
    finally:
        client.close()


def read(remote: str, records: int, batch: int, workers: int, seed: int) -> dict[str, Any]:
    """Two shuffled epochs of ``remote`` through a DataLoader; rates and first-batch times."""
    if not os.environ.get("S3_ENDPOINT_URL"):
        raise SystemExit("streaming_peer read: set S3_ENDPOINT_URL to the S3 server's URL "
                         "(Streaming's boto3 client reads its endpoint from it)")
    streaming = _import_streaming()
    from torch.utils.data import DataLoader

    local = tempfile.mkdtemp(prefix="w2-streaming-")
    try:
        streaming.base.util.clean_stale_shared_memory()
        t0 = time.perf_counter()
        _fetch_index(remote, local)
        dataset = streaming.StreamingDataset(remote=remote, local=local, shuffle=True,
                                             shuffle_seed=seed, batch_size=batch)
        loader = DataLoader(dataset, batch_size=batch, num_workers=workers,
                            persistent_workers=workers > 0)
        opened = time.perf_counter() - t0
        first, secs = _epoch(loader, records, "streaming cold")
        cold = {"records_per_s": round(records / secs, 1), "first_batch_s": round(first, 4),
                "open_s": round(opened, 4), "first_batch_from_open_s": round(opened + first, 4)}
        first, secs = _epoch(loader, records, "streaming steady")
        steady = {"records_per_s": round(records / secs, 1), "first_batch_s": round(first, 4)}
        del loader, dataset
    finally:
        shutil.rmtree(local, ignore_errors=True)
    import torch

    return {"streaming_cold": cold, "streaming_steady": steady,
            "streaming_setup": {"num_workers": workers, "batch_size": batch,
                                "persistent_workers": workers > 0,
                                "versions": {"mosaicml-streaming": streaming.__version__,
                                             "torch": torch.__version__,
                                             "numpy": np.__version__}}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="the records as MDS shards")
    w.add_argument("records_npy", type=pathlib.Path)
    w.add_argument("out", type=pathlib.Path)
    w.add_argument("--shards", type=int, default=8)
    r = sub.add_parser("read", help="two shuffled epochs from the S3 server")
    r.add_argument("remote")
    r.add_argument("--records", type=int, required=True)
    r.add_argument("--batch", type=int, default=256)
    r.add_argument("--workers", type=int, default=2)
    r.add_argument("--seed", type=int, default=0)
    for p in (w, r):
        p.add_argument("--json", type=pathlib.Path, help="also write the result here")
    args = parser.parse_args()
    if args.command == "write":
        result = write(args.records_npy, args.out, args.shards)
    else:
        result = read(args.remote, args.records, args.batch, args.workers, args.seed)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
