"""The first batch's floor plans the requests datarax's head start makes (no server)."""

from __future__ import annotations

import os

from benchmarks.first_batch_floor import first_batch_plan
from int_record_files import write_records

RECORD = 1000


def record(i: int) -> bytes:
    return i.to_bytes(4, "little") * (RECORD // 4)


def test_plan_is_the_tails_then_one_request_a_run_of_chunks(tmp_path):
    for name in ("a", "b"):
        write_records(tmp_path / f"{name}.array_record", (record(i) for i in range(200)),
                      "group_size:1,uncompressed")
    picks = [("a.array_record", 0), ("a.array_record", 1), ("a.array_record", 50),
             ("a.array_record", 199), ("b.array_record", 7)]
    plan = first_batch_plan(tmp_path, picks)

    size = os.path.getsize(tmp_path / "a.array_record")
    # one request a file opens it: from 128 KiB before the end (postscript and footer)
    assert plan["tails"] == [("a.array_record", size - (128 << 10), size),
                             ("b.array_record", size - (128 << 10), size)]
    # records 0 and 1 are neighbouring chunks: one request; each record's bytes in its range
    assert [n for n, _, _ in plan["ranges"]] == ["a.array_record"] * 3 + ["b.array_record"]
    data = {n: (tmp_path / n).read_bytes() for n in ("a.array_record", "b.array_record")}
    got = [data[n][start:end] for n, start, end in plan["ranges"]]
    assert record(0) in got[0] and record(1) in got[0]
    assert record(50) in got[1] and record(199) in got[2] and record(7) in got[3]
    # record 199 lies just before the footer, inside the bytes the open reads anyway
    assert plan["counts"] == {"files": 2, "records": 5, "chunks": 5, "ranges_in_tail": 1}
