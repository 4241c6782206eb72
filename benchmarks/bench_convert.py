"""Data in: converting to a self-describing ArrayRecord dataset, and reading it back.

Conversion (records/s and MB/s of input, one run each, same process):

* W2-like records — ``--records`` (default 100,000) ``uint8 (32, 32, 3)`` arrays (3,072
  bytes) from one ``.npy`` file into 8 shards:
  ``floor``: array_record's ``ArrayRecordWriter`` in a plain loop writing each array's
  bytes (no features, checks, checksums or metadata); ``datarax_w1`` / ``datarax_w2``:
  ``datarax.dataset.convert`` with 1 and 2 worker processes (their start is timed).

Conversion that scales (``--rounds`` rounds, each running ``floor``, ``datarax_w1`` and
``datarax_w2`` in turn, each in a fresh process; seconds of the write itself, the ratios of
each round and their range), into 2 shards:

* PNG images — ``--images`` (default 20,000) 64 x 64 RGB PNG files in an image folder
  (10 classes): ``floor`` writes each file's bytes; ``datarax_w1`` / ``datarax_w2``
  convert the folder (each image's header and structure checked, its bytes kept);
* Parquet — the same images as one Parquet file as Hugging Face ``datasets`` writes it
  (``Image`` and ``ClassLabel`` columns): ``floor`` writes each image's bytes;
* JSON Lines — ``--lines`` (default 200,000) rows ``{"text", "label", "score"}``:
  ``floor`` writes each line's bytes (not parsed).

Reported per input: ``w1_vs_floor`` (the floor's seconds over ``datarax_w1``'s, per round)
and ``w2_vs_w1`` (``datarax_w1``'s seconds over ``datarax_w2``'s, per round); the same
apart from the waiting on a shared machine, from CPU seconds: ``w1_vs_floor_cpu`` and
``w2_vs_w1_cpu_bound`` (one process's CPU seconds over the busier process of two — the
main one, which writes its share of the shards, or its worker, ``cpu_seconds_main``
giving the main one's part: what two processes give on two free cores); whether 1 and
2 processes wrote the same shard bytes, and what two processes can give on the machine at
the time: ``two_process_ceiling_per_round``, the rate of two processes of pure arithmetic at
once over one's (2.0 on two free cores; a shared machine gives less).

Reading W2 (one shuffled epoch, batch 256, ``--repeats`` rounds, each round running the
floor and the datarax contenders in turn; records/s of the best round, each round's ratio
to that round's floor and their median, CPU seconds per round; Grain once) over the *same* files,
the ones datarax wrote (a record of a fixed-shape field is exactly its bytes):
``floor`` (array_record's reader, see ``bench_array_record``), ``datarax_self_described``
(``Pipeline`` over ``ArrayRecordSourceModule(config, paths=<folder>)``: no user code),
``datarax_user_decode_batch`` (the same files with a hand-written ``decode_batch``), and Grain (``MapDataset.source(ArrayRecordDataSource).shuffle.map(decode).batch``).

Run: ``python -m benchmarks.bench_convert [--records N] [--images N] [--lines N] [--rounds N]
[--json PATH]``; ``--one KIND CONTENDER SRC DST`` times one contender in this process.
Data goes under ``data/bench_convert/`` (gitignored), rebuilt every run. ``--read-only
FOLDER`` runs the reading rows alone over an existing dataset of the W2 records (such as
``data/bench_arrayrecord/n100000_f8/dataset``, which ``bench_array_record`` writes).
"""

from __future__ import annotations

import json
import pathlib
import resource
import shutil
import subprocess
import sys
import time
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
    floor_write_jsonl,
    floor_write_npy,
    floor_write_parquet,
    floor_write_png,
    folder_bytes,
    fresh_dir,
    host,
    jsonl_workload,
    make_jsonl,
    make_parquet,
    make_png_folder,
    make_w2_npy,
    parquet_workload,
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


FLOORS = {"png": floor_write_png, "parquet": floor_write_parquet, "jsonl": floor_write_jsonl}
CONTENDERS = ("floor", "datarax_w1", "datarax_w2")


def time_one(kind: str, contender: str, src: pathlib.Path, dst: pathlib.Path) -> dict[str, Any]:
    """One contender's write of ``src`` into ``dst``, in this process: its seconds, and
    CPU seconds of this (the main) process and of its worker processes, apart."""
    from datarax.dataset import convert

    def used(who: int) -> float:
        usage = resource.getrusage(who)
        return usage.ru_utime + usage.ru_stime

    shutil.rmtree(dst, ignore_errors=True)
    start = time.perf_counter()
    main, kids = used(resource.RUSAGE_SELF), used(resource.RUSAGE_CHILDREN)
    if contender == "floor":
        FLOORS[kind](src, dst)
        records = None
    else:
        workers = int(contender[-1])
        records = convert(str(src), dst, shards=PNG_SHARDS, workers=workers)[0].num_records
    main = used(resource.RUSAGE_SELF) - main
    kids = used(resource.RUSAGE_CHILDREN) - kids
    return {"seconds": time.perf_counter() - start, "cpu_seconds": main + kids,
            "cpu_seconds_main": main, "cpu_seconds_workers": kids, "records": records}


_BURN = "x = 0\nfor i in range(6_000_000):\n    x += i * i\n"


def parallel_ceiling() -> float:
    """What two processes give on this machine now: the rate of two processes of pure
    Python arithmetic at once over one's (2.0 on two free cores)."""
    def seconds(copies: int) -> float:
        start = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-c", _BURN]) for _ in range(copies)]
        for p in procs:
            p.wait()
        return time.perf_counter() - start

    one = seconds(1)
    return round(2 * one / seconds(2), 3)


def time_rounds(kind: str, src: pathlib.Path, out: pathlib.Path, records: int,
                rounds: int) -> dict[str, Any]:
    """``rounds`` rounds of floor / 1 process / 2 processes in turn, each in a fresh
    process (:func:`time_one`); per-round ratios and their range."""
    seconds: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    cpu: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    cpu_main: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    load, ceiling = [], []
    for _ in range(rounds):
        load.append(host()["load_average_1m"])
        ceiling.append(parallel_ceiling())
        for name in CONTENDERS:
            dst = out / name
            shutil.rmtree(dst, ignore_errors=True)
            done = subprocess.run(
                [sys.executable, "-m", "benchmarks.bench_convert", "--one", kind, name, str(src),
                 str(dst)], check=True, capture_output=True, text=True)
            one = json.loads(done.stdout.strip().splitlines()[-1])
            assert one["records"] in (None, records), (name, one["records"], records)
            seconds[name].append(one["seconds"])
            cpu[name].append(one["cpu_seconds"])
            cpu_main[name].append(one["cpu_seconds_main"])

    def ratios(top: str, bottom: str) -> dict[str, Any]:
        per = [round(a / b, 3) for a, b in zip(seconds[top], seconds[bottom])]
        return {"per_round": per, "min": min(per), "median": float(np.median(per)), "max": max(per)}

    return {
        "records_per_s_best": {k: round(records / min(v)) for k, v in seconds.items()},
        "seconds": {k: [round(x, 3) for x in v] for k, v in seconds.items()},
        "cpu_seconds": {k: [round(x, 3) for x in v] for k, v in cpu.items()},
        # the main process's part of cpu_seconds (the rest: its worker processes)
        "cpu_seconds_main": {k: [round(x, 3) for x in v] for k, v in cpu_main.items()},
        # CPU seconds of the floor over datarax's, per round: the ratio apart from the
        # waiting on a shared machine
        "w1_vs_floor_cpu": [round(f / d, 3) for f, d in zip(cpu["floor"], cpu["datarax_w1"])],
        # one process's CPU seconds over the busier of the two processes of datarax_w2 (the
        # main one or its worker): what two processes would give on two free cores
        "w2_vs_w1_cpu_bound": [
            round(one / max(main, both - main), 3) for one, main, both in
            zip(cpu["datarax_w1"], cpu_main["datarax_w2"], cpu["datarax_w2"])],
        "w1_vs_floor": ratios("floor", "datarax_w1"),
        "w2_vs_w1": ratios("datarax_w1", "datarax_w2"),
        "w1_w2_byte_identical": (folder_bytes(out / "datarax_w1", "*.array_record")
                                 == folder_bytes(out / "datarax_w2", "*.array_record")),
        "load_average_1m_per_round": load,
        # each round: two processes of pure arithmetic at once over one (2.0: two free cores)
        "two_process_ceiling_per_round": ceiling,
    }


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


def run_scaling(images: int, lines: int, rounds: int,
                data_dir: pathlib.Path = DATA_DIR) -> dict[str, Any]:
    """The conversion-that-scales rows: PNG folder, Parquet, JSON Lines (module docstring)."""
    fresh_dir(data_dir)
    out = data_dir / "out"
    result: dict[str, Any] = {**host()}
    inputs = {"png": (make_png_folder, images, png_workload),
              "parquet": (make_parquet, images, parquet_workload),
              "jsonl": (make_jsonl, lines, jsonl_workload)}
    for kind, (make, count, workload) in inputs.items():
        if count:
            src = make(count, data_dir)
            result[f"convert_{kind}"] = {"workload": workload(count),
                                         **time_rounds(kind, src, out / kind, count, rounds)}
    result["load_average_1m_end"] = host()["load_average_1m"]
    return result


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
    parser.set_defaults(images=20_000)
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scaling-only", action="store_true",
                        help="only the conversion-that-scales rows (PNG, Parquet, JSON Lines)")
    parser.add_argument("--one", nargs=4, metavar=("KIND", "CONTENDER", "SRC", "DST"))
    args = parser.parse_args()
    if args.one:
        kind, contender, src, dst = args.one
        print(json.dumps(time_one(kind, contender, pathlib.Path(src), pathlib.Path(dst))))
        return
    if args.scaling_only:
        report(run_scaling(args.images, args.lines, args.rounds), args.json)
        return
    if args.read_only:
        folder = pathlib.Path(args.read_only)
        result = {**host(), "read_w2": {
            "workload": f"one shuffled epoch of the {args.records} W2 records in {folder}, "
                        f"batch 256, {args.repeats} rounds (records/s: the best; Grain: one run)",
            **time_reading(folder, args.records, 256, args.repeats)}}
        result["load_average_1m_end"] = host()["load_average_1m"]
        report(result, args.json)
        return
    result = run(args.records, 0, repeats=args.repeats)
    result["scaling"] = run_scaling(args.images, args.lines, args.rounds,
                                    DATA_DIR / "scaling")
    report(result, args.json)


if __name__ == "__main__":
    main()
