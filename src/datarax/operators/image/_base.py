"""``ImageOperator``: the base of the image operators, and the helpers they share.

Colour operators work in [0, 1] (uint8 / 255, rounded and clipped back; floats not
clipped); geometric operators keep the dtype.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from datarax.core import draws
from datarax.core.config import StructuralConfig, check_bool
from datarax.core.errors import ConfigError, DataraxError
from datarax.core.extras import require
from datarax.host.counts import python_ints
from datarax.core.operator import OperatorModule
from datarax.operators._records import check_keys, check_stream_name, require_fields
from datarax.typing import Batch

Range = float | tuple[float, float]


class _StandardPromotion:
    """A module whose functions run under JAX's default promotion rules (``standard``
    dtypes, ``allow`` ranks): dm-pix's own code mixes dtypes and ranks, which a user's
    strict ``jax_numpy_dtype_promotion`` / ``jax_numpy_rank_promotion`` would refuse."""

    def __init__(self, module: Any) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        function = getattr(self._module, name)

        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
                return function(*args, **kwargs)

        return call


def pix() -> Any:
    """dm-pix, imported on first use (the optional ``image`` extra); its functions run
    under JAX's default promotion rules whatever the user set."""
    return _StandardPromotion(require("dm_pix", extra="image", user="datarax.operators.image"))


def python_numbers(value: Any) -> Any:
    """``value`` with NumPy integers and floats in it (also in lists, tuples) as Python's.

    >>> python_numbers((np.int64(2), [np.float32(0.5)], "center"))
    (2, [0.5], 'center')
    """
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, (list, tuple)):
        return type(value)(python_numbers(v) for v in value)
    return python_ints(value)


def check_range(
    owner: str, name: str, value: Any, *, low: float | None = None, high: float | None = None
) -> Range:
    """A number or a ``(low, high)`` pair within ``[low, high]``, as floats."""
    value = python_numbers(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        values: tuple[float, ...] = (float(value),)
        out: Range = float(value)
    elif (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    ):
        values = (float(value[0]), float(value[1]))
        if values[0] > values[1]:
            raise ConfigError(f"{owner}: {name} range {tuple(value)} has low > high.")
        out = values  # type: ignore[assignment]
    else:
        raise ConfigError(
            f"{owner}: {name} must be a number (fixed) or a (low, high) pair (drawn per "
            f"record), got {value!r}."
        )
    for v in values:
        if not math.isfinite(v):
            raise ConfigError(f"{owner}: {name} must be finite, got {value!r}.")
        if (low is not None and v < low) or (high is not None and v > high):
            bound = (f"be >= {low}" if high is None else f"be <= {high}" if low is None
                     else f"lie in [{low}, {high}]")
            raise ConfigError(f"{owner}: {name} must {bound}, got {value!r}.")
    return out


def check_fill(owner: str, value: Any) -> float:
    """``fill``: a finite number (the value uncovered or filled pixels take)."""
    value = python_numbers(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise ConfigError(f"{owner}: fill must be a finite number, got {value!r}.")


def check_flag(owner: str, name: str, value: Any) -> bool:
    """A setting that must be ``True`` or ``False`` (``antialias``)."""
    value = bool(value) if isinstance(value, np.bool_) else value
    if isinstance(value, bool):
        return value
    raise ConfigError(f"{owner}: {name} must be True or False, got {value!r}.")


def check_size(owner: str, value: Any, name: str = "size") -> tuple[int, int]:
    """An ``int`` or ``(height, width)`` pair of positive ints."""
    value = python_ints(value)
    pair = (value, value) if isinstance(value, int) and not isinstance(value, bool) else value
    if (
        isinstance(pair, (tuple, list))
        and len(pair) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in pair)
    ):
        return int(pair[0]), int(pair[1])
    raise ConfigError(
        f"{owner}: {name} must be an int >= 1 or a (height, width) pair, got {value!r}."
    )


def check_offset(owner: str, value: Any, words: tuple[str, ...], low: int | None = None) -> Any:
    """``offset``: one of ``words`` (``"random"`` ...), or a ``(y, x)`` pair of ints (each
    ``>= low`` where given) as a tuple."""
    value = python_ints(value)
    if isinstance(value, str) and value in words:
        return value
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) and (low is None or v >= low)
            for v in value):
        return int(value[0]), int(value[1])
    allowed = ", ".join(repr(w) for w in words) + " or (y, x) ints" + (
        "" if low is None else f" >= {low}")
    raise ConfigError(f"{owner}: offset must be {allowed}, got {value!r}.")


def is_range(value: Any) -> bool:
    return isinstance(value, tuple)


def sample(key: Any, value: Range) -> Any:
    """The value itself, or a uniform draw from ``(low, high)`` (the key's first word)."""
    return sample_word(draws.words(key, 1)[0] if is_range(value) else None, value)


def sample_word(word: Any, value: Range) -> Any:
    """The value itself, or a uniform draw from ``(low, high)`` made of ``word``."""
    if is_range(value):
        low, high = value  # type: ignore[misc]
        return draws.uniform(word, low, high)
    return jnp.asarray(value, jnp.float32)


def to_unit(image: Any) -> Any:
    """Image values as float32 in [0, 1] (uint8 / 255; floats as they are)."""
    if image.dtype == jnp.uint8:
        return image.astype(jnp.float32) / 255.0
    return image.astype(jnp.float32) if not jnp.issubdtype(image.dtype, jnp.floating) else image


def from_unit(values: Any, dtype: Any) -> Any:
    """Back to ``dtype``: uint8 rounds and clips ``values * 255``; floats pass."""
    if dtype == jnp.uint8:
        return jnp.clip(jnp.round(values * 255.0), 0, 255).astype(jnp.uint8)
    return values.astype(dtype)


def cast_like(values: Any, dtype: Any) -> Any:
    """Float results of a geometric op back to the input dtype (ints round and clip)."""
    if jnp.issubdtype(dtype, jnp.integer):
        info = jnp.iinfo(dtype)
        return jnp.clip(jnp.round(values), info.min, info.max).astype(dtype)
    return values.astype(dtype)


def materialized(values: Any, witness: Any = None) -> Any:
    """``values`` unchanged, but written out whole where XLA:CPU would fuse them onward.

    XLA:CPU would recompute the gathers inside each consumer; a conditional's operand is
    stored before it runs (identities and ``optimization_barrier`` are removed before
    fusion). Pass the producer's input as ``witness``: reading ``values`` would split it.

    Example:
        >>> import jax.numpy as jnp
        >>> materialized(jnp.array([1.0, -2.0])).tolist()
        [1.0, -2.0]
        >>> materialized(jnp.array([1.0, -2.0]), witness=jnp.zeros(3)).tolist()
        [1.0, -2.0]
    """
    values = jnp.asarray(values)
    witness = values if witness is None else jnp.asarray(witness)
    pred = jnp.ravel(witness)[0] > 0 if witness.size else jnp.asarray(True)
    return jax.lax.cond(pred, lambda v: v + 0, lambda v: v - 0, values)


@dataclass(frozen=True)
class ImageOperatorConfig(StructuralConfig):
    """Configuration shared by image operators (built by each operator's constructor).

    Attributes:
        field: the batch field holding ``(batch, H, W, C)`` images.
        params: the operator's parameters as ``(name, value)`` pairs.
        stochastic: whether any parameter is drawn per record.
        stream_name: the ``nnx.Rngs`` stream of the base key when ``rngs`` is given.
    """

    field: str = "image"
    params: tuple[tuple[str, Any], ...] = ()
    stochastic: bool = False
    stream_name: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_bool(self, "stochastic")
        if not isinstance(self.field, str) or not self.field:
            raise ConfigError(f"image operator field must be a field name, got {self.field!r}.")


class ImageOperator(OperatorModule):
    """Base of image operators: ``transform(image, key)`` per record of one field.

    Subclasses call :meth:`_setup` and implement :meth:`transform`, or set ``materialize``
    and implement :meth:`plan` (per record) and :meth:`render` (stored whole, :func:`materialized`).
    """

    config: ImageOperatorConfig  # pyright: ignore[reportIncompatibleVariableOverride]

    per_record = True  # transform sees one image (vmapped)
    materialize = False
    unit_values = False  # works on values in [0, 1]: uint8 or float images only

    def _setup(
        self,
        params: dict[str, Any],
        *,
        stochastic: bool,
        field: str,
        stream_name: str | None,
        rngs: nnx.Rngs | None,
        name: str | None,
    ) -> None:
        if not isinstance(field, str) or not field:
            raise ConfigError(
                f"{type(self).__name__}: field must be the name of the batch field holding the "
                f"images (a non-empty string, e.g. field='image'), got {field!r}."
            )
        check_stream_name(stream_name, f"{type(self).__name__}: stream_name")
        config = ImageOperatorConfig(
            field=field, params=tuple(params.items()), stochastic=bool(stochastic),
            stream_name=stream_name,
        )
        super().__init__(config, rngs=rngs, name=name)

    def param(self, name: str) -> Any:
        """The value of parameter ``name`` as given to the constructor (normalised)."""
        return dict(self.config.params)[name]

    def transform(self, image: Any, key: Any) -> Any:
        if self.materialize:
            return cast_like(self.render(image, self.plan(tuple(image.shape), key)), image.dtype)
        raise NotImplementedError

    def plan(self, shape: tuple[int, ...], key: Any) -> Any:
        """What :meth:`render` needs for one record of ``shape`` (``materialize`` ops)."""
        raise NotImplementedError

    def render(self, image: Any, plan: Any) -> Any:
        """One image transformed by its :meth:`plan`, as float32 (``materialize`` ops)."""
        raise NotImplementedError

    def apply_batch(self, data: Batch, keys: Any | None) -> Batch:
        """Transform ``data[field]`` record by record (``keys``: one per record)."""
        field = self.config.field
        require_fields(data, [field], f"{type(self).__name__} '{self.name}'")
        images = data[field]
        if jnp.ndim(images) != 4:
            hint = (
                " One-channel images stored as (batch, height, width) need a channel axis: "
                f"add MapOperator(subtree='{field}', fn=lambda a: a[..., None]) before it; "
                "one image called directly needs a batch axis, image[None]."
                if jnp.ndim(images) == 3 else ""
            )
            raise DataraxError(
                f"{type(self).__name__} '{self.name}': field '{field}' must hold "
                f"(batch, height, width, channels) images, got shape "
                f"{tuple(jnp.shape(images))}.{hint}"
            )
        images = jnp.asarray(images)
        if self.unit_values and images.dtype != jnp.uint8 \
                and not jnp.issubdtype(images.dtype, jnp.floating):
            raise DataraxError(
                f"{type(self).__name__} '{self.name}': field '{field}' holds {images.dtype} "
                "images; it works on uint8 images (0-255) or float images in [0, 1]. Convert "
                "them first, e.g. MapOperator(subtree=[...], fn=lambda a: a / 65535.0) for "
                "16-bit images, a.astype(jnp.float32) for masks of True/False."
            )
        if self.config.stochastic:
            check_keys(self, keys, images.shape[0], required=True)
        if self.materialize:
            shape = tuple(images.shape[1:])
            if self.config.stochastic:
                plans = jax.vmap(lambda key: self.plan(shape, key))(keys)
                render = jax.vmap(self.render)
            else:
                plans = self.plan(shape, None)
                render = jax.vmap(self.render, in_axes=(0, None))
            # cast after storing: rounding first would split the gathers per tap
            out = cast_like(materialized(render(images, plans), images), images.dtype)
            return {**data, field: out}
        if self.config.stochastic:
            return {**data, field: jax.vmap(self.transform)(images, keys)}
        return {**data, field: jax.vmap(lambda image: self.transform(image, None))(images)}
