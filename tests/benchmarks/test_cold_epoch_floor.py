"""The cold epoch's floor reads a first batch by range from the files' tails (no server)."""

from __future__ import annotations

import asyncio
import os

from benchmarks.cold_epoch_floor import first_batch_picks, read_first_batch
from int_record_files import write_records


def record(f: int, i: int) -> bytes:
    return bytes([f]) + i.to_bytes(4, "little") * (1 + i % 50)  # 5 B to 201 B


def test_first_batch_read_by_range_is_the_records_picked(tmp_path):
    names, counts = [], [300, 1, 130]
    options = ["group_size:7,zstd", "group_size:1,uncompressed", "group_size:64,uncompressed"]
    for f, (n, opt) in enumerate(zip(counts, options, strict=True)):
        names.append(write_records(tmp_path / f"{f}.array_record",
                                   (record(f, i) for i in range(n)), opt))
    asked = []

    async def cat(path, start, end):
        asked.append((names.index(path), start, end))
        with open(path, "rb") as fh:
            fh.seek(start)
            return fh.read(end - start)

    picks = first_batch_picks(counts, 40, seed=3)
    assert picks == first_batch_picks(counts, 40, seed=3)  # a pure function of the seed
    assert len(set(picks)) == 40 and all(0 <= k < counts[f] for f, k in picks)
    picks += [(0, 0), (0, 299), (1, 0), (2, 129), (0, 0)]  # edges and a repeat
    sizes = [os.path.getsize(n) for n in names]
    got = asyncio.run(read_first_batch(cat, names, sizes, picks))
    assert got == [record(f, k) for f, k in picks]
    # each file opened by one request from its end, the rest inside its data
    tails = [(f, s, e) for f, s, e in asked if e == sizes[f]]
    assert sorted(f for f, _, _ in tails) == [0, 1, 2]
    assert all(e <= sizes[f] - (64 << 10) for f, s, e in asked if (f, s, e) not in tails)
