"""Images whose transparency is a colour (a palette or RGB PNG's ``tRNS`` chunk, a GIF's
transparent index): an alpha channel where a pixel is transparent, refused where a field
without alpha would drop it, 3 channels where no pixel uses it."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
from dataset_helpers import png, read_dataset

from datarax.dataset import ConversionError, convert

Image = pytest.importorskip("PIL.Image")


def palette_png(transparent: int) -> bytes:
    """A 4x4 palette PNG: rows 0-1 green (index 1), rows 2-3 red (index 0); the colour
    of index ``transparent`` is transparent."""
    pixels = np.zeros((4, 4), np.uint8)
    pixels[:2] = 1
    image = Image.fromarray(pixels, "P")
    image.putpalette([255, 0, 0, 0, 255, 0] + [0] * 762)
    out = io.BytesIO()
    image.save(out, format="PNG", transparency=transparent)
    return out.getvalue()


def folder(root, files: dict[str, bytes]) -> str:
    for name, data in files.items():
        os.makedirs(root / os.path.dirname(name), exist_ok=True)
        (root / name).write_bytes(data)
    return str(root)


def test_a_first_palette_image_with_a_transparent_colour_gives_a_field_with_alpha(tmp_path):
    src = folder(tmp_path / "src", {"a/0.png": palette_png(0), "a/1.png": png(9)})
    info, _ = convert(src, tmp_path / "out")
    assert info.features["image"].shape == (4, 4, 4)
    images = read_dataset(tmp_path / "out")["image"]
    assert images[0, :2].tolist() == [[[0, 255, 0, 255]] * 4] * 2  # green, opaque
    assert images[0, 2:].tolist() == [[[255, 0, 0, 0]] * 4] * 2  # red, transparent
    assert images[1].tolist() == [[[9, 9, 9, 255]] * 4] * 4  # RGB: opaque alpha


def test_a_transparent_colour_no_pixel_uses_loses_nothing_in_a_colour_field(tmp_path):
    src = folder(tmp_path / "src", {"a/0.png": palette_png(7), "a/1.png": png(9)})
    info, _ = convert(src, tmp_path / "out")
    assert info.features["image"].shape == (4, 4, 3)
    assert read_dataset(tmp_path / "out")["image"][0, 0, 0].tolist() == [0, 255, 0]


def test_an_rgb_png_with_a_transparent_colour_in_a_field_without_alpha_is_refused(tmp_path):
    keyed = io.BytesIO()
    Image.new("RGB", (4, 4), (7, 7, 7)).save(keyed, format="PNG", transparency=(7, 7, 7))
    src = folder(tmp_path / "src", {"a/0.png": png(9), "a/1.png": keyed.getvalue()})
    with pytest.raises(ConversionError, match=r"row 1 \(a/1.png\), field 'image': an RGB image "
                                              r"with a transparent colour, the features say 3 channel\(s\); storing it so would "
                                              r"lose its transparency \(alpha channel\). Declare "
                                              r"the field with 4 channels \(features=\), or "
                                              r"convert such images first \(PIL: "
                                              r"image.convert\('RGB'\), the pixels torchvision's "
                                              r"loader reads; the field's channels are those of "
                                              r"the first image\)"):
        convert(src, tmp_path / "out")


def test_a_palette_image_with_a_transparent_colour_is_named_in_words(tmp_path):
    src = folder(tmp_path / "src", {"a/0.png": png(9), "a/1.png": palette_png(0)})
    with pytest.raises(ConversionError, match=r"row 1 \(a/1.png\), field 'image': a palette image "
                                              r"with a transparent colour \(PIL mode P\), the "
                                              r"features say 3 channel\(s\)"):
        convert(src, tmp_path / "out")


def encoded(mode: str, colour: tuple[int, ...], fmt: str) -> bytes:
    out = io.BytesIO()
    Image.new(mode, (4, 4), colour).save(out, format=fmt)
    return out.getvalue()


def test_an_alpha_no_image_of_a_folder_uses_is_not_stored_and_jpegs_stay_jpegs(tmp_path):
    # a screenshot saved as an opaque RGBA PNG, sorted first, made the field RGBA and
    # re-encoded every photo of the folder as a PNG with alpha (5.6x the bytes on 20 photos)
    from array_record.python.array_record_module import ArrayRecordReader

    photo = encoded("RGB", (200, 100, 50), "JPEG")
    src = folder(tmp_path / "src", {"a/0.png": encoded("RGBA", (5, 6, 7, 255), "PNG"),
                                    "a/1.jpg": photo, "b/2.jpg": photo})
    info, _ = convert(src, tmp_path / "out")
    assert info.features["image"].shape == (4, 4, 3)
    images = read_dataset(tmp_path / "out")["image"]
    assert images[0].tolist() == [[[5, 6, 7]] * 4] * 4
    reader = ArrayRecordReader(str(next((tmp_path / "out").glob("*.array_record"))))
    assert [photo in record for record in reader.read_all()] == [False, True, True]


def test_an_alpha_a_later_image_uses_is_kept(tmp_path):
    src = folder(tmp_path / "src", {"a/0.png": encoded("RGBA", (5, 6, 7, 255), "PNG"),
                                    "a/1.jpg": encoded("RGB", (9, 9, 9), "JPEG"),
                                    "b/2.png": encoded("RGBA", (1, 2, 3, 0), "PNG")})
    info, _ = convert(src, tmp_path / "out")
    assert info.features["image"].shape == (4, 4, 4)
    assert read_dataset(tmp_path / "out")["image"][2, 0, 0].tolist() == [1, 2, 3, 0]


def image_column(kind: str, images: list[bytes], path) -> object:
    """``images`` as a column: a Hugging Face Parquet file (``Image`` structs), a plain
    Parquet binary column, or a Hugging Face ``Dataset``."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    if kind == "hf dataset":
        datasets = pytest.importorskip("datasets")
        return datasets.Dataset.from_dict({"image": [{"bytes": b, "path": None} for b in images]},
                                          features=datasets.Features({"image": datasets.Image()}))
    if kind == "hf parquet":
        column = pa.array([{"bytes": b, "path": None} for b in images],
                          pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
        meta = {"huggingface": json.dumps({"info": {"features": {"image": {"_type": "Image"}}}})}
        table = pa.table({"image": column}).replace_schema_metadata(meta)
    else:
        table = pa.table({"image": pa.array(images, pa.binary())})
    pq.write_table(table, path / "images.parquet", row_group_size=2)
    return str(path / "images.parquet")


@pytest.mark.parametrize("kind", ["hf parquet", "plain parquet", "hf dataset"])
def test_an_image_column_follows_the_folder_rule_for_an_alpha_no_image_uses(tmp_path, kind):
    from array_record.python.array_record_module import ArrayRecordReader

    photo = encoded("RGB", (200, 100, 50), "JPEG")
    opaque = encoded("RGBA", (5, 6, 7, 255), "PNG")
    info, _ = convert(image_column(kind, [opaque, photo, photo], tmp_path), tmp_path / "out")
    assert info.features["image"].shape == (4, 4, 3)
    assert read_dataset(tmp_path / "out")["image"][0].tolist() == [[[5, 6, 7]] * 4] * 4
    reader = ArrayRecordReader(str(next((tmp_path / "out").glob("*.array_record"))))
    assert [photo in record for record in reader.read_all()] == [False, True, True]
    # an alpha a later image uses (in another row group) is kept
    clear = encoded("RGBA", (1, 2, 3, 0), "PNG")
    info, _ = convert(image_column(kind, [opaque, photo, clear], tmp_path), tmp_path / "kept")
    assert info.features["image"].shape == (4, 4, 4)
    assert read_dataset(tmp_path / "kept")["image"][2, 0, 0].tolist() == [1, 2, 3, 0]
