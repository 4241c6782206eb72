"""``convert(..., resize=)`` (``--resize``): an image of
more than 8 bits per channel is refused as without a resize, not clipped in silence; the
splits of SRC left out are recorded as without a resize."""

from __future__ import annotations

import numpy as np
import pytest
from dataset_helpers import read_dataset

from datarax.dataset import ConversionError, convert

Image = pytest.importorskip("PIL.Image")


@pytest.mark.parametrize("resize", [2, (2, 2)])
def test_a_16_bit_image_resized_is_refused_not_clipped(tmp_path, resize) -> None:
    (tmp_path / "im" / "a").mkdir(parents=True)
    Image.fromarray(np.full((4, 4), 1000, np.uint16)).save(tmp_path / "im" / "a" / "deep.png")
    with pytest.raises(ConversionError, match=r"row 0 \(a/deep.png\), field 'image': a 16-bit grey "
                                              r"image \(values 1000..1000\); image fields hold "
                                              r"8 bits"):
        convert(str(tmp_path / "im"), tmp_path / "d", resize=resize)


def test_a_16_bit_image_whose_values_fit_8_bits_is_resized(tmp_path) -> None:
    (tmp_path / "im" / "a").mkdir(parents=True)
    Image.fromarray(np.full((4, 6), 200, np.uint16)).save(tmp_path / "im" / "a" / "deep.png")
    info, _ = convert(str(tmp_path / "im"), tmp_path / "d", resize=2)
    assert info.features["image"].shape == (2, 3, 1)  # every image of one size: one size
    assert read_dataset(tmp_path / "d")["image"][0].tolist() == [[[200]] * 3] * 2


def test_resized_table_files_of_several_splits_record_the_splits_left_out(tmp_path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    from dataset_helpers import png

    (tmp_path / "data").mkdir()
    for split in ("train", "test"):
        pq.write_table(pa.table({"image": [png(i, 8) for i in range(3)], "label": [0, 1, 2]}),
                       tmp_path / "data" / f"{split}-00000.parquet")
    info, _ = convert(str(tmp_path / "data"), tmp_path / "d", resize=4)
    assert info.features["image"].shape == (4, 4, 3) and info.num_records == 3
    assert (info.extra["split"], info.extra["other_splits"], info.extra["resize"]) == (
        "train", ["test"], 4)


def test_a_resize_of_records_without_encoded_images_is_refused(tmp_path) -> None:
    # arrays of pixels (.npy) or text: nothing is resized, and the metadata said resize
    from datarax.errors import ConfigError

    (tmp_path / "npy").mkdir()
    np.save(tmp_path / "npy" / "image.npy", np.zeros((3, 8, 8, 3), np.uint8))
    with pytest.raises(ConfigError, match=r"resizes encoded images .*, and the first record of "
                                          r"numpy files .*image.npy holds none \(image: uint8 "
                                          r"array \(8, 8, 3\)\); leave out resize"):
        convert(str(tmp_path / "npy"), tmp_path / "d", resize=4)
    assert not (tmp_path / "d").exists()


def test_a_transparent_background_keeps_its_colour_when_resized(tmp_path) -> None:
    # Pillow's RGBA resize weighs colour by alpha: the white under transparent pixels
    # turned black, where decode_images (torchvision's loader) shows the stored colour
    pixels = np.full((40, 40, 4), 255, np.uint8)
    pixels[..., 3] = 0
    pixels[10:30, 10:30] = (200, 0, 0, 255)
    (tmp_path / "im" / "a").mkdir(parents=True)
    logo = Image.fromarray(pixels, "RGBA")
    logo.save(tmp_path / "im" / "a" / "logo.png")
    convert(str(tmp_path / "im"), tmp_path / "d", resize=(20, 20))
    got = read_dataset(tmp_path / "d")["image"][0]
    colour = logo.convert("RGB").resize((20, 20), Image.Resampling.BILINEAR)
    alpha = logo.getchannel("A").resize((20, 20), Image.Resampling.BILINEAR)
    assert got.shape == (20, 20, 4) and got[0, 0].tolist() == [255, 255, 255, 0]
    assert np.array_equal(got[..., :3], np.asarray(colour))
    assert np.array_equal(got[..., 3], np.asarray(alpha))
