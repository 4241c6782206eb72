"""What convert's fast paths must keep: an image kept as it is is judged from its header
and structure as PIL judges it (anything else goes to PIL, as before); datasets written
with the fast paths equal those written without them, byte for byte, with 1 and 2
processes; scalars made without NumPy are NumPy's bytes."""

from __future__ import annotations

import io
import json
import os
import struct
import zlib

import numpy as np
import pytest
from dataset_helpers import read_dataset
from PIL import Image

from datarax.dataset import convert, encode_record
from datarax.dataset import image_payload as image_payload_module
from datarax.dataset import layout as layout_module
from datarax.dataset.conversion import ImageFolderRows
from datarax.dataset.fields import Features, Field, RecordMismatchError, infer_field
from datarax.dataset.image_headers import intact_image_header, read_image_header
from datarax.errors import RecordError

MODES = ["L", "RGB", "RGBA", "LA", "P", "1", "I;16", "CMYK"]


def _encoded(mode: str, fmt: str, size: tuple[int, int], seed: int = 0, **options) -> bytes:
    rng = np.random.default_rng(seed)
    image = Image.new(mode, size)
    if mode in ("L", "RGB", "RGBA"):
        shape = (size[1], size[0]) + (() if mode == "L" else (len(mode),))
        pixels = rng.integers(0, 256, shape, dtype=np.uint8)
        if mode == "RGBA":
            pixels[..., 3] = 255  # opaque: storable in 3 channels
        image = Image.fromarray(pixels, mode)
    out = io.BytesIO()
    image.save(out, format=fmt, **options)
    return out.getvalue()


def _every_image() -> list[tuple[str, bytes]]:
    found = []
    for mode in MODES:
        for fmt in ("PNG", "JPEG"):
            for size in ((5, 3), (64, 48)):
                try:
                    found.append((f"{mode}-{fmt}-{size}", _encoded(mode, fmt, size)))
                except (OSError, KeyError, ValueError):  # a mode the format does not hold
                    continue
    found.append(("progressive", _encoded("RGB", "JPEG", (40, 30), progressive=True)))
    found.append(("big-rgb", _encoded("RGB", "PNG", (300, 200))))  # several IDAT chunks
    return found


@pytest.mark.parametrize("name,data", _every_image())
def test_a_header_says_what_pil_says_and_intact_means_kept_modes(name, data) -> None:
    image = Image.open(io.BytesIO(data))
    header = read_image_header(data)
    assert header is not None, name
    assert (header.height, header.width, header.mode) == (image.height, image.width, image.mode)
    kept = intact_image_header(data)
    assert (kept is not None) == (image.mode in ("L", "RGB", "RGBA")), name


@pytest.mark.parametrize("name,data", _every_image())
def test_a_cut_or_changed_file_is_never_intact(name, data) -> None:
    for cut in (1, 2, 12, len(data) // 2):
        assert intact_image_header(data[:-cut]) is None, (name, cut)
    if data.startswith(b"\x89PNG"):
        for at in (9, len(data) // 3, len(data) // 2, len(data) - 5):
            changed = bytearray(data)
            changed[at] ^= 0x01
            assert intact_image_header(bytes(changed)) is None, (name, at)
    assert intact_image_header(data + b"\x00") is None  # trailing bytes: PIL decides


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _png_from_chunks(*chunks: bytes) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + b"".join(chunks)


def test_unusual_pngs_are_left_to_pil() -> None:
    ihdr = _png_chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0))
    pixels = _png_chunk(b"IDAT", zlib.compress(b"\x00" + b"\x01" * 6 + b"\x00" + b"\x02" * 6))
    end = _png_chunk(b"IEND", b"")
    plain = _png_from_chunks(ihdr, pixels, end)
    assert intact_image_header(plain) is not None
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(plain))),
                                  [[[1, 1, 1], [1, 1, 1]], [[2, 2, 2], [2, 2, 2]]])
    transparent = _png_from_chunks(ihdr, _png_chunk(b"tRNS", b"\x00\x01" * 3), pixels, end)
    unknown = _png_from_chunks(ihdr, _png_chunk(b"abCD", b"x"), pixels, end)
    no_pixels = _png_from_chunks(ihdr, end)
    interlaced = _png_from_chunks(
        _png_chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 2)), pixels, end)
    deep = _png_from_chunks(  # PIL opens it as RGB, cut to 8 bits: it must see it
        _png_chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 16, 2, 0, 0, 0)), pixels, end)
    assert read_image_header(deep).mode == "RGB" == Image.open(io.BytesIO(deep)).mode
    for data in (transparent, unknown, no_pixels, interlaced, deep):
        assert intact_image_header(data) is None


def _folder(root, images: dict[str, bytes]) -> str:
    for rel, data in images.items():
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)
    return str(root)


def _mixed_folder(root) -> str:
    """Grey first, colour later, sizes that vary, palette and CMYK images (re-encoded),
    JPEG among PNG, a progressive JPEG: every path of the image writer."""
    return _folder(root, {
        "a/00.png": _encoded("L", "PNG", (8, 6), 1),
        "a/01.png": _encoded("RGB", "PNG", (8, 6), 2),
        "a/02.png": _encoded("P", "PNG", (8, 6)),
        "a/03.jpg": _encoded("RGB", "JPEG", (8, 6), 3),
        "b/04.png": _encoded("RGBA", "PNG", (9, 6), 4),
        "b/05.jpg": _encoded("CMYK", "JPEG", (8, 7)),
        "b/06.jpg": _encoded("L", "JPEG", (8, 6), 5, progressive=True),
        "b/07.png": _encoded("RGB", "PNG", (300, 200), 6),
    })


def _dataset_files(folder) -> dict[str, bytes]:
    return {name: (folder / name).read_bytes() for name in sorted(os.listdir(folder))}


def _without_fast_paths(monkeypatch) -> None:
    """Every image through PIL, every scalar through NumPy: the writer before its fast paths."""
    monkeypatch.setattr(image_payload_module, "stored_as_it_is", lambda f, value: None)
    monkeypatch.setattr(layout_module, "_plain_encoder", lambda features: None)
    monkeypatch.setattr(layout_module, "_scalar_bytes", lambda f, value: None)
    monkeypatch.setattr("datarax.dataset.images.read_image_header", lambda data: None)
    monkeypatch.setattr("datarax.dataset.writer.column_encoder", lambda features: None)
    monkeypatch.setattr("datarax.dataset.fields.kept_image", lambda value: None)


def test_converted_folders_equal_the_pil_paths_byte_for_byte(tmp_path, monkeypatch) -> None:
    src = _mixed_folder(tmp_path / "src")
    info, _ = convert(src, tmp_path / "fast", shards=3)
    assert info.features["image"].shape == (None, None, 3)  # sizes vary, grey before colour
    assert info.features["image"].encoding == "png"
    _without_fast_paths(monkeypatch)
    convert(src, tmp_path / "pil", shards=3)
    assert _dataset_files(tmp_path / "fast") == _dataset_files(tmp_path / "pil")


def test_table_rows_equal_the_numpy_paths_byte_for_byte(tmp_path, monkeypatch) -> None:
    rows = [{"text": f"row {i} é", "label": i % 3, "score": float(x), "id": 2**40 + i}
            for i, x in enumerate([0.1, -0.0, 1e-45, 3.4028234e38, 1 / 3, 7.0])]
    with open(tmp_path / "t.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    convert(str(tmp_path / "t.jsonl"), tmp_path / "fast", shards=2)
    _without_fast_paths(monkeypatch)
    convert(str(tmp_path / "t.jsonl"), tmp_path / "numpy", shards=2)
    assert _dataset_files(tmp_path / "fast") == _dataset_files(tmp_path / "numpy")
    assert read_dataset(tmp_path / "fast")["score"].tolist()[:2] == [np.float32(0.1), 0.0]


def test_scalars_made_without_numpy_are_numpys_bytes_and_misfits_still_named() -> None:
    features = Features((Field("x", "float32", (), "raw"), Field("t", "str", (), "utf8"),
                         Field("label", "int64", (), "raw", ("a", "b"))))
    for value in (0.0, -0.0, 1e-45, 1e-46, 3.4028235e38, 2.5e-38, 123456.789, float("nan")):
        data = encode_record(features, {"x": value, "label": 1, "t": "s"})
        assert data[:4] == np.float32(value).tobytes() or np.isnan(value)
        assert data[4:12] == np.int64(1).tobytes()
    with pytest.raises(RecordMismatchError, match="row 3, field 'x': values do not fit float32"):
        encode_record(features, {"x": 3.5e38, "label": 1, "t": "s"}, row=3)
    with pytest.raises(RecordMismatchError, match="label 2 is outside its 2 class names"):
        encode_record(features, {"x": 1.0, "label": 2, "t": "s"}, row=3)


def test_a_png_whose_pixels_alone_are_bad_is_named_when_read(tmp_path) -> None:
    # checksums that match over compressed pixels that do not inflate: only a faulty
    # encoder writes one; the header check keeps it, the reader names its record
    ihdr = _png_chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0))
    bad = _png_from_chunks(ihdr, _png_chunk(b"IDAT", b"not deflate data"), _png_chunk(b"IEND", b""))
    good = _encoded("RGB", "PNG", (2, 2))
    src = _folder(tmp_path / "src", {"a/0.png": good, "a/1.png": bad})
    info, _ = convert(src, tmp_path / "out")
    assert info.num_records == 2
    with pytest.raises(RecordError, match="record 1 of the batch, field 'image': undecodable png"):
        read_dataset(tmp_path / "out")


def test_a_cut_png_is_still_refused_by_row(tmp_path) -> None:
    data = _encoded("RGB", "PNG", (8, 6))
    src = _folder(tmp_path / "src", {"a/0.png": data, "a/1.png": data[: len(data) // 2]})
    with pytest.raises(Exception, match=r"row 1 \(a/1.png\), field 'image': undecodable image"):
        convert(src, tmp_path / "out")


def test_the_image_probe_in_parts_gives_the_hints_of_one_pass(tmp_path) -> None:
    rows = ImageFolderRows(_mixed_folder(tmp_path / "src"))
    whole = rows.hints()
    for cuts in ([0, 1, 8], [0, 3, 5, 8], [0, 8]):
        parted = ImageFolderRows(rows.root)
        parted.use_probes([parted.probe(a, b) for a, b in zip(cuts, cuts[1:])])
        assert parted.hints() == whole
    assert whole["image"] == {"image_size": (None, None), "image_channels": 3}


def test_a_probe_shared_by_processes_gives_every_part_once_in_order(tmp_path) -> None:
    # each process first probes the rows it will write, then the parts left by others
    from datarax.dataset.write_workers import WorkerPool

    rows = ImageFolderRows(_mixed_folder(tmp_path / "src"))
    with WorkerPool(2, rows) as pool:
        parts = pool.probe(rows, shards=3, rows_per_part=2)
    assert parts == [rows.probe(a, a + 2) for a in range(0, 8, 2)]
    parted = ImageFolderRows(rows.root)
    parted.use_probes(parts)
    assert parted.hints() == ImageFolderRows(rows.root).hints()


def test_small_files_the_probe_read_whole_are_written_from_those_bytes(tmp_path, monkeypatch) -> None:
    from datarax.dataset import image_folder

    src = _mixed_folder(tmp_path / "src")
    rows = ImageFolderRows(src)
    rows.hints()  # the header probe: every file under 4 KB is read whole
    files = {row: os.path.join(src, path) for row, (path, _) in enumerate(rows.items)}
    small = {row: open(p, "rb").read() for row, p in files.items() if os.path.getsize(p) < 4096}
    assert 0 < len(small) < len(files)  # 07.png (300 x 200) is read at the write
    for row in small:
        os.remove(files[row])
    assert [r["image"]["bytes"] for r in rows.iter_rows(0, 3)] == [small[0], small[1], small[2]]
    monkeypatch.setattr(image_folder, "KEPT_BYTES", 0)  # nothing kept: every file read again
    again = ImageFolderRows(_mixed_folder(tmp_path / "again"))
    again.hints()
    gone = os.path.join(again.root, again.items[0][0])
    os.remove(gone)  # read again, found gone: left to the writer, which names the row
    assert next(again.iter_rows(0, 1))["image"] == {"bytes": None, "path": gone}


def _hf_parquet(root) -> str:
    """A Parquet file as Hugging Face ``datasets`` writes an image dataset: colour PNGs of
    two widths, a grey one last (stored as colour), class labels; row groups of 4."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    images = [_encoded("RGB", "PNG", (8 if i % 4 else 5, 6), i) for i in range(9)]
    images.append(_encoded("L", "PNG", (8, 6), 9))
    features = {"image": {"_type": "Image"},
                "label": {"_type": "ClassLabel", "names": ["a", "b", "c"]}}
    table = pa.table({
        "image": pa.array([{"bytes": b, "path": None} for b in images],
                          pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
        "label": pa.array([i % 3 for i in range(len(images))], pa.int64()),
    }).replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})})
    os.makedirs(root)
    pq.write_table(table, os.path.join(root, "train.parquet"), row_group_size=4)
    return str(root)


def _jsonl(root) -> str:
    os.makedirs(root)
    with open(os.path.join(root, "t.jsonl"), "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"t": f"r{i} é", "v": i / 7, "k": i % 5}) + "\n"
                     for i in range(50))
    return str(root)


_INPUTS = {"image folder": _mixed_folder, "parquet": _hf_parquet, "jsonl": _jsonl}


@pytest.mark.parametrize("kind", list(_INPUTS))
def test_two_processes_write_what_one_writes(tmp_path, kind) -> None:
    src = _INPUTS[kind](tmp_path / "src")
    one, _ = convert(src, tmp_path / "one", shards=3)
    two, _ = convert(src, tmp_path / "two", shards=3, workers=2)
    assert _dataset_files(tmp_path / "one") == _dataset_files(tmp_path / "two")
    assert [s.records for s in two.shards] == [s.records for s in one.shards]
    assert sum(s.records for s in one.shards) == {"image folder": 8, "parquet": 10, "jsonl": 50}[kind]


def test_workers_started_for_an_input_of_one_shard_are_ended(tmp_path) -> None:
    # convert starts its workers before it opens the input; with one shard (the default
    # for 50 rows) they have nothing to write and end without a trace
    import multiprocessing

    # this test's workers: another test's source not yet collected may keep its own
    others = {p.pid for p in multiprocessing.active_children()}
    src = _jsonl(tmp_path / "src")
    convert(src, tmp_path / "one")
    info, _ = convert(src, tmp_path / "two", workers=2)
    assert len(info.shards) == 1
    assert _dataset_files(tmp_path / "one") == _dataset_files(tmp_path / "two")
    assert [p.pid for p in multiprocessing.active_children() if p.pid not in others] == []


@pytest.mark.parametrize("name,data", _every_image())
def test_an_image_field_inferred_from_its_header_is_the_one_pil_gives(name, data, monkeypatch) -> None:
    from datarax.dataset import fields as fields_module

    fast = infer_field("image", {"bytes": data, "path": None})
    monkeypatch.setattr(fields_module, "kept_image", lambda value: None)
    assert fast == infer_field("image", {"bytes": data, "path": None}) == infer_field("image", data)


class _Unpicklable:
    """Records by index, holding a lock (which no process can be sent)."""

    def __init__(self) -> None:
        import threading

        self.lock = threading.Lock()

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> dict:
        if i >= 4:
            raise IndexError(i)
        return {"x": i}


def test_records_that_cannot_go_to_worker_processes_fail_at_once(tmp_path) -> None:
    from datarax.dataset import write_dataset

    with pytest.raises(TypeError, match="cannot pickle '_thread.lock' object"):
        write_dataset(_Unpicklable(), tmp_path / "ds", shards=2, workers=2)
