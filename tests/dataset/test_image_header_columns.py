"""A Parquet image column's headers read all together, and parsed tables handed to worker
processes by file: the same verdicts, hints and written files as one image / one pickle
at a time."""

from __future__ import annotations

import gc
import json
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import pytest
from test_convert_speed_paths import _dataset_files, _encoded, _every_image, _png_chunk, _png_from_chunks

from datarax.dataset import convert
from datarax.dataset import image_header_columns as columns_module
from datarax.dataset.image_header_columns import png_header_columns
from datarax.dataset.image_headers import intact_image_header, read_image_header
from datarax.dataset.images import ImageSizes, channels_of_mode, readable_size
from datarax.dataset.table_rows import TableRows


def _variants() -> list[tuple[str, bytes]]:
    """Every image of the speed-path tests, cut, changed, with bytes after it, and PNGs of
    unusual chunk orders."""
    found = []
    for name, data in _every_image():
        found.append((name, data))
        found += [(f"{name}-cut{c}", data[:-c]) for c in (1, 12, len(data) // 2)]
        for at in (9, 20, 30, 40, len(data) // 2, len(data) - 5):
            changed = bytearray(data)
            changed[at] ^= 0x01
            found.append((f"{name}-changed{at}", bytes(changed)))
        found.append((f"{name}-trailing", data + b"\x00"))
    ihdr = _png_chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0))
    pixels = _png_chunk(b"IDAT", zlib.compress(b"\x00" + b"\x01" * 6 + b"\x00" + b"\x02" * 6))
    empty, end = _png_chunk(b"IDAT", b""), _png_chunk(b"IEND", b"")
    found += [
        ("plain", _png_from_chunks(ihdr, pixels, end)),
        ("empty IDAT after", _png_from_chunks(ihdr, pixels, empty, end)),
        ("empty IDAT first", _png_from_chunks(ihdr, empty, pixels, end)),
        ("gAMA first", _png_from_chunks(ihdr, _png_chunk(b"gAMA", b"\x00\x00\xb1\x8f"), pixels, end)),
        ("gAMA between", _png_from_chunks(ihdr, pixels, _png_chunk(b"gAMA", b"\x00" * 4), pixels, end)),
        ("unknown chunk", _png_from_chunks(ihdr, _png_chunk(b"abCD", b"x"), pixels, end)),
        ("no pixels", _png_from_chunks(ihdr, end)),
        ("IEND with data", _png_from_chunks(ihdr, pixels, _png_chunk(b"IEND", b"x"))),
        ("no IEND", _png_from_chunks(ihdr, pixels)),
        ("huge", _png_from_chunks(
            _png_chunk(b"IHDR", struct.pack(">IIBBBBB", 2**31 - 1, 2**31 - 1, 8, 2, 0, 0, 0)),
            pixels, end)),
        ("16 bits", _png_from_chunks(
            _png_chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 16, 2, 0, 0, 0)), pixels, end)),
        ("empty", b""),
    ]
    return found


@pytest.mark.parametrize("whole", [True, False])
def test_png_headers_read_together_are_the_ones_read_one_by_one(whole) -> None:
    images = _variants()
    data = np.frombuffer(b"".join(d for _, d in images), np.uint8)
    sizes = np.array([len(d) for _, d in images])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    known, height, width, channels = png_header_columns(data, starts, sizes, whole=whole)
    one = intact_image_header if whole else read_image_header
    for (name, image), k, h, w, c in zip(images, known, height, width, channels, strict=True):
        if k:  # read together: what the one-by-one check says
            header = one(image)
            assert header is not None, name
            assert (header.height, header.width, channels_of_mode(header.mode)) == (h, w, c), name
    taken = {name for (name, _), k in zip(images, known) if k}
    # the plain PNGs PIL writes are read together (else the fast path is never taken)
    assert {"L-PNG-(5, 3)", "RGB-PNG-(64, 48)", "RGBA-PNG-(5, 3)", "big-rgb", "plain",
            "empty IDAT after"} <= taken
    assert not {n for n in taken if "JPEG" in n or "progressive" in n}
    if whole:  # a file cut, changed or followed by more bytes is never intact
        assert not {n for n in taken if "changed" in n or "cut" in n or "trailing" in n}
    assert "huge" not in taken and "16 bits" not in taken and "gAMA first" not in taken


def _image_parquet(path, images: list[bytes | None], paths: list[str | None] | None = None) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths = paths or [None] * len(images)
    features = {"image": {"_type": "Image"}, "label": {"_type": "ClassLabel", "names": ["a", "b"]}}
    table = pa.table({
        "image": pa.array([{"bytes": b, "path": p} for b, p in zip(images, paths)],
                          pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
        "label": pa.array([i % 2 for i in range(len(images))], pa.int64()),
    }).replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})})
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(table, path, row_group_size=3)
    return str(path)


def _png(mode: str, size: tuple[int, int], seed: int = 0) -> bytes:
    return _encoded(mode, "PNG", size, seed)


_MIXES = {
    "same size": [_png("RGB", (6, 4), i) for i in range(7)],
    "grey first, colour later": [_png("L", (6, 4)), *[_png("RGB", (6, 4), i) for i in range(5)]],
    "colour first, grey later": [_png("RGB", (6, 4)), _png("L", (6, 4)), _png("RGB", (6, 4))],
    "widths vary": [_png("RGB", (6 + i % 2, 4), i) for i in range(7)],
    "both vary, palette and JPEG": [_png("RGB", (6, 4)), _png("P", (6, 5)),
                                    _encoded("RGB", "JPEG", (7, 4)), _png("RGBA", (6, 4))],
    "grey, then a JPEG of colour": [_png("L", (6, 4)), _encoded("RGB", "JPEG", (6, 4))],
}


@pytest.mark.parametrize("mix", list(_MIXES))
def test_parquet_image_hints_are_those_of_every_image_one_by_one(tmp_path, mix) -> None:
    images = _MIXES[mix]
    rows = TableRows([_image_parquet(tmp_path / "t.parquet", images)], "parquet")
    one_by_one = ImageSizes.of(((s[0],), (s[1],), (s[2],))
                               for s in filter(None, map(readable_size, images))).hint()
    assert {k: v for k, v in rows.hints()["image"].items() if k != "image"} == one_by_one


def test_parquet_images_with_bytes_missing_are_read_from_their_paths(tmp_path) -> None:
    grey = tmp_path / "grey.png"
    grey.write_bytes(_png("L", (6, 4)))
    images = [None, _png("RGB", (6, 4)), _png("RGB", (6, 4), 1)]
    rows = TableRows([_image_parquet(tmp_path / "t.parquet", images, [str(grey), None, None])],
                     "parquet")
    assert rows.hints()["image"] == {"image": True, "image_channels": 3}


def _one_by_one(monkeypatch) -> None:
    """No header read together: every image checked one by one, as before."""
    def nothing_known(data, starts, sizes, *, whole):
        n = len(starts)
        return np.zeros(n, bool), *(np.zeros(n, np.int64) for _ in range(3))

    monkeypatch.setattr(columns_module, "png_header_columns", nothing_known)
    monkeypatch.setattr("datarax.dataset.column_records.png_header_columns", nothing_known)


@pytest.mark.parametrize("mix", ["same size", "grey first, colour later", "both vary, palette and JPEG"])
def test_parquet_images_convert_as_they_did_one_by_one(tmp_path, monkeypatch, mix) -> None:
    src = _image_parquet(tmp_path / "src" / "t.parquet", _MIXES[mix])
    convert(src, tmp_path / "together", shards=2)
    _one_by_one(monkeypatch)
    convert(src, tmp_path / "one_by_one", shards=2)
    assert _dataset_files(tmp_path / "together") == _dataset_files(tmp_path / "one_by_one")


def test_parquet_files_whose_probe_stops_early_convert_as_one_by_one(tmp_path, monkeypatch) -> None:
    # both sizes vary in the first row group (3 rows): the probe reads no further, and
    # the later rows' images are checked at the write
    _image_parquet(tmp_path / "src" / "a.parquet", _MIXES["both vary, palette and JPEG"])
    _image_parquet(tmp_path / "src" / "b.parquet", _MIXES["same size"])
    rows = TableRows([str(tmp_path / "src" / n) for n in ("a.parquet", "b.parquet")], "parquet")
    rows.hints()
    assert rows.image_headers(0, 3) is not None and rows.image_headers(0, 4) is None
    info, _ = convert(str(tmp_path / "src"), tmp_path / "together", shards=2)
    assert info.num_records == 11 and info.features["image"].shape == (None, None, 3)
    _one_by_one(monkeypatch)
    convert(str(tmp_path / "src"), tmp_path / "one_by_one", shards=2)
    assert _dataset_files(tmp_path / "together") == _dataset_files(tmp_path / "one_by_one")


def test_a_parsed_table_goes_to_workers_as_a_file_removed_after(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    src = tmp_path / "t.jsonl"
    src.write_text("".join(json.dumps({"t": "x" * 100, "k": i}) + "\n" for i in range(2000)))
    rows = TableRows([str(src)], "json")
    state = pickle.dumps(rows)
    assert len(state) < 4096  # the table (about 200 KB) stays in its file
    copy = pickle.loads(state)
    assert list(copy.iter_rows(0, None)) == list(rows.iter_rows(0, None))
    named = [f for f in os.listdir(tmp_path) if f.startswith("datarax-table")]
    # on Linux no name is left from the start (a killed process leaves no file)
    assert named == [] if os.path.isdir("/proc/self/fd") else named != []
    (path,) = rows._shared.paths  # another process reads it by its path
    read = subprocess.run([sys.executable, "-c", "import sys, pyarrow as pa; print(pa.ipc.open_file("
                           "pa.memory_map(sys.argv[1])).read_all().num_rows)", path],
                          capture_output=True, text=True, check=True)
    assert read.stdout.split() == ["2000"]
    del rows, copy
    gc.collect()
    assert [f for f in os.listdir(tmp_path) if f.startswith("datarax-table")] == []


def test_a_parsed_table_goes_pickled_where_no_file_can_be_written(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))  # no such folder
    src = tmp_path / "t.jsonl"
    src.write_text("".join(json.dumps({"t": f"r{i}", "k": i}) + "\n" for i in range(50)))
    rows = TableRows([str(src)], "json")
    copy = pickle.loads(pickle.dumps(rows))
    assert list(copy.iter_rows(0, None)) == list(rows.iter_rows(0, None))
    assert [r["k"] for r in copy.iter_rows(48, 50)] == [48, 49]
