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

import argparse
import json
import logging
import os
import pathlib
import shutil
import time
from collections.abc import Callable
from typing import Any

from benchmarks.bench_array_record import RECORD_BYTES, RECORD_SHAPE
from benchmarks.bench_convert import (
    SHARDS,
    floor_write_files,
    floor_write_npy,
    make_png_folder,
    make_w2_npy,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / "data" / "bench_convert_beam"
MULTI = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
CONTENDERS = ("floor", "local_w1", "beam_in_process", "beam_2_processes")


def _size(src: pathlib.Path) -> int:
    return sum(p.stat().st_size for p in src.rglob("*") if p.is_file())


def _shards(folder: pathlib.Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.array_record"))}


def time_conversion(src: pathlib.Path, out: pathlib.Path, records: int, shards: int,
                    floor: Callable[[pathlib.Path, pathlib.Path], None]) -> dict[str, Any]:
    """Each contender once, in :data:`CONTENDERS` order, into ``out/<name>``."""
    from datarax.dataset import convert

    size = _size(src)
    options = {"beam_in_process": ["--runner=DirectRunner"], "beam_2_processes": MULTI}
    result: dict[str, Any] = {}
    for name in CONTENDERS:
        dst = out / name
        shutil.rmtree(dst, ignore_errors=True)
        start = time.perf_counter()
        if name == "floor":
            floor(src, dst)
        elif name == "local_w1":
            info, _ = convert(str(src), dst, shards=shards)
            assert info.num_records == records, (name, info.num_records)
        else:
            info, _ = convert(str(src), dst, shards=shards, runner="beam",
                              beam_options=options[name])
            assert info.num_records == records, (name, info.num_records)
        seconds = time.perf_counter() - start
        result[name] = {"records_per_s": round(records / seconds),
                        "MB_per_s": round(size / seconds / 1e6, 1), "seconds": round(seconds, 2)}
    floor_rate = result["floor"]["records_per_s"]
    for name in CONTENDERS[1:]:
        result[f"{name}_vs_floor"] = round(result[name]["records_per_s"] / floor_rate, 3)
    result["beam_vs_local_w1"] = round(
        result["beam_in_process"]["records_per_s"] / result["local_w1"]["records_per_s"], 3)
    local = _shards(out / "local_w1")
    result["beam_byte_identical_to_local"] = all(
        _shards(out / name) == local for name in ("beam_in_process", "beam_2_processes"))
    return result


def run(records: int = 100_000, images: int = 2_000,
        data_dir: pathlib.Path = DATA_DIR) -> dict[str, Any]:
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    w2 = make_w2_npy(records, data_dir)
    png = make_png_folder(images, data_dir)
    out = data_dir / "out"
    return {
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "convert_w2": {"workload": f"{records} x {RECORD_BYTES} B uint8{RECORD_SHAPE} from .npy "
                                   f"into {SHARDS} shards",
                       **time_conversion(w2, out / "w2", records, SHARDS, floor_write_npy)},
        "convert_png": {"workload": f"{images} PNG files 64x64 RGB, 10 class folders, 2 shards",
                        **time_conversion(png, out / "png", images, 2,
                                          lambda s, d: floor_write_files(s, d, 2))},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--images", type=int, default=2_000)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    result = run(args.records, args.images)
    print(json.dumps(result, indent=2))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
