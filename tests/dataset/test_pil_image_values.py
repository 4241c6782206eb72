"""PIL images given as record values: one opened from a cut file (PIL reads its pixels
only when they are used) is a bad row named by row, field and file, skipped with
``on_error='skip'``, not an unnamed ``OSError`` that ends the write."""

from __future__ import annotations

import io

import numpy as np
import pytest
from dataset_helpers import read_dataset

from datarax.dataset import ConversionError, write_dataset

Image = pytest.importorskip("PIL.Image")


def _jpegs(tmp_path) -> tuple[str, str]:
    out = io.BytesIO()  # noise: the scan is most of the file, so a cut keeps the header
    pixels = np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    good, cut = tmp_path / "good.jpg", tmp_path / "cut.jpg"
    good.write_bytes(out.getvalue())
    cut.write_bytes(out.getvalue()[: len(out.getvalue()) // 2])
    return str(good), str(cut)


def test_a_pil_image_of_a_cut_file_is_a_named_bad_row(tmp_path) -> None:
    good, cut = _jpegs(tmp_path)
    records = [{"image": Image.open(p), "label": i} for i, p in enumerate((good, cut, good))]
    with pytest.raises(ConversionError, match=r"row 1, field 'image': undecodable image \(file "
                                              r".*cut\.jpg\) \(OSError: image file is truncated"):
        write_dataset(records, tmp_path / "raise")
    records = [{"image": Image.open(p), "label": i} for i, p in enumerate((good, cut, good))]
    info, _ = write_dataset(records, tmp_path / "skip", on_error="skip")
    assert [s["row"] for s in info.skipped] == [1]
    read = read_dataset(tmp_path / "skip")
    assert read["label"].tolist() == [0, 2]
    assert np.array_equal(read["image"][0], np.asarray(Image.open(good).convert("RGB")))
