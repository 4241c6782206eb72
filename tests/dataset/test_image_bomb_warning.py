"""Pillow's decompression-bomb warning names the image it is about (a file, a row and
field, a record), and its error goes through the error paths that name the record;
Pillow's own limit and the warnings filters are left as they were."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

from datarax.dataset.fields import read_encoded_image
from datarax.errors import RecordError
from datarax.sources import decode_images

Image = pytest.importorskip("PIL.Image")


def png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("L", (width, height), 90).save(out, "PNG")
    return out.getvalue()


@pytest.fixture
def limit_1000(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pillow's limit lowered for the test alone (restored after it)."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)


def test_an_oversized_record_warns_naming_its_field_and_record_and_is_decoded(limit_1000):
    filters = list(warnings.filters)
    with pytest.warns(Image.DecompressionBombWarning) as caught:
        image = decode_images(resize=8, crop=8).decode_image(png(40, 30), 7)
    assert image.shape == (8, 8, 3) and int(image[0, 0, 0]) == 90
    messages = [str(w.message) for w in caught]
    assert messages and all(m.startswith(
        "field 'image' of record 7: Image size (1200 pixels) exceeds limit of 1000 pixels")
        for m in messages), messages
    assert "raise that limit if such images are expected" in messages[0]
    assert warnings.filters == filters and Image.MAX_IMAGE_PIXELS == 1000


def test_an_image_being_converted_warns_naming_its_row_field_and_file(limit_1000):
    value = {"bytes": png(40, 30), "path": "cats/001.png"}
    with pytest.warns(Image.DecompressionBombWarning) as caught:
        data, image = read_encoded_image("image", value, row=3)
    assert image.size == (40, 30) and data == value["bytes"]
    assert [str(w.message).split(": Image size")[0] for w in caught] == [
        "row 3, field 'image' (file cats/001.png)"]


def test_an_image_over_twice_the_limit_is_a_record_error_not_a_warning(limit_1000):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning at all, Pillow's or ours
        with pytest.raises(RecordError, match=r"field 'image': cannot decode the image "
                           r"\(DecompressionBombError: Image size \(2500 pixels\) exceeds "
                           r"limit of 2000 pixels"):
            decode_images(resize=8, crop=8).decode_image(png(50, 50), 0)


def test_an_image_within_the_limit_warns_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        image = decode_images(resize=8, crop=8).decode_image(png(40, 30), 0)
    assert np.asarray(image).shape == (8, 8, 3)
