"""What ``bench_convert`` and ``bench_convert_beam`` share: inputs, floors, the timing loop.

Inputs: W2-like records (``uint8 (32, 32, 3)`` arrays, 3,072 bytes, in one ``.npy``; record
``i`` starts with ``i``) converted into :data:`SHARDS` shards, and 64 x 64 RGB PNG files in
10 class folders converted into :data:`PNG_SHARDS` shards. Each is measured against a floor:
array_record's ``ArrayRecordWriter`` in a plain loop (no features, checks, checksums or
metadata). :func:`time_contenders` times each contender once and puts it over the floor.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pathlib
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from benchmarks.bench_array_record import RECORD_BYTES, RECORD_SHAPE
from benchmarks.harness import emit

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARDS = 8
PNG_SHARDS = 2

#: ``write(src, dst)``: convert the input folder ``src`` into ``dst``; returns the
#: ``DatasetInfo`` written (its record count is checked), or None for the floor.
Contender = Callable[[pathlib.Path, pathlib.Path], Any]


def fresh_dir(directory: pathlib.Path) -> None:
    """Empty ``directory`` (every run rebuilds its data)."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)


def host() -> dict[str, Any]:
    """The CPU count and the 1-minute load at the start of a run."""
    return {"cpus": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2)}


def make_w2_npy(records: int, directory: pathlib.Path) -> pathlib.Path:
    """``records`` random 3,072-byte images; image ``i`` starts with ``i`` (4 bytes LE)."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (records, RECORD_BYTES), dtype=np.uint8)
    images[:, :4] = np.arange(records, dtype=np.uint32).view(np.uint8).reshape(records, 4)
    path = directory / "w2" / "image.npy"
    path.parent.mkdir(parents=True)
    np.save(path, images.reshape(records, *RECORD_SHAPE))
    return path.parent


def w2_workload(records: int) -> str:
    return f"{records} x {RECORD_BYTES} B uint8{RECORD_SHAPE} from .npy into {SHARDS} shards"


def make_png_folder(images: int, directory: pathlib.Path) -> pathlib.Path:
    """``images`` 64 x 64 RGB PNG files, image ``i`` in folder ``class{i % 10}``."""
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


def png_workload(images: int) -> str:
    return f"{images} PNG files 64x64 RGB, 10 class folders, {PNG_SHARDS} shards"


def make_parquet(images: int, directory: pathlib.Path) -> pathlib.Path:
    """The PNG images of :func:`make_png_folder` (made again, the same pixels) as one
    Parquet file written as Hugging Face ``datasets`` writes an image dataset: an ``Image``
    column (``{bytes, path}``) and a ``ClassLabel`` column, row groups of 1,000 rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = make_png_folder(images, directory / "parquet_pngs")
    files = sorted(folder.rglob("*.png"))
    features = {"image": {"_type": "Image"},
                "label": {"_type": "ClassLabel", "names": [f"class{k}" for k in range(10)]}}
    table = pa.table({
        "image": pa.array([{"bytes": p.read_bytes(), "path": None} for p in files],
                          pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
        "label": pa.array([int(p.parent.name[5:]) for p in files], pa.int64()),
    }).replace_schema_metadata(
        {"huggingface": json.dumps({"info": {"features": features}})})
    path = directory / "parquet" / "train.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(table, path, row_group_size=1000)
    shutil.rmtree(folder.parent)
    return path.parent


def parquet_workload(images: int) -> str:
    return (f"one Parquet file of {images} PNG images 64x64 RGB (Hugging Face Image column) "
            f"and labels, row groups of 1,000, {PNG_SHARDS} shards")


def make_jsonl(records: int, directory: pathlib.Path) -> pathlib.Path:
    """``records`` JSON Lines rows ``{"text", "label", "score"}``: text of 60-140
    characters (words of a small vocabulary), an int label, a float score."""
    rng = np.random.default_rng(2)
    words = [f"w{k}" for k in range(500)]
    path = directory / "jsonl" / "train.jsonl"
    path.parent.mkdir(parents=True)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(records):
            text = " ".join(words[k] for k in rng.integers(0, 500, int(rng.integers(15, 35))))
            f.write(json.dumps({"text": text, "label": i % 10,
                                "score": round(float(rng.random()), 4)}) + "\n")
    return path.parent


def jsonl_workload(records: int) -> str:
    return (f"{records} JSON Lines rows (text of ~100 characters, int label, float score), "
            f"{PNG_SHARDS} shards")


def floor_write_npy(src: pathlib.Path, dst: pathlib.Path) -> None:
    """The W2 floor: each array's bytes, one record each, into :data:`SHARDS` shards."""
    images = np.load(src / "image.npy", mmap_mode="r")
    _floor_write(dst, [(images[i].tobytes() for i in range(lo, hi))
                       for lo, hi in _split(len(images), SHARDS)])


def floor_write_png(src: pathlib.Path, dst: pathlib.Path) -> None:
    """The PNG floor: each file's bytes, one record each, into :data:`PNG_SHARDS` shards."""
    files = sorted(src.rglob("*.png"))
    _floor_write(dst, [(p.read_bytes() for p in files[lo:hi])
                       for lo, hi in _split(len(files), PNG_SHARDS)])


def floor_write_parquet(src: pathlib.Path, dst: pathlib.Path) -> None:
    """The Parquet floor: each image's bytes, one record each, into :data:`PNG_SHARDS`
    shards (read a batch at a time by ``pyarrow``)."""
    import pyarrow.parquet as pq

    images = [b for path in sorted(src.glob("*.parquet"))
              for batch in pq.ParquetFile(path).iter_batches(columns=["image"])
              for b in batch.column(0).field("bytes").to_pylist()]
    _floor_write(dst, [iter(images[lo:hi]) for lo, hi in _split(len(images), PNG_SHARDS)])


def floor_write_jsonl(src: pathlib.Path, dst: pathlib.Path) -> None:
    """The JSON Lines floor: each line's bytes, one record each, into :data:`PNG_SHARDS`
    shards (no parsing: the bytes as they are)."""
    lines = [line for path in sorted(src.glob("*.jsonl"))
             for line in path.read_bytes().splitlines() if line.strip()]
    _floor_write(dst, [iter(lines[lo:hi]) for lo, hi in _split(len(lines), PNG_SHARDS)])


def _split(n: int, shards: int) -> list[tuple[int, int]]:
    return [(s * n // shards, (s + 1) * n // shards) for s in range(shards)]


def _floor_write(dst: pathlib.Path, shards: list[Iterable[bytes]]) -> None:
    from array_record.python.array_record_module import ArrayRecordWriter

    dst.mkdir(parents=True)
    for s, records in enumerate(shards):
        writer = ArrayRecordWriter(str(dst / f"floor-{s:05d}.array_record"), "group_size:1")
        for record in records:
            writer.write(record)
        writer.close()


def time_contenders(src: pathlib.Path, out: pathlib.Path, records: int,
                    contenders: Mapping[str, Contender]) -> dict[str, Any]:
    """Each contender once, in order, into ``out/<name>``: records/s, MB/s of input and
    seconds per contender, then ``<name>_vs_floor`` (records/s over the ``"floor"``'s)."""
    size = sum(p.stat().st_size for p in src.rglob("*") if p.is_file())
    result: dict[str, Any] = {}
    for name, write in contenders.items():
        dst = out / name
        shutil.rmtree(dst, ignore_errors=True)
        start = time.perf_counter()
        info = write(src, dst)
        seconds = time.perf_counter() - start
        if name != "floor":
            assert info.num_records == records, (name, info.num_records)
        result[name] = {"records_per_s": round(records / seconds),
                        "MB_per_s": round(size / seconds / 1e6, 1), "seconds": round(seconds, 2)}
    floor_rate = result["floor"]["records_per_s"]
    for name in contenders:
        if name != "floor":
            result[f"{name}_vs_floor"] = round(result[name]["records_per_s"] / floor_rate, 3)
    return result


def folder_bytes(folder: pathlib.Path, pattern: str = "*") -> dict[str, bytes]:
    """Each file of ``folder`` matching ``pattern``, by name (to compare two outputs)."""
    return {p.name: p.read_bytes() for p in sorted(folder.glob(pattern)) if p.is_file()}


def arguments(doc: str) -> argparse.ArgumentParser:
    """The command line both benchmarks take: ``--records``, ``--images``, ``--json``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--images", type=int, default=2_000)
    parser.add_argument("--json", default=None)
    return parser


def report(result: dict[str, Any], path: str | None) -> None:
    """Print ``result`` as JSON, and write it to ``path`` when given."""
    emit(result, path)
