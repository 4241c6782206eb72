"""How much block windows download again within an epoch, by cache size.

8 ArrayRecord files of ~4 MB (1,300 records of 3 KB each, ``group_size:1``) in
``memory://``, read with ``shuffle_window=4, shuffle_block="256K"`` (16 blocks a file,
128 in all), one host, a cache of ``n`` windows (``n`` x 4 x 256 KiB, plus
1 %), batch 16 and 256, epochs 0 and 1; for each, the bytes downloaded in the epoch over
the files' bytes (1.00: each block once). Every epoch is checked to serve each record
once. The table in ``docs/object-storage.md`` ("Block windows") comes from it.

Run: ``python -m benchmarks.block_window_refetch [--windows 1,2,3,4,6] [--batches 16,256]
[--json PATH]`` (default JSON: ``benchmarks/results/block_window_refetch.json``).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import tempfile
from typing import Any

import numpy as np

RESULTS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "results"
FILES, PER_FILE, BLOCK, WINDOW = 8, 1300, 256 << 10, 4


def write_files(bucket: str) -> int:
    """The files, in ``memory://{bucket}``; returns their bytes."""
    import fsspec
    from array_record.python.array_record_module import ArrayRecordWriter

    rng = random.Random(0)
    memory, total = fsspec.filesystem("memory"), 0
    with tempfile.TemporaryDirectory() as scratch:
        for f in range(FILES):
            path = pathlib.Path(scratch) / f"part-{f}.array_record"
            writer = ArrayRecordWriter(str(path), "group_size:1")
            for i in range(f * PER_FILE, (f + 1) * PER_FILE):
                writer.write(np.int32(i).tobytes() + rng.randbytes(3072))
            writer.close()
            memory.pipe(f"/{bucket}/{path.name}", path.read_bytes())
            total += path.stat().st_size
    return total


def epochs(bucket: str, total: int, windows: float, batch: int,
           threads: int | None = None) -> list[float]:
    """Bytes downloaded in epochs 0 and 1 over the files' bytes, a cache of ``windows``
    (``threads``: the source's reader threads, its default when None)."""
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule
    from datarax.storage import ShardCache

    scratch = tempfile.TemporaryDirectory()
    cache = ShardCache(scratch.name, max_bytes=int(windows * WINDOW * BLOCK * 1.01))
    config = ArrayRecordSourceConfig(shuffle_files=True, seed=0, shuffle_window=WINDOW,
                                     shuffle_block=str(BLOCK))
    out = []
    more = {} if threads is None else {"num_threads": threads}
    with ArrayRecordSourceModule(config, f"memory://{bucket}/*.array_record", cache=cache,
                                 decode=lambda r: {"i": np.frombuffer(r[:4], np.int32)[0]},
                                 **more) as src:
        before = src.stats()["storage"]["fetched_bytes"]
        for e in range(2):
            src.seek(e)
            seen: list[int] = []
            while (b := src.get_batch(batch)) is not None:
                seen.extend(np.asarray(b["i"]).tolist())
            if sorted(seen) != list(range(FILES * PER_FILE)):
                raise AssertionError(f"epoch {e}: not every record once")
            now = src.stats()["storage"]["fetched_bytes"]
            out.append(round((now - before) / total, 3))
            before = now
    scratch.cleanup()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", default="1,2,3,4,6")
    parser.add_argument("--batches", default="16,256")
    parser.add_argument("--threads", type=int, help="reader threads (default: the source's)")
    parser.add_argument("--json", type=pathlib.Path, default=RESULTS / "block_window_refetch.json")
    args = parser.parse_args()
    total = write_files("block-window-refetch")
    result: dict[str, Any] = {"workload": f"{FILES} files x {PER_FILE} records of 3 KB "
                              f"({total} bytes), blocks of {BLOCK} B, windows of {WINDOW} "
                              "blocks, one host, memory://", "reader_threads": args.threads,
                              "downloaded_vs_files": {}}
    for batch in (int(b) for b in args.batches.split(",")):
        for windows in (float(w) for w in args.windows.split(",")):
            got = epochs("block-window-refetch", total, windows, batch, args.threads)
            result["downloaded_vs_files"][f"batch {batch}, cache {windows:g} windows"] = got
            print(f"batch {batch}, cache {windows:g} windows: epochs 0, 1: {got}", flush=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
