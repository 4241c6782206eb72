"""Geometric image operators: resize, crops, flips, rotation, translation."""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from datarax.core import draws
from datarax.core.errors import ConfigError
from datarax.host.counts import python_ints
from datarax.host.crop_boxes import fallback_box
from datarax.operators.image._base import (
    ImageOperator,
    Range,
    cast_like,
    check_fill,
    check_flag,
    check_offset,
    check_range,
    check_size,
    is_range,
    python_numbers,
    sample,
    sample_word,
)

METHODS = ("nearest", "linear", "bilinear", "cubic", "bicubic", "lanczos3")


def _method(owner: str, method: str) -> str:
    if method not in METHODS:
        raise ConfigError(f"{owner}: method must be one of {list(METHODS)}, got {method!r}.")
    return {"bilinear": "linear", "bicubic": "cubic"}.get(method, method)


def _centres_and_support(start: Any, length: Any, out: int, antialias: bool) -> tuple[Any, Any]:
    start = jnp.asarray(start, jnp.float32)
    length = jnp.asarray(length, jnp.float32)
    scale = out / length
    support = jnp.maximum(1.0, 1.0 / scale) if antialias else jnp.float32(1.0)
    centres = start + (jnp.arange(out, dtype=jnp.float32) + 0.5) / scale - 0.5
    return centres, support


def _tent(taps: Any, centres: Any, support: Any, start: Any, length: Any) -> Any:
    """Normalised triangle weights of ``taps`` (one row per output pixel), box-clamped."""
    start = jnp.asarray(start, jnp.float32)
    length = jnp.asarray(length, jnp.float32)
    weights = jnp.maximum(0.0, 1.0 - jnp.abs(taps - centres[:, None]) / support)
    weights = jnp.where((taps >= start) & (taps < start + length), weights, 0.0)
    return weights / weights.sum(axis=1, keepdims=True)


@functools.partial(jax.jit, static_argnames=("out", "size", "antialias"))  # one compile when eager
def resize_weights(start: Any, length: Any, out: int, size: int, antialias: bool) -> Any:
    """``(out, size)`` bilinear weights that resample ``[start, start + length)`` to ``out``
    (half-pixel centres; antialiased shrinking widens the filter; as torchvision and PIL).

    Example:
        >>> resize_weights(0, 4, 2, 4, antialias=False).tolist()
        [[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.5, 0.5]]
    """
    centres, support = _centres_and_support(start, length, out, antialias)
    taps = jnp.arange(size, dtype=jnp.float32)[None, :]
    return _tent(taps, centres, support, start, length)


def tap_count(size: int, out: int, antialias: bool) -> int:
    """The most input pixels with non-zero weight in one output pixel of :func:`resize_weights`.

    Example:
        >>> tap_count(96, 64, antialias=True), tap_count(96, 64, antialias=False)
        (3, 2)
    """
    support = max(1.0, size / out) if antialias else 1.0
    return min(size, math.ceil(2 * support))


@functools.partial(jax.jit, static_argnames=("out", "size", "antialias", "count"))  # as above
def resize_taps(start: Any, length: Any, out: int, size: int, antialias: bool,
                count: int) -> tuple[Any, Any]:
    """The non-zero part of :func:`resize_weights`: ``(out, count)`` tap indices and weights,
    equal to the dense ones when ``count >= tap_count(size, out, antialias)``.

    Example:
        >>> idx, w = resize_taps(0, 4, 2, 4, antialias=False, count=2)
        >>> idx.tolist(), w.tolist()
        ([[0, 1], [2, 3]], [[0.5, 0.5], [0.5, 0.5]])
    """
    centres, support = _centres_and_support(start, length, out, antialias)
    # floor(centre - support) + 1: the first pixel past the filter's left edge
    first = (jnp.floor(centres - support) + 1).astype(jnp.int32)
    first = jnp.clip(first, 0, size - count)
    index = first[:, None] + jnp.arange(count, dtype=jnp.int32)[None, :]
    return index, _tent(index.astype(jnp.float32), centres, support, start, length)


MAX_SPARSE_TAPS = 16  # above it, dense matrix products win (and compile smaller)


def resize_plan(
    y: Any, x: Any, h: Any, w: Any, shape: tuple[int, ...], size: tuple[int, int],
    antialias: bool = True,
) -> tuple[Any, Any, Any, Any]:
    """``(rows, row_weights, cols, col_weights)`` resizing the box ``(y, x, h, w)`` to ``size``:
    sparse taps (:func:`resize_taps`), or past ``MAX_SPARSE_TAPS`` dense weights with ``None`` indices."""
    (out_h, out_w), (height, width) = size, shape[:2]
    ky, kx = tap_count(height, out_h, antialias), tap_count(width, out_w, antialias)
    if max(ky, kx) > MAX_SPARSE_TAPS:
        return (None, resize_weights(y, h, out_h, height, antialias), None,
                resize_weights(x, w, out_w, width, antialias))
    iy, wy = resize_taps(y, h, out_h, height, antialias, ky)
    ix, wx = resize_taps(x, w, out_w, width, antialias, kx)
    return iy, wy, ix, wx


def resample(image: Any, plan: tuple[Any, Any, Any, Any]) -> Any:
    """``image`` resampled by a :func:`resize_plan` (float32): sparse plans sum rows then
    columns tap by tap; dense plans are two matrix products."""
    iy, wy, ix, wx = plan
    image = jnp.asarray(image)
    if iy is None:
        values = image.astype(jnp.float32)
        rows = jnp.einsum("oh,hwc->owc", wy, values)  # (out_h, W, C)
        return jnp.einsum("pw,owc->opc", wx, rows)  # (out_h, out_w, C)
    # in bounds by construction: unsigned and promised, the gathers skip wrapping and clamping
    iy, ix = iy.astype(jnp.uint32), ix.astype(jnp.uint32)
    rows = None  # (out_h, W, C): whole input rows, contiguous, weighted by their taps
    for k in range(iy.shape[1]):
        term = wy[:, k, None, None] * image.at[iy[:, k]].get(mode="promise_in_bounds").astype(
            jnp.float32)
        rows = term if rows is None else rows + term
    out = None  # (out_h, out_w, C): the columns of those rows
    for j in range(ix.shape[1]):
        term = wx[None, :, j, None] * rows.at[:, ix[:, j]].get(mode="promise_in_bounds")
        out = term if out is None else out + term
    return out


class Resize(ImageOperator):
    """Resize every image to ``size`` (``jax.image.resize``).

    Example:
        >>> import jax.numpy as jnp
        >>> Resize(4).apply_batch({"image": jnp.ones((1, 8, 8, 3))}, None)["image"].shape
        (1, 4, 4, 3)
    """

    def __init__(self, size: int | tuple[int, int], *, method: str = "bilinear",
                 antialias: bool = True, field: str = "image", name: str | None = None) -> None:
        owner = "Resize"
        params = {"size": check_size(owner, size), "method": _method(owner, method),
                  "antialias": check_flag(owner, "antialias", antialias)}
        self._setup(params, stochastic=False, field=field, stream_name=None, rngs=None, name=name)

    def transform(self, image: Any, key: Any) -> Any:
        h, w = self.param("size")
        out = jax.image.resize(image.astype(jnp.float32), (h, w, image.shape[2]),
                               self.param("method"), antialias=self.param("antialias"))
        return cast_like(out, image.dtype)


class Crop(ImageOperator):
    """Crop ``size`` pixels at ``offset``: ``"random"`` (per record), ``"center"`` or ``(y, x)``.

    Example:
        >>> import jax.numpy as jnp
        >>> img = jnp.arange(16).reshape(1, 4, 4, 1)
        >>> Crop(2, offset=(1, 2)).apply_batch({"image": img}, None)["image"][0, :, :, 0].tolist()
        [[6, 7], [10, 11]]
    """

    def __init__(self, size: int | tuple[int, int], *, offset: Any = "random", field: str = "image",
                 stream_name: str | None = None, rngs: nnx.Rngs | None = None,
                 name: str | None = None) -> None:
        owner = type(self).__name__
        offset = check_offset(owner, offset, ("random", "center"), low=0)
        self._setup({"size": check_size(owner, size), "offset": offset},
                    stochastic=offset == "random", field=field, stream_name=stream_name,
                    rngs=rngs, name=name)

    def transform(self, image: Any, key: Any) -> Any:
        h, w = self.param("size")
        height, width = image.shape[0], image.shape[1]
        if h > height or w > width:
            raise ConfigError(
                f"{type(self).__name__} '{self.name}': crop size {(h, w)} is larger than the "
                f"images {(height, width)} of field '{self.config.field}'; give a size of at "
                f"most {(height, width)}, or put a Resize stage before it."
            )
        offset = self.param("offset")
        if offset == "random":
            word = draws.words(key, 2)
            y = draws.integer(word[0], 0, height - h + 1)
            x = draws.integer(word[1], 0, width - w + 1)
        elif offset == "center":
            y, x = (height - h) // 2, (width - w) // 2
        else:
            y, x = offset
            if y + h > height or x + w > width:
                raise ConfigError(
                    f"{type(self).__name__} '{self.name}': crop {(h, w)} at offset {(y, x)} "
                    f"reaches past the images {(height, width)}; keep y + height and "
                    "x + width within them."
                )
        return jax.lax.dynamic_slice(image, (y, x, 0), (h, w, image.shape[2]))


class RandomCrop(Crop):
    """:class:`Crop` at a random position per record."""

    def __init__(self, size: int | tuple[int, int], *, field: str = "image",
                 stream_name: str | None = None, rngs: nnx.Rngs | None = None,
                 name: str | None = None) -> None:
        super().__init__(size, offset="random", field=field, stream_name=stream_name,
                         rngs=rngs, name=name)


class _BoxResize(ImageOperator):
    """A box of each image resized by gathers (:func:`resample` of a :func:`resize_plan`)."""

    materialize = True

    def render(self, image: Any, plan: Any) -> Any:
        return resample(image, plan)


class ResizedCrop(_BoxResize):
    """Crop the box ``(y, x, height, width)`` and resize it to ``size`` (deterministic)."""

    def __init__(self, size: int | tuple[int, int], box: tuple[int, int, int, int], *,
                 antialias: bool = True, field: str = "image", name: str | None = None) -> None:
        owner = "ResizedCrop"
        box = python_ints(box)
        if not (isinstance(box, (tuple, list)) and len(box) == 4
                and all(isinstance(v, int) for v in box) and box[0] >= 0 and box[1] >= 0
                and box[2] >= 1 and box[3] >= 1):
            raise ConfigError(
                f"{owner}: box must be (y, x, height, width) ints with y, x >= 0 and "
                f"height, width >= 1, got {box!r}."
            )
        self._setup({"size": check_size(owner, size), "box": tuple(box),
                     "antialias": check_flag(owner, "antialias", antialias)},
                    stochastic=False, field=field, stream_name=None, rngs=None, name=name)

    def plan(self, shape: tuple[int, ...], key: Any) -> Any:
        y, x, h, w = self.param("box")
        if y + h > shape[0] or x + w > shape[1]:
            raise ConfigError(
                f"ResizedCrop '{self.name}': box {(y, x, h, w)} reaches past the images "
                f"{tuple(shape[:2])}; keep y + height and x + width within them."
            )
        return resize_plan(y, x, h, w, shape, self.param("size"), self.param("antialias"))


class RandomResizedCrop(_BoxResize):
    """Crop a random box of random area share and aspect ratio; resize it to ``size``.

    Of ten candidates (area share ``~ U(scale)``, ``log(ratio) ~ U(log ratio)``) the first
    that fits is used, at a uniformly random position; if none fits, the centred
    :func:`~datarax.host.crop_boxes.fallback_box` (as torchvision).
    """

    ATTEMPTS = 10

    def __init__(self, size: int | tuple[int, int], *, scale: Range = (0.08, 1.0),
                 ratio: Range = (3 / 4, 4 / 3), antialias: bool = True, field: str = "image",
                 stream_name: str | None = None, rngs: nnx.Rngs | None = None,
                 name: str | None = None) -> None:
        owner = "RandomResizedCrop"
        scale = check_range(owner, "scale", scale, low=1e-6, high=1.0)
        ratio = check_range(owner, "ratio", ratio, low=1e-6)
        self._setup({"size": check_size(owner, size), "scale": scale, "ratio": ratio,
                     "antialias": check_flag(owner, "antialias", antialias)},
                    stochastic=True, field=field, stream_name=stream_name, rngs=rngs, name=name)

    def box(self, key: Any, height: int, width: int) -> tuple[Any, Any, Any, Any]:
        """The record's box ``(y, x, h, w)`` (integers)."""
        scale, ratio = self.param("scale"), self.param("ratio")
        lo_s, hi_s = scale if is_range(scale) else (scale, scale)
        lo_r, hi_r = ratio if is_range(ratio) else (ratio, ratio)
        tries = self.ATTEMPTS
        word = draws.words(key, 2 * tries + 2)  # areas, ratios, y, x: one draw
        area = height * width * draws.uniform(word[:tries], lo_s, hi_s)
        log_r = draws.uniform(word[tries:2 * tries], math.log(lo_r), math.log(hi_r))
        r = jnp.exp(log_r)
        w = jnp.round(jnp.sqrt(area * r)).astype(jnp.int32)
        h = jnp.round(jnp.sqrt(area / r)).astype(jnp.int32)
        fits = (w >= 1) & (h >= 1) & (w <= width) & (h <= height)
        first = jnp.argmax(fits)
        ok = fits[first]
        fy, fx, fh, fw = fallback_box(height, width, lo_r, hi_r)
        h = jnp.where(ok, h[first], fh)
        w = jnp.where(ok, w[first], fw)
        y = jnp.where(ok, draws.integer(word[-2], 0, height - h + 1), fy)
        x = jnp.where(ok, draws.integer(word[-1], 0, width - w + 1), fx)
        return y, x, h, w

    def plan(self, shape: tuple[int, ...], key: Any) -> Any:
        y, x, h, w = self.box(key, shape[0], shape[1])
        return resize_plan(y, x, h, w, shape, self.param("size"), self.param("antialias"))


class _Flip(ImageOperator):
    AXIS = 1

    def __init__(self, probability: float = 0.5, *, field: str = "image",
                 stream_name: str | None = None, rngs: nnx.Rngs | None = None,
                 name: str | None = None) -> None:
        probability = python_numbers(probability)
        if not isinstance(probability, (int, float)) or isinstance(probability, bool):
            raise ConfigError(f"{type(self).__name__}: probability must be one number in "
                              f"[0, 1], got {probability!r}.")
        p = check_range(type(self).__name__, "probability", probability, low=0.0, high=1.0)
        self._setup({"probability": p}, stochastic=0.0 < p < 1.0, field=field,
                    stream_name=stream_name, rngs=rngs, name=name)

    def _flip(self, image: Any) -> Any:
        return jnp.flip(image, axis=-2 if self.AXIS == 1 else -3)

    def transform(self, image: Any, key: Any) -> Any:
        p = self.param("probability")
        if p == 1.0:
            return self._flip(image)
        if p == 0.0:
            return image
        return jnp.where(draws.uniform(draws.words(key, 1)[0]) < p, self._flip(image), image)


class HorizontalFlip(_Flip):
    """Mirror left-right with ``probability`` per record (1.0: always; deterministic)."""

    AXIS = 1


class VerticalFlip(_Flip):
    """Mirror top-bottom with ``probability`` per record (1.0: always; deterministic)."""

    AXIS = 0


def _cos_sin(degrees: Any) -> tuple[Any, Any]:
    """``cos`` and ``sin`` of ``degrees``, exact at multiples of 90°."""
    degrees = jnp.asarray(degrees, jnp.float32)
    quarters = jnp.round(degrees / 90.0)
    rest = (degrees - 90.0 * quarters) * (math.pi / 180.0)
    c, s = jnp.cos(rest), jnp.sin(rest)
    q = jnp.mod(quarters.astype(jnp.int32), 4)
    cos = jnp.select([q == 0, q == 1, q == 2], [c, -s, -c], s)
    sin = jnp.select([q == 0, q == 1, q == 2], [s, c, -s], -c)
    return cos, sin


@jax.jit  # one compile when eager
def rotate(image: Any, degrees: Any, fill: float = 0.0) -> Any:
    """``image`` (H, W, C) rotated counter-clockwise by ``degrees`` about its centre (float32,
    :func:`sample_at`); multiples of 90° move pixels exactly; uncovered pixels are ``fill``.

    Example:
        >>> import jax.numpy as jnp
        >>> img = jnp.arange(1.0, 5.0).reshape(2, 2, 1)
        >>> rotate(img, 90.0)[..., 0].tolist()
        [[2.0, 4.0], [1.0, 3.0]]
    """
    height, width = image.shape[0], image.shape[1]
    cos, sin = _cos_sin(degrees)
    dy = jnp.arange(height, dtype=jnp.float32)[:, None] - (height - 1) / 2.0
    dx = jnp.arange(width, dtype=jnp.float32)[None, :] - (width - 1) / 2.0
    sy = (height - 1) / 2.0 + cos * dy + sin * dx
    sx = (width - 1) / 2.0 - sin * dy + cos * dx
    return sample_at(image, sy, sx, fill)


@jax.jit  # one compile when eager
def sample_at(image: Any, sy: Any, sx: Any, fill: float = 0.0) -> Any:
    """``image`` (H, W, C) read bilinearly at source coordinates ``(sy, sx)`` (float32).

    A tap outside the image reads ``fill`` (the edge blends into it, as in torchvision).

    Example:
        >>> import jax.numpy as jnp
        >>> img = jnp.array([[[0.0], [10.0]]])
        >>> sample_at(img, jnp.zeros((1, 3)), jnp.array([[0.25, 1.0, 1.5]]))[..., 0].tolist()
        [[2.5, 10.0, 5.0]]
    """
    height, width = image.shape[0], image.shape[1]
    sy = jnp.broadcast_to(jnp.asarray(sy, jnp.float32), jnp.broadcast_shapes(
        jnp.shape(sy), jnp.shape(sx)))
    sx = jnp.broadcast_to(jnp.asarray(sx, jnp.float32), sy.shape)
    y0, x0 = jnp.floor(sy), jnp.floor(sx)
    fy, fx = (sy - y0)[..., None], (sx - x0)[..., None]
    y0, x0 = y0.astype(jnp.int32), x0.astype(jnp.int32)
    values = image.astype(jnp.float32)
    fill_value = jnp.float32(fill)

    def tap(y: Any, x: Any) -> Any:
        inside = (y >= 0) & (y < height) & (x >= 0) & (x < width)
        read = values[jnp.clip(y, 0, height - 1), jnp.clip(x, 0, width - 1)]
        return jnp.where(inside[..., None], read, fill_value)

    top = tap(y0, x0) * (1.0 - fx) + tap(y0, x0 + 1) * fx
    bottom = tap(y0 + 1, x0) * (1.0 - fx) + tap(y0 + 1, x0 + 1) * fx
    return top * (1.0 - fy) + bottom * fy


class Rotate(ImageOperator):
    """Rotate by ``degrees`` (counter-clockwise; number or range) about the centre (:func:`rotate`).

    Example:
        >>> import jax.numpy as jnp
        >>> img = jnp.arange(1, 10, dtype=jnp.uint8).reshape(1, 3, 3, 1)
        >>> Rotate(90.0).apply_batch({"image": img}, None)["image"][0, ..., 0].tolist()
        [[3, 6, 9], [2, 5, 8], [1, 4, 7]]
    """

    def __init__(self, degrees: Range, *, fill: float = 0.0, field: str = "image",
                 stream_name: str | None = None, rngs: nnx.Rngs | None = None,
                 name: str | None = None) -> None:
        d = check_range("Rotate", "degrees", degrees)
        self._setup({"degrees": d, "fill": check_fill("Rotate", fill)}, stochastic=is_range(d), field=field,
                    stream_name=stream_name, rngs=rngs, name=name)

    def transform(self, image: Any, key: Any) -> Any:
        out = rotate(image, sample(key, self.param("degrees")), self.param("fill"))
        return cast_like(out, image.dtype)


def shift(image: Any, dy: Any, dx: Any, fill: float = 0.0) -> Any:
    """``image`` moved down ``dy`` and right ``dx`` whole pixels; uncovered pixels = ``fill``."""
    height, width = image.shape[0], image.shape[1]
    # aranges of the shifts' dtype: a user's strict promotion refuses int64 (x64) vs int32
    rows = jnp.arange(height, dtype=jnp.asarray(dy).dtype) - dy
    cols = jnp.arange(width, dtype=jnp.asarray(dx).dtype) - dx
    inside = ((rows >= 0) & (rows < height))[:, None] & ((cols >= 0) & (cols < width))[None, :]
    moved = image[jnp.clip(rows, 0, height - 1)][:, jnp.clip(cols, 0, width - 1)]
    return jnp.where(inside[..., None], moved, cast_like(jnp.float32(fill), image.dtype))


class Translate(ImageOperator):
    """Shift by ``dy`` rows and ``dx`` columns (whole pixels; each a number or range)."""

    def __init__(self, dy: Range = 0, dx: Range = 0, *, fill: float = 0.0, field: str = "image",
                 stream_name: str | None = None, rngs: nnx.Rngs | None = None,
                 name: str | None = None) -> None:
        dy = check_range("Translate", "dy", dy)
        dx = check_range("Translate", "dx", dx)
        self._setup({"dy": dy, "dx": dx, "fill": check_fill("Translate", fill)},
                    stochastic=is_range(dy) or is_range(dx), field=field,
                    stream_name=stream_name, rngs=rngs, name=name)

    def transform(self, image: Any, key: Any) -> Any:
        word = (None, None) if key is None else draws.words(key, 2)
        dy = jnp.round(sample_word(word[0], self.param("dy"))).astype(jnp.int32)
        dx = jnp.round(sample_word(word[1], self.param("dx"))).astype(jnp.int32)
        return shift(image, dy, dx, self.param("fill"))
