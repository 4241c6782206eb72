"""Rotate: multiples of 90° move pixels exactly (np.rot90), other angles keep every
border pixel whose source lies inside the image (against SciPy in float64)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import ndimage

from datarax.operators import image as I
from datarax.operators.image.geometry import rotate

RNG = np.random.default_rng(7)


ROTATE = jax.jit(jax.vmap(rotate, in_axes=(0, None)))


def rotated(images, degrees):
    """``rotate`` over a batch with a traced angle: one compilation per shape and dtype."""
    out = ROTATE(jnp.asarray(images), jnp.float32(degrees))
    if images.dtype == np.uint8:
        return np.asarray(jnp.clip(jnp.round(out), 0, 255).astype(jnp.uint8))
    return np.asarray(out)


def on_canvas(image, k):
    """``np.rot90(image, k)`` centred on an ``H × W`` canvas of zeros (same-parity sides)."""
    r = np.rot90(image, k)
    out = np.zeros_like(image)
    (h, w), (rh, rw) = image.shape[:2], r.shape[:2]
    oy, ox = (h - rh) // 2, (w - rw) // 2
    ys, xs = slice(max(oy, 0), max(oy, 0) + min(h, rh)), slice(max(ox, 0), max(ox, 0) + min(w, rw))
    ry, rx = slice(max(-oy, 0), max(-oy, 0) + min(h, rh)), slice(max(-ox, 0), max(-ox, 0) + min(w, rw))
    out[ys, xs] = r[ry, rx]
    return out


def test_rotate_90_keeps_the_border_as_numpy_rot90():
    image = jnp.arange(1, 26, dtype=jnp.float32).reshape(1, 5, 5, 1)
    out = np.asarray(jax.jit(I.Rotate(90.0).apply_batch)({"image": image}, None)["image"])
    np.testing.assert_array_equal(out[0, ..., 0], np.rot90(np.arange(1, 26).reshape(5, 5)))
    assert out[0, 3, 0, 0] == 2 and out[0, 4, 0, 0] == 1


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_multiples_of_90_equal_np_rot90_exactly(dtype):
    square = RNG.integers(0, 256, (2, 17, 17, 3)) if dtype == np.uint8 else RNG.random((2, 17, 17, 3))
    square = square.astype(dtype)
    for degrees, k in [(90.0, 1), (180.0, 2), (-90.0, 3), (270.0, 3), (360.0, 0), (-450.0, 3)]:
        np.testing.assert_array_equal(rotated(square, degrees), np.rot90(square, k, axes=(1, 2)))


def test_non_square_images_keep_their_shape_with_rot90_centred_on_them():
    tall = RNG.integers(0, 256, (1, 17, 23, 1)).astype(np.uint8)
    for degrees, k in [(90.0, 1), (180.0, 2), (-90.0, 3)]:
        out = rotated(tall, degrees)
        assert out.shape == tall.shape
        np.testing.assert_array_equal(out[0], on_canvas(tall[0], k))


def scipy_rotation(image, degrees, mode):
    t = math.radians(degrees)
    h, w = image.shape[:2]
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    dy, dx = yy - (h - 1) / 2, xx - (w - 1) / 2
    sy = (h - 1) / 2 + math.cos(t) * dy + math.sin(t) * dx
    sx = (w - 1) / 2 - math.sin(t) * dy + math.cos(t) * dx
    out = np.stack([ndimage.map_coordinates(image[..., c].astype(np.float64), [sy, sx], order=1,
                                            mode=mode, cval=0.0) for c in range(image.shape[-1])], -1)
    inside = (sy >= 0) & (sy <= h - 1) & (sx >= 0) & (sx <= w - 1)
    return out, inside


def test_other_angles_match_scipy_and_keep_border_pixels_that_map_inside():
    image = RNG.random((1, 17, 23, 3)).astype(np.float32)
    # 9 and 7.3 degrees put some source coordinates within 1e-4 pixel of a pixel centre,
    # where rounding them to it was 1e-4 off
    for degrees in (30.0, -17.5, 135.0, 9.0, -9.0, 7.3):
        out = rotated(image, degrees)[0]
        blended, _ = scipy_rotation(image[0], degrees, "grid-constant")
        np.testing.assert_allclose(out, blended, atol=1e-5)
        nearest, inside = scipy_rotation(image[0], degrees, "nearest")
        np.testing.assert_allclose(out[inside], nearest[inside], atol=1e-5)
        assert inside.sum() > 200
