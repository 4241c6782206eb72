"""``decode_images`` gives PIL's RGB (torchvision's loader's pixels) for a JPEG of every
colour mode: grey, RGB, progressive and CMYK (libjpeg-turbo's RGB of a CMYK JPEG differs
from Pillow's by a level, so Pillow decodes those)."""

from __future__ import annotations

import io

import numpy as np
import pytest

PIL_Image = pytest.importorskip("PIL.Image")

from datarax import decode_images  # noqa: E402


def jpeg(mode: str, **options) -> bytes:
    rng = np.random.default_rng(3)
    image = PIL_Image.fromarray(rng.integers(0, 256, (20, 40, 3), dtype=np.uint8)).convert(mode)
    out = io.BytesIO()
    image.save(out, format="JPEG", **options)
    return out.getvalue()


@pytest.mark.parametrize("mode, options", [("L", {}), ("RGB", {}),
                                           ("RGB", {"progressive": True}), ("CMYK", {})])
@pytest.mark.parametrize("decode", [{"resize": (16, 16), "draft": False},
                                    {"random_resized_crop": 8, "draft": False}])
def test_every_jpeg_colour_mode_decodes_to_pils_rgb(mode, options, decode, monkeypatch):
    data = jpeg(mode, **options)
    got = decode_images("image", **decode).decode_record(data, index=2, epoch=0)["image"]
    rgb = PIL_Image.open(io.BytesIO(data)).convert("RGB")
    if "resize" in decode:
        want = np.asarray(rgb.resize((16, 16), PIL_Image.Resampling.BILINEAR))
    else:  # the same box through Pillow alone: the decoder without simplejpeg
        from datarax.dataset import image_decode

        monkeypatch.setattr(image_decode, "_simplejpeg", lambda: None)
        want = decode_images("image", **decode).decode_record(data, index=2, epoch=0)["image"]
    np.testing.assert_array_equal(got, want)
