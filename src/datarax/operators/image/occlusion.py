"""Noise and occlusion: gaussian and salt-and-pepper noise, cutout, patch dropout."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from datarax.core import draws
from datarax.core.errors import ConfigError
from datarax.operators.image._base import (
    ImageOperator,
    Range,
    cast_like,
    check_fill,
    check_offset,
    check_range,
    check_size,
    from_unit,
    sample,
    to_unit,
)


class GaussianNoise(ImageOperator):
    """Add ``N(0, std**2)`` noise per value (``std`` a number or range; values in [0, 1])."""

    unit_values = True

    def __init__(self, std: Range, *, field: str = "image", stream_name: str | None = None,
                 rngs: nnx.Rngs | None = None, name: str | None = None) -> None:
        s = check_range("GaussianNoise", "std", std, low=0.0)
        self._setup({"std": s}, stochastic=True, field=field, stream_name=stream_name,
                    rngs=rngs, name=name)

    def transform(self, image: Any, key: Any) -> Any:
        std = sample(key, self.param("std"))
        noise = std * jax.random.normal(key, image.shape, jnp.float32)
        return from_unit(to_unit(image) + noise, image.dtype)


class SaltPepperNoise(ImageOperator):
    """Set a share ``amount`` of pixels (all channels) to 0 or to the maximum, half each."""

    unit_values = True

    def __init__(self, amount: Range, *, field: str = "image", stream_name: str | None = None,
                 rngs: nnx.Rngs | None = None, name: str | None = None) -> None:
        a = check_range("SaltPepperNoise", "amount", amount, low=0.0, high=1.0)
        self._setup({"amount": a}, stochastic=True, field=field, stream_name=stream_name,
                    rngs=rngs, name=name)

    def transform(self, image: Any, key: Any) -> Any:
        amount = sample(key, self.param("amount"))
        u = jax.random.uniform(key, image.shape[:2])
        amount = amount.astype(u.dtype)  # float64 under x64: strict promotion refuses a mix
        values = to_unit(image)
        values = jnp.where((u < amount / 2)[..., None], 0.0, values)
        values = jnp.where(((u >= amount / 2) & (u < amount))[..., None], 1.0, values)
        return from_unit(values, image.dtype)


class Cutout(ImageOperator):
    """Fill a ``size`` box with ``fill``, at ``offset``: ``"random"`` (per record) or ``(y, x)``.

    A random box's centre is uniform over the image; boxes are clipped at the edges.
    """

    def __init__(self, size: int | tuple[int, int], *, offset: Any = "random", fill: float = 0.0,
                 field: str = "image", stream_name: str | None = None,
                 rngs: nnx.Rngs | None = None, name: str | None = None) -> None:
        offset = check_offset("Cutout", offset, ("random",))
        self._setup({"size": check_size("Cutout", size), "offset": offset,
                     "fill": check_fill("Cutout", fill)},
                    stochastic=offset == "random", field=field, stream_name=stream_name,
                    rngs=rngs, name=name)

    def transform(self, image: Any, key: Any) -> Any:
        h, w = self.param("size")
        height, width = image.shape[0], image.shape[1]
        if self.param("offset") == "random":
            word = draws.words(key, 2)
            cy, cx = draws.integer(word[0], 0, height), draws.integer(word[1], 0, width)
            y, x = cy - h // 2, cx - w // 2
        else:
            y, x = self.param("offset")
            if y >= height or x >= width or y + h <= 0 or x + w <= 0:
                raise ConfigError(
                    f"Cutout '{self.name}': box {(h, w)} at offset {(y, x)} misses the images "
                    f"{(height, width)}, so it would fill nothing; give an offset whose box "
                    "overlaps them (a box past an edge is clipped)."
                )
        # aranges of the box's dtype: a user's strict promotion refuses int64 (x64) vs int32
        ys = jnp.arange(height, dtype=jnp.asarray(y).dtype)
        xs = jnp.arange(width, dtype=jnp.asarray(x).dtype)
        rows = (ys >= y) & (ys < y + h)
        cols = (xs >= x) & (xs < x + w)
        box = rows[:, None] & cols[None, :]
        fill = cast_like(jnp.float32(self.param("fill")), image.dtype)
        return jnp.where(box[..., None], fill, image)


class PatchDropout(ImageOperator):
    """Fill each ``patch_size`` patch with ``fill`` with probability ``rate`` (per record)."""

    def __init__(self, patch_size: int | tuple[int, int], rate: float = 0.25, *,
                 fill: float = 0.0, field: str = "image", stream_name: str | None = None,
                 rngs: nnx.Rngs | None = None, name: str | None = None) -> None:
        r = check_range("PatchDropout", "rate", rate, low=0.0, high=1.0)
        self._setup({"patch_size": check_size("PatchDropout", patch_size, "patch_size"),
                     "rate": r, "fill": check_fill("PatchDropout", fill)},
                    stochastic=True, field=field, stream_name=stream_name, rngs=rngs, name=name)

    def transform(self, image: Any, key: Any) -> Any:
        ph, pw = self.param("patch_size")
        height, width = image.shape[0], image.shape[1]
        grid = (-(-height // ph), -(-width // pw))
        rate = sample(key, self.param("rate"))
        u = jax.random.uniform(key, grid)
        drop = u < rate.astype(u.dtype)  # float64 under x64: strict promotion refuses a mix
        mask = jnp.repeat(jnp.repeat(drop, ph, axis=0), pw, axis=1)[:height, :width]
        fill = cast_like(jnp.float32(self.param("fill")), image.dtype)
        return jnp.where(mask[..., None], fill, image)
