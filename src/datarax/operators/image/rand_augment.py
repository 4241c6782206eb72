"""``RandAugment``: ``num_ops`` operations drawn per record, each at strength ``magnitude``.

The operations (each with a random sign where it has one), at ``m = magnitude / 30``:
identity, brightness ``±0.4 m``, contrast ``1 ± 0.9 m``, saturation ``1 ± 0.9 m``,
rotate ``±30 m`` degrees, translate x/y ``±0.45 m`` of the side, shear x/y ``±0.3 m``,
solarize (threshold ``1 - m``), posterize (``8 - round(4 m)`` bits), autocontrast.
Choice and sign come from the record's key; one ``lax.switch`` per operation.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from datarax.core import draws
from datarax.core.config import check_count
from datarax.core.errors import ConfigError
from datarax.operators.image._base import (
    ImageOperator,
    Range,
    check_fill,
    check_range,
    from_unit,
    pix,
    sample_word,
    to_unit,
)
from datarax.operators.image.geometry import rotate, sample_at, shift


def _shear(image: Any, amount: Any, axis: int, fill: float) -> Any:
    """Shear about the centre: ``x_in = x + amount * (y - cy)`` (axis 1) or the transpose."""
    height, width = image.shape[0], image.shape[1]
    y = jnp.arange(height, dtype=jnp.float32)[:, None]
    x = jnp.arange(width, dtype=jnp.float32)[None, :]
    if axis == 1:
        return sample_at(image, y, x + amount * (y - (height - 1) / 2.0), fill)
    return sample_at(image, y + amount * (x - (width - 1) / 2.0), x, fill)


def _autocontrast(image: Any) -> Any:
    low = image.min(axis=(0, 1), keepdims=True)
    high = image.max(axis=(0, 1), keepdims=True)
    span = jnp.where(high > low, high - low, 1.0)
    return jnp.where(high > low, (image - low) / span, image)


def _posterize(image: Any, bits: Any) -> Any:
    levels = 2.0 ** bits
    return jnp.floor(jnp.clip(image, 0.0, 1.0) * (levels - 1) + 0.5) / (levels - 1)


def operations(fill: float) -> list[tuple[str, Any]]:
    """``(name, fn(image_in_unit_range, m, sign))`` of every RandAugment operation."""
    px = pix

    def rotate_by(im: Any, m: Any, s: Any) -> Any:
        return rotate(im, s * 30.0 * m, fill)

    def saturation(im: Any, m: Any, s: Any) -> Any:
        if im.shape[-1] != 3:  # no colour to saturate: one-channel images pass
            return im
        return px().adjust_saturation(im, 1.0 + s * 0.9 * m)

    def translate(axis: int) -> Any:
        def fn(im: Any, m: Any, s: Any) -> Any:
            d = jnp.round(s * 0.45 * m * im.shape[axis]).astype(jnp.int32)
            return shift(im, d if axis == 0 else 0, d if axis == 1 else 0, fill)

        return fn

    return [
        ("identity", lambda im, m, s: im),
        ("brightness", lambda im, m, s: px().adjust_brightness(im, s * 0.4 * m)),
        ("contrast", lambda im, m, s: px().adjust_contrast(im, 1.0 + s * 0.9 * m)),
        ("saturation", saturation),
        ("rotate", rotate_by),
        ("translate_x", translate(1)),
        ("translate_y", translate(0)),
        ("shear_x", lambda im, m, s: _shear(im, s * 0.3 * m, 1, fill)),
        ("shear_y", lambda im, m, s: _shear(im, s * 0.3 * m, 0, fill)),
        ("solarize", lambda im, m, s: px().solarize(im, 1.0 - m)),
        ("posterize", lambda im, m, s: _posterize(im, 8.0 - jnp.round(4.0 * m))),
        ("autocontrast", lambda im, m, s: _autocontrast(im)),
    ]


OPERATION_NAMES = tuple(name for name, _ in operations(0.0))


class RandAugment(ImageOperator):
    """Apply ``num_ops`` operations, each drawn uniformly per record, at ``magnitude``.

    ``magnitude`` is in [0, 30] (number or range). The operations work on values in
    [0, 1], so ``fill`` is in [0, 1] for uint8 images too.
    """

    unit_values = True

    def __init__(self, num_ops: int = 2, magnitude: Range = 9.0, *, fill: float = 0.0,
                 field: str = "image", stream_name: str | None = None,
                 rngs: nnx.Rngs | None = None, name: str | None = None) -> None:
        num_ops = check_count(num_ops, "RandAugment: num_ops", 0)
        mag = check_range("RandAugment", "magnitude", magnitude, low=0.0, high=30.0)
        fill = check_fill("RandAugment", fill)
        if not 0.0 <= fill <= 1.0:
            raise ConfigError(
                f"RandAugment: fill is on the [0, 1] scale its operations work on, for uint8 "
                f"images too; got {fill:g}. For a uint8 level give level / 255 (128 -> "
                f"{128 / 255:.3f})."
            )
        self._setup({"num_ops": num_ops, "magnitude": mag, "fill": fill},
                    stochastic=True, field=field, stream_name=stream_name, rngs=rngs, name=name)

    def transform(self, image: Any, key: Any) -> Any:
        ops = [fn for _, fn in operations(self.param("fill"))]
        word = draws.words(key, 1 + 2 * self.param("num_ops"))  # magnitude, (op, sign)s
        m = sample_word(word[0], self.param("magnitude")) / 30.0
        values = to_unit(image).astype(jnp.float32)  # every operation's branch in float32
        for n in range(self.param("num_ops")):
            index = draws.integer(word[1 + 2 * n], 0, len(ops))
            sign = jnp.where(draws.unit(word[2 + 2 * n]) < 0.5, 1.0, -1.0)
            values = jax.lax.switch(index, ops, values, m, sign)
        return from_unit(values, image.dtype)


__all__ = ["OPERATION_NAMES", "RandAugment"]
