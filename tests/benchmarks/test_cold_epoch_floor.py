"""The cold epoch's floor reads a first batch by range from the files' tails (no server)."""

from __future__ import annotations

import os

from benchmarks.cold_epoch_floor import first_batch_picks, open_footers, read_records
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

    def cat_ranges(paths, starts, ends):
        asked.append(len(paths))
        out = []
        for path, start, end in zip(paths, starts, ends, strict=True):
            with open(path, "rb") as fh:
                fh.seek(start)
                out.append(fh.read(end - start))
        return out

    footers = open_footers(cat_ranges, names, [os.path.getsize(n) for n in names])
    assert [f.num_records for f in footers] == counts
    picks = first_batch_picks(counts, 40, seed=3)
    assert picks == first_batch_picks(counts, 40, seed=3)  # a pure function of the seed
    assert len(set(picks)) == 40 and all(0 <= k < counts[f] for f, k in picks)
    picks += [(0, 0), (0, 299), (1, 0), (2, 129), (0, 0)]  # edges and a repeat
    assert read_records(cat_ranges, names, footers, picks) == [record(f, k) for f, k in picks]
    assert asked == [3, asked[1]]  # the tails at once, then every chunk range at once
