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

Reading W2 (one shuffled epoch, batch 256, best of ``--repeats`` rounds, each round running the
datarax contenders and the floor in turn; Grain once) over the *same* files,
the ones datarax wrote (a record of a fixed-shape field is exactly its bytes):
``floor`` (array_record's reader, see ``bench_array_record``), ``datarax_self_described``
(``Pipeline`` over ``ArrayRecordSourceModule(config, paths=<folder>)``: no user code),
``datarax_user_decode_batch`` (the same files with a hand-written ``decode_batch``), and Grain (``MapDataset.source(ArrayRecordDataSource).shuffle.map(decode).batch``).

Run: ``python -m benchmarks.bench_convert [--records N] [--images N] [--json PATH]``.
Data goes under ``data/bench_convert/`` (gitignored), rebuilt every run.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pathlib
import shutil
import time
from typing import Any

import numpy as np

from benchmarks.bench_array_record import (
    RECORD_BYTES,
    RECORD_SHAPE,
    Check,
    run_datarax_pipeline,
    run_floor,
    run_grain_threads,
    warm,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / "data" / "bench_convert"
SHARDS = 8


def make_w2_npy(records: int, directory: pathlib.Path) -> pathlib.Path:
    """``records`` random 3,072-byte images; image ``i`` starts with ``i`` (4 bytes LE)."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (records, RECORD_BYTES), dtype=np.uint8)
    images[:, :4] = np.arange(records, dtype=np.uint32).view(np.uint8).reshape(records, 4)
    path = directory / "w2" / "image.npy"
    path.parent.mkdir(parents=True)
    np.save(path, images.reshape(records, *RECORD_SHAPE))
    return path.parent


def make_png_folder(images: int, directory: pathlib.Path) -> pathlib.Path:
    from PIL import Image

    rng = np.random.default_rng(1)
    root = directory / "png"
    for i in range(images):
        folder = root / f"class{i % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        # smooth-ish content so PNG compresses like a photo crop rather than noise
        base = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
        pixels = np.kron(base, np.ones((8, 8, 1), np.uint8))
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, format="PNG")
        (folder / f"{i:06d}.png").write_bytes(buf.getvalue())
    return root


def _input_bytes(src: pathlib.Path) -> int:
    return sum(p.stat().st_size for p in src.rglob("*") if p.is_file())


def floor_write_npy(src: pathlib.Path, dst: pathlib.Path) -> None:
    from array_record.python.array_record_module import ArrayRecordWriter

    images = np.load(src / "image.npy", mmap_mode="r")
    dst.mkdir(parents=True)
    n = len(images)
    for s in range(SHARDS):
        writer = ArrayRecordWriter(str(dst / f"floor-{s:05d}.array_record"), "group_size:1")
        for i in range(s * n // SHARDS, (s + 1) * n // SHARDS):
            writer.write(images[i].tobytes())
        writer.close()


def floor_write_files(src: pathlib.Path, dst: pathlib.Path, shards: int) -> None:
    from array_record.python.array_record_module import ArrayRecordWriter

    files = sorted(p for p in src.rglob("*.png"))
    dst.mkdir(parents=True)
    n = len(files)
    for s in range(shards):
        writer = ArrayRecordWriter(str(dst / f"floor-{s:05d}.array_record"), "group_size:1")
        for path in files[s * n // shards:(s + 1) * n // shards]:
            writer.write(path.read_bytes())
        writer.close()


def time_conversion(src: pathlib.Path, out: pathlib.Path, records: int, shards: int,
                    floor: Any) -> dict[str, Any]:
    from datarax.dataset import convert

    size = _input_bytes(src)
    rates: dict[str, Any] = {}
    for name in ("floor", "datarax_w1", "datarax_w2"):
        dst = out / name
        shutil.rmtree(dst, ignore_errors=True)
        start = time.perf_counter()
        if name == "floor":
            floor(src, dst)
        else:
            info, _ = convert(str(src), dst, shards=shards, workers=int(name[-1]))
            assert info.num_records == records, (name, info.num_records)
        seconds = time.perf_counter() - start
        rates[name] = {"records_per_s": round(records / seconds), "MB_per_s": round(size / seconds / 1e6, 1),
                       "seconds": round(seconds, 2)}
    for name in ("datarax_w1", "datarax_w2"):
        rates[f"{name}_vs_floor"] = round(rates[name]["records_per_s"] / rates["floor"]["records_per_s"], 3)
    same = all(
        (out / "datarax_w1" / f).read_bytes() == (out / "datarax_w2" / f).read_bytes()
        for f in os.listdir(out / "datarax_w1"))
    rates["w1_w2_byte_identical"] = same
    return rates


def run_self_described(folder: str, records: int, batch: int, seed: int) -> tuple[float, float]:
    """A Pipeline over the dataset folder: no decode, no user code."""
    from datarax.pipeline import Pipeline
    from datarax.sources import ArrayRecordSourceConfig, ArrayRecordSourceModule

    source = ArrayRecordSourceModule(ArrayRecordSourceConfig(seed=seed, shuffle_files=True), folder)
    pipeline = Pipeline(source=source, stages=[], batch_size=batch)
    source.element_spec()
    check = Check(records)
    start, cpu_start = time.perf_counter(), time.process_time()
    for out in pipeline:
        check.add(out["image"])
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    source.close()
    check.verify("datarax_self_described")
    return elapsed, cpu


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
    for _ in range(repeats):
        for name, run in contenders.items():
            seconds[name].append(run()[0])
    for threads in (4, 16):
        seconds[f"grain_threads{threads}"] = [
            run_grain_threads(paths, records, batch, 0, num_threads=threads)[0]]
    rate = {k: records / min(v) for k, v in seconds.items()}
    grain = max((k for k in rate if k.startswith("grain")), key=rate.__getitem__)

    def per_round(name: str) -> list[float]:
        return sorted(round(f / s, 3) for f, s in zip(seconds["floor"], seconds[name]))

    return {
        "records_per_s": {k: round(v) for k, v in rate.items()},
        "seconds": {k: [round(x, 3) for x in v] for k, v in seconds.items()},
        "self_described_vs_floor": round(rate["datarax_self_described"] / rate["floor"], 3),
        "user_decode_batch_vs_floor": round(rate["datarax_user_decode_batch"] / rate["floor"], 3),
        "self_described_vs_floor_per_round": per_round("datarax_self_described"),
        "user_decode_batch_vs_floor_per_round": per_round("datarax_user_decode_batch"),
        "self_described_vs_grain": round(rate["datarax_self_described"] / rate[grain], 3),
        "grain_best": grain,
    }


def run(records: int = 100_000, images: int = 2_000, batch: int = 256, repeats: int = 5,
        data_dir: pathlib.Path = DATA_DIR) -> dict[str, Any]:
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    w2 = make_w2_npy(records, data_dir)
    out = data_dir / "out"
    result: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "convert_w2": {"workload": f"{records} x {RECORD_BYTES} B uint8{RECORD_SHAPE} from .npy "
                                   f"into {SHARDS} shards",
                       **time_conversion(w2, out / "w2", records, SHARDS, floor_write_npy)},
        "read_w2": {"workload": f"one shuffled epoch of the {records} W2 records datarax wrote, "
                                f"batch {batch}, best of {repeats} rounds (Grain: one run)",
                    **time_reading(out / "w2" / "datarax_w1", records, batch, repeats)},
    }
    if images:  # --images 0 skips the PNG conversion
        png = make_png_folder(images, data_dir)
        result["convert_png"] = {
            "workload": f"{images} PNG files 64x64 RGB, 10 class folders, 2 shards",
            **time_conversion(png, out / "png", images, 2, lambda s, d: floor_write_files(s, d, 2))}
    result["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--images", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    result = run(args.records, args.images, repeats=args.repeats)
    print(json.dumps(result, indent=2))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
