"""Colour image operators: brightness, contrast, saturation, hue, grayscale, gaussian
blur (dm-pix's definitions; saturation, hue, grayscale and blur call dm-pix), and
normalize."""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp
from flax import nnx

from datarax.core.errors import ConfigError, DataraxError
from datarax.host.counts import count_words, python_ints
from datarax.operators.image._base import (
    ImageOperator,
    Range,
    cast_like,
    check_range,
    from_unit,
    is_range,
    pix,
    sample,
    to_unit,
)


class _ColorOperator(ImageOperator):
    """One parameter ``PARAM`` (by position or name); ``adjust(values_in_unit_range, value)``."""

    unit_values = True

    PARAM = ""
    LOW: float | None = None
    HIGH: float | None = None

    def __init__(self, value: Range | None = None, *, field: str = "image",
                 stream_name: str | None = None, rngs: nnx.Rngs | None = None,
                 name: str | None = None, **named: Range) -> None:
        owner = type(self).__name__
        if set(named) - {self.PARAM}:
            raise ConfigError(
                f"{owner} got unknown argument(s) {sorted(set(named) - {self.PARAM})}; its "
                f"parameter is {self.PARAM}."
            )
        if (value is None) == (self.PARAM not in named):
            raise ConfigError(
                f"{owner} needs {self.PARAM} once: a number or a (low, high) range, e.g. "
                f"{owner}({self.PARAM}=0.2)."
            )
        value = named.get(self.PARAM, value)
        v = check_range(owner, self.PARAM, value, low=self.LOW, high=self.HIGH)
        self._setup({self.PARAM: v}, stochastic=is_range(v), field=field,
                    stream_name=stream_name, rngs=rngs, name=name)

    def adjust(self, values: Any, amount: Any) -> Any:
        raise NotImplementedError

    def transform(self, image: Any, key: Any) -> Any:
        amount = sample(key, self.param(self.PARAM))
        return from_unit(self.adjust(to_unit(image), amount), image.dtype)


class Brightness(_ColorOperator):
    """Add ``delta`` to every value (dm-pix's ``adjust_brightness``, written out: no import).

    Example:
        >>> import jax.numpy as jnp
        >>> img = jnp.full((1, 1, 1, 3), 100, jnp.uint8)
        >>> Brightness(0.2).apply_batch({"image": img}, None)["image"].ravel().tolist()
        [151, 151, 151]
    """

    PARAM = "delta"

    def adjust(self, values: Any, amount: Any) -> Any:
        return values + jnp.asarray(amount, values.dtype)


class Contrast(_ColorOperator):
    """Scale each channel's distance from its mean by ``factor`` (dm-pix's
    ``adjust_contrast``, written out here)."""

    PARAM = "factor"
    LOW = 0.0

    def adjust(self, values: Any, amount: Any) -> Any:
        mean = jnp.mean(values, axis=(-3, -2), keepdims=True)  # per channel of (..., H, W, C)
        return jnp.asarray(amount, values.dtype) * (values - mean) + mean


class Saturation(_ColorOperator):
    """Scale HSV saturation by ``factor`` (dm-pix ``adjust_saturation``; RGB images)."""

    PARAM = "factor"
    LOW = 0.0

    def adjust(self, values: Any, amount: Any) -> Any:
        require_rgb(self, values)
        return pix().adjust_saturation(values, amount)


class Hue(_ColorOperator):
    """Rotate HSV hue by ``delta`` turns, in [-0.5, 0.5] (dm-pix ``adjust_hue``; RGB)."""

    PARAM = "delta"
    LOW, HIGH = -0.5, 0.5

    def adjust(self, values: Any, amount: Any) -> Any:
        require_rgb(self, values)
        return pix().adjust_hue(values, amount)


def require_rgb(op: ImageOperator, image: Any) -> None:
    """Refuse images without 3 channels, naming the operator, field and shape."""
    if image.shape[-1] != 3:
        raise DataraxError(
            f"{type(op).__name__} '{op.name}': field '{op.config.field}' holds images with "
            f"{count_words(image.shape[-1], 'channel')}; it works on RGB images (3 channels). "
            "Leave it "
            "out for one-channel images, or convert them to RGB first."
        )


class Grayscale(ImageOperator):
    """Rec.601 luma (dm-pix ``rgb_to_grayscale``), kept as 3 equal channels; one-channel
    images pass unchanged.

    Example:
        >>> import jax.numpy as jnp
        >>> img = jnp.array([[[[255, 0, 0]]]], jnp.uint8)
        >>> Grayscale().apply_batch({"image": img}, None)["image"].ravel().tolist()
        [76, 76, 76]
        >>> Grayscale().apply_batch({"image": img[..., :1]}, None)["image"].ravel().tolist()
        [255]
    """

    unit_values = True

    def __init__(self, *, field: str = "image", name: str | None = None) -> None:
        self._setup({}, stochastic=False, field=field, stream_name=None, rngs=None, name=name)

    def transform(self, image: Any, key: Any) -> Any:
        if image.shape[-1] == 1:
            return image
        require_rgb(self, image)
        gray = pix().rgb_to_grayscale(to_unit(image), keep_dims=True)
        return from_unit(jnp.broadcast_to(gray, image.shape), image.dtype)


class GaussianBlur(ImageOperator):
    """Gaussian blur of width ``sigma`` (number or range) over ``kernel_size`` pixels (dm-pix)."""

    def __init__(self, sigma: Range, *, kernel_size: int = 5, field: str = "image",
                 stream_name: str | None = None, rngs: nnx.Rngs | None = None,
                 name: str | None = None) -> None:
        s = check_range("GaussianBlur", "sigma", sigma, low=1e-6)
        kernel_size = python_ints(kernel_size)
        if isinstance(kernel_size, bool) or not isinstance(kernel_size, int) or kernel_size < 1 \
                or kernel_size % 2 == 0:
            raise ConfigError(
                f"GaussianBlur: kernel_size must be an odd int >= 1, got {kernel_size!r}."
            )
        self._setup({"sigma": s, "kernel_size": kernel_size}, stochastic=is_range(s),
                    field=field, stream_name=stream_name, rngs=rngs, name=name)

    def transform(self, image: Any, key: Any) -> Any:
        sigma = sample(key, self.param("sigma"))
        out = pix().gaussian_blur(image.astype(jnp.float32), sigma, self.param("kernel_size"))
        return cast_like(out, image.dtype)


class Normalize(ImageOperator):
    """``(image - mean) / std`` per channel, as float32; uint8 images are /255 first.

    Example:
        >>> import jax.numpy as jnp
        >>> img = jnp.full((1, 1, 1, 1), 255, jnp.uint8)
        >>> Normalize(mean=[0.5], std=[0.25]).apply_batch({"image": img}, None)["image"].item()
        2.0
    """

    unit_values = True

    def __init__(self, mean: Any, std: Any, *, field: str = "image",
                 name: str | None = None) -> None:
        try:
            m = tuple(float(v) for v in jnp.atleast_1d(jnp.asarray(mean)).tolist())
            s = tuple(float(v) for v in jnp.atleast_1d(jnp.asarray(std)).tolist())
        except (TypeError, ValueError) as err:
            raise ConfigError(
                f"Normalize: mean and std must be numbers or lists, got {mean!r}, {std!r}."
            ) from err
        if not m or not s:
            raise ConfigError(
                "Normalize: mean and std need at least one value (one per channel, or one "
                f"for all), got {mean!r}, {std!r}."
            )
        if len(m) != len(s):
            raise ConfigError(f"Normalize: mean has {count_words(len(m), 'value')} but std has "
                              f"{len(s)}.")
        if not all(math.isfinite(v) for v in m + s):
            raise ConfigError(f"Normalize: mean and std must be finite, got {mean!r}, {std!r}.")
        if any(not v > 0 for v in s):
            raise ConfigError(f"Normalize: every std must be > 0, got {list(s)}.")
        self._setup({"mean": m, "std": s}, stochastic=False, field=field, stream_name=None,
                    rngs=None, name=name)

    def transform(self, image: Any, key: Any) -> Any:
        mean = jnp.asarray(self.param("mean"), jnp.float32)
        std = jnp.asarray(self.param("std"), jnp.float32)
        if mean.shape[0] not in (1, image.shape[-1]):
            raise ConfigError(
                f"Normalize '{self.name}': {mean.shape[0]} mean/std values for images with "
                f"{count_words(image.shape[-1], 'channel')} in field '{self.config.field}'; give "
                "one value "
                f"per channel ({image.shape[-1]}) or one value for all."
            )
        big = [v for v in self.param("mean") if v > 1]
        if big and image.dtype == jnp.uint8:  # no mean of values in [0, 1]: a 0..255 level
            raise ConfigError(
                f"Normalize '{self.name}': mean [{', '.join(f'{v:g}' for v in self.param('mean'))}]"
                " for the uint8 images "
                f"of field '{self.config.field}', which are divided by 255 first (values in "
                "[0, 1]): a mean above 1 is a 0..255 level. Give mean / 255 and std / 255 "
                f"({big[0]:g} -> {big[0] / 255:.3g}).")
        # explicit dtype and rank (mean/std broadcast over the channel axis): a user's strict
        # jax_numpy_dtype_promotion / rank_promotion refuses the implicit ones
        values = to_unit(image)
        dtype = values.dtype if jnp.finfo(values.dtype).bits >= 32 else jnp.dtype(jnp.float32)
        per_channel = (1,) * (image.ndim - 1) + (-1,)
        return ((values.astype(dtype) - mean.astype(dtype).reshape(per_channel))
                / std.astype(dtype).reshape(per_channel))


