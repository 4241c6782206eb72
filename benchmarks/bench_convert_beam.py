"""Data in on Apache Beam: conversion throughput on Beam's DirectRunner, side by side.

The inputs of ``bench_convert`` (W2-like records: ``--records`` ``uint8 (32, 32, 3)``
arrays from one ``.npy`` into 8 shards; ``--images`` 64 x 64 PNG files in 10 class
folders into 2 shards), converted in one run by:

* ``floor``: array_record's ``ArrayRecordWriter`` in a plain loop (no features, checks,
  checksums or metadata);
* ``local_w1``: ``datarax.dataset.convert`` in this process;
* ``beam_in_process``: ``convert(..., runner="beam")`` on the DirectRunner engine in
  this process;
* ``beam_2_processes``: the same with ``--direct_running_mode=multi_processing
  --direct_num_workers=2`` (worker start-up included).

Each Beam output is checked byte-identical to ``local_w1``'s. Reported: records/s, MB/s
of input, seconds, and each contender's records/s over the floor's.

Run: ``python -m benchmarks.bench_convert_beam [--records N] [--images N] [--json PATH]``.
Data goes under ``data/bench_convert_beam/`` (gitignored), rebuilt every run.
"""

from __future__ import annotations

import logging
import pathlib
from typing import Any

from benchmarks.convert_inputs import (
    PNG_SHARDS,
    ROOT,
    SHARDS,
    Contender,
    arguments,
    floor_write_npy,
    floor_write_png,
    folder_bytes,
    fresh_dir,
    host,
    make_png_folder,
    make_w2_npy,
    png_workload,
    report,
    time_contenders,
    w2_workload,
)

DATA_DIR = ROOT / "data" / "bench_convert_beam"
MULTI = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]


def time_conversion(src: pathlib.Path, out: pathlib.Path, records: int, shards: int,
                    floor: Contender) -> dict[str, Any]:
    """Each contender once, in the order of the module docstring, into ``out/<name>``; whether
    each Beam output holds the shard bytes ``local_w1`` wrote."""
    from datarax.dataset import convert

    def beam(options: list[str]) -> Contender:
        return lambda s, d: convert(str(s), d, shards=shards, runner="beam",
                                    beam_options=options)[0]

    result = time_contenders(src, out, records, {
        "floor": floor,
        "local_w1": lambda s, d: convert(str(s), d, shards=shards)[0],
        "beam_in_process": beam(["--runner=DirectRunner"]),
        "beam_2_processes": beam(MULTI),
    })
    result["beam_vs_local_w1"] = round(
        result["beam_in_process"]["records_per_s"] / result["local_w1"]["records_per_s"], 3)
    local = folder_bytes(out / "local_w1", "*.array_record")
    result["beam_byte_identical_to_local"] = all(
        folder_bytes(out / name, "*.array_record") == local
        for name in ("beam_in_process", "beam_2_processes"))
    return result


def run(records: int = 100_000, images: int = 2_000,
        data_dir: pathlib.Path = DATA_DIR) -> dict[str, Any]:
    fresh_dir(data_dir)
    w2 = make_w2_npy(records, data_dir)
    png = make_png_folder(images, data_dir)
    out = data_dir / "out"
    return {
        **host(),
        "convert_w2": {"workload": w2_workload(records),
                       **time_conversion(w2, out / "w2", records, SHARDS, floor_write_npy)},
        "convert_png": {"workload": png_workload(images),
                        **time_conversion(png, out / "png", images, PNG_SHARDS, floor_write_png)},
    }


def main() -> None:
    args = arguments(__doc__).parse_args()
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    report(run(args.records, args.images), args.json)


if __name__ == "__main__":
    main()
