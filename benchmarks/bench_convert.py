"""Data in: converting to a self-describing ArrayRecord dataset, and reading it back.

Conversion (records/s and MB/s of input, one run each, same process):

* W2-like records — ``--records`` (default 100,000) ``uint8 (32, 32, 3)`` arrays (3,072
  bytes) from one ``.npy`` file into 8 shards:
  ``floor``: array_record's ``ArrayRecordWriter`` in a plain loop writing each array's
  bytes (no features, checks, checksums or metadata); ``datarax_w1`` / ``datarax_w2``:
  ``datarax.dataset.convert`` with 1 and 2 worker processes (their start is timed).
* PNG images — ``--images`` (default 2,000) 64 x 64 RGB PNG files in an image folder
  (10 classes), into 2 shards: ``floor`` writes each file's bytes; ``datarax_w1`` /
  ``datarax_w2`` convert the folder (each image is decoded once to check it).

Reading W2 (one shuffled epoch, batch 256, ``--repeats`` rounds, each round running the
floor and the datarax contenders in turn; records/s of the best round, each round's ratio
to that round's floor and their median, CPU seconds per round; Grain once) over the *same* files,
the ones datarax wrote (a record of a fixed-shape field is exactly its bytes):
``floor`` (array_record's reader, see ``bench_array_record``), ``datarax_self_described``
(``Pipeline`` over ``ArrayRecordSourceModule(config, paths=<folder>)``: no user code),
``datarax_user_decode_batch`` (the same files with a hand-written ``decode_batch``), and Grain (``MapDataset.source(ArrayRecordDataSource).shuffle.map(decode).batch``).

Run: ``python -m benchmarks.bench_convert [--records N] [--images N] [--json PATH]``.
Data goes under ``data/bench_convert/`` (gitignored), rebuilt every run. ``--read-only
FOLDER`` runs the reading rows alone over an existing dataset of the W2 records (such as
``data/bench_arrayrecord/n100000_f8/dataset``, which ``bench_array_record`` writes).
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np

from benchmarks.bench_array_record import (
    run_datarax_pipeline,
    run_floor,
    run_grain_threads,
    run_self_described,
    warm,
)
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

DATA_DIR = ROOT / "data" / "bench_convert"


def time_conversion(src: pathlib.Path, out: pathlib.Path, records: int, shards: int,
                    floor: Contender) -> dict[str, Any]:
    """The floor, then ``convert`` with 1 and 2 worker processes; whether both wrote the
    same bytes."""
    from datarax.dataset import convert

    def local(workers: int) -> Contender:
        return lambda s, d: convert(str(s), d, shards=shards, workers=workers)[0]

    rates = time_contenders(src, out, records,
                            {"floor": floor, "datarax_w1": local(1), "datarax_w2": local(2)})
    rates["w1_w2_byte_identical"] = (
        folder_bytes(out / "datarax_w1") == folder_bytes(out / "datarax_w2"))
    return rates


def time_reading(folder: pathlib.Path, records: int, batch: int, repeats: int) -> dict[str, Any]:
    """``repeats`` rounds of floor / self-described / hand-written decode_batch, in turn
    (so each round's ratio compares runs made at the same time); Grain once (it is an
    order of magnitude slower, a best-of would not change the picture)."""
    from datarax.dataset import read_metadata

    info = read_metadata(folder)
    paths = [str(folder / s.file) for s in info.shards]
    warm(paths)
    contenders = {
        "floor": lambda: run_floor(paths, records, batch, 0),
        "datarax_self_described": lambda: run_self_described(str(folder), records, batch, 0),
        "datarax_user_decode_batch": lambda: run_datarax_pipeline(paths, records, batch, 0, by_chunk=True),
    }
    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    cpu: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, run in contenders.items():
            wall, used = run()
            seconds[name].append(wall)
            cpu[name].append(used)
    for threads in (4, 16):
        seconds[f"grain_threads{threads}"] = [
            run_grain_threads(paths, records, batch, 0, num_threads=threads)[0]]
    rate = {k: records / min(v) for k, v in seconds.items()}
    grain = max((k for k in rate if k.startswith("grain")), key=rate.__getitem__)

    def per_round(name: str) -> list[float]:
        return [round(f / s, 3) for f, s in zip(seconds["floor"], seconds[name])]

    return {
        "records_per_s": {k: round(v) for k, v in rate.items()},
        "seconds": {k: [round(x, 3) for x in v] for k, v in seconds.items()},
        # process CPU seconds (user + sys, all threads) of each round's epoch
        "cpu_seconds": {k: [round(x, 3) for x in v] for k, v in cpu.items()},
        "self_described_vs_floor": round(rate["datarax_self_described"] / rate["floor"], 3),
        "user_decode_batch_vs_floor": round(rate["datarax_user_decode_batch"] / rate["floor"], 3),
        # each round's floor seconds / the contender's, in round order, and their median
        "self_described_vs_floor_per_round": per_round("datarax_self_described"),
        "user_decode_batch_vs_floor_per_round": per_round("datarax_user_decode_batch"),
        "self_described_vs_floor_median_round": round(
            float(np.median(per_round("datarax_self_described"))), 3),
        "user_decode_batch_vs_floor_median_round": round(
            float(np.median(per_round("datarax_user_decode_batch"))), 3),
        "self_described_vs_grain": round(rate["datarax_self_described"] / rate[grain], 3),
        "grain_best": grain,
    }


def run(records: int = 100_000, images: int = 2_000, batch: int = 256, repeats: int = 5,
        data_dir: pathlib.Path = DATA_DIR) -> dict[str, Any]:
    fresh_dir(data_dir)
    w2 = make_w2_npy(records, data_dir)
    out = data_dir / "out"
    result: dict[str, Any] = {
        **host(),
        "convert_w2": {"workload": w2_workload(records),
                       **time_conversion(w2, out / "w2", records, SHARDS, floor_write_npy)},
        "read_w2": {"workload": f"one shuffled epoch of the {records} W2 records datarax wrote, "
                                f"batch {batch}, best of {repeats} rounds (Grain: one run)",
                    **time_reading(out / "w2" / "datarax_w1", records, batch, repeats)},
    }
    if images:  # --images 0 skips the PNG conversion
        png = make_png_folder(images, data_dir)
        result["convert_png"] = {
            "workload": png_workload(images),
            **time_conversion(png, out / "png", images, PNG_SHARDS, floor_write_png)}
    result["load_average_1m_end"] = host()["load_average_1m"]
    return result


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--read-only", default=None, metavar="FOLDER",
                        help="only the reading rows, over this dataset folder of W2 records "
                             "(e.g. the one bench_array_record writes)")
    args = parser.parse_args()
    if args.read_only:
        folder = pathlib.Path(args.read_only)
        result = {**host(), "read_w2": {
            "workload": f"one shuffled epoch of the {args.records} W2 records in {folder}, "
                        f"batch 256, {args.repeats} rounds (records/s: the best; Grain: one run)",
            **time_reading(folder, args.records, 256, args.repeats)}}
        result["load_average_1m_end"] = host()["load_average_1m"]
        report(result, args.json)
        return
    report(run(args.records, args.images, repeats=args.repeats), args.json)


if __name__ == "__main__":
    main()
