"""Turn columns read from TFDS / Hugging Face into what a datarax batch carries.

One policy for 64-bit data, shared by every dataset-backed source, so a JAX user
never gets a silently narrowed value:

* ``jax_enable_x64`` on: 64-bit columns stay 64-bit.
* ``jax_enable_x64`` off: ``int64`` / ``uint64`` columns become ``int32`` when every
  value fits (checked on each column or chunk read; a value that does not fit raises
  :class:`~datarax.core.errors.RecordError` naming the field and record). ``float64``
  (and ``complex128``) columns are refused unless the config sets
  ``cast_float64=True``, which casts them to ``float32`` (``complex64``) on purpose.
* String columns are text: a numpy ``object`` array of ``str`` (``bytes`` are kept
  as bytes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from datarax.core.errors import ConfigError, DataraxError, RecordError
from datarax.core.spec import TextSpec, x64_enabled

_INT32 = np.iinfo(np.int32)
_SIXTY_FOUR = tuple(np.dtype(t) for t in (np.int64, np.uint64, np.float64, np.complex128))


def is_text_array(array: np.ndarray) -> bool:
    """True for numpy arrays holding strings (``U``/``S``/``object`` dtypes)."""
    return array.dtype.kind in "USOT"


def as_text(array: np.ndarray) -> np.ndarray:
    """A numpy ``object`` array of ``str``/``bytes`` (the host form of text fields)."""
    if array.dtype.kind == "O":
        return array
    return array.astype(object)


def fit_64bit(
    name: str,
    array: np.ndarray,
    *,
    where: str,
    cast_float64: bool,
    first_record: int = 0,
) -> np.ndarray:
    """Apply the 64-bit policy of this module to one numeric column."""
    dtype = array.dtype
    if dtype not in _SIXTY_FOUR or x64_enabled():
        return array
    if dtype.kind in "iu":
        if array.size:
            flat = array.reshape(len(array), -1)
            mask = flat > _INT32.max
            if dtype.kind == "i":
                mask |= flat < _INT32.min
            bad = np.flatnonzero(mask.any(axis=1))
            if bad.size:
                i = int(bad[0])
                raise RecordError(
                    f"{where}: field '{name}' is {dtype.name} and record {first_record + i} "
                    f"holds a value outside the int32 range ({array[i]!r}), so it cannot be "
                    "cast to int32 without loss while jax_enable_x64 is off. Enable x64 "
                    "with jax.config.update('jax_enable_x64', True), or drop the field "
                    "(exclude_keys).",
                    index=first_record + i,
                )
        return array.astype(np.int32)
    if dtype.kind in "fc":
        if not cast_float64:
            target = "float32" if dtype.kind == "f" else "complex64"
            raise ConfigError(
                f"{where}: field '{name}' is {dtype.name} but jax_enable_x64 is off, and "
                f"datarax never narrows silently. Set cast_float64=True in the config to "
                f"cast it to {target}, enable x64 with "
                "jax.config.update('jax_enable_x64', True), or drop the field (exclude_keys)."
            )
        return array.astype(np.float32 if dtype.kind == "f" else np.complex64)
    return array


def select_keys(
    available: Sequence[str],
    include_keys: Sequence[str] | None,
    exclude_keys: Sequence[str] | None,
    *,
    where: str,
) -> list[str]:
    """The columns to keep, in dataset order; unknown names in either list are refused."""
    for label, keys in (("include_keys", include_keys), ("exclude_keys", exclude_keys)):
        if keys is None:
            continue
        missing = [k for k in keys if k not in available]
        if missing:
            raise ConfigError(
                f"{where}: {label} names field(s) {missing} that the dataset does not "
                f"have; its fields are {list(available)}."
            )
    kept = [k for k in available if include_keys is None or k in include_keys]
    kept = [k for k in kept if exclude_keys is None or k not in exclude_keys]
    if not kept:
        raise ConfigError(
            f"{where}: include_keys/exclude_keys leave no field to serve (fields: "
            f"{list(available)})."
        )
    return kept


def normalize_keys(config: Any, name: str) -> None:
    """Validate a frozen config's field names and store them as a tuple of str (or None).

    Any iterable of names is accepted: a list or tuple keeps its order, an unordered
    collection (a set) is stored sorted, so equal configs compare and hash alike in
    every process. A single ``str`` is refused (it would read as its characters).

    Example:
        >>> from types import SimpleNamespace
        >>> config = SimpleNamespace(include_keys={"label", "image"})
        >>> normalize_keys(config, "include_keys")
        >>> config.include_keys
        ('image', 'label')
    """
    value = getattr(config, name)
    if value is None:
        return
    where = f"{type(config).__name__}.{name}"
    if isinstance(value, (str, bytes)):
        raise ConfigError(
            f"{where} must be None or an iterable of field names (a list, tuple or set), "
            f"got the single string {value!r}; wrap it: {name}=({value!r},)."
        )
    try:
        names = list(value)
    except TypeError:
        raise ConfigError(
            f"{where} must be None or an iterable of field names (a list, tuple or set), "
            f"got {type(value).__name__} {value!r}."
        ) from None
    bad = [k for k in names if not isinstance(k, str)]
    if bad:
        raise ConfigError(
            f"{where} must hold field names (str), but holds {bad[0]!r} "
            f"({type(bad[0]).__name__})."
        )
    if not isinstance(value, Sequence):
        names.sort()
    object.__setattr__(config, name, tuple(names))


def spec_of_columns(columns: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Per-record spec of a dict of host columns (text fields become ``TextSpec``)."""
    spec: dict[str, Any] = {}
    for key, value in columns.items():
        if is_text_array(value):
            spec[key] = TextSpec(tuple(value.shape[1:]))
        else:
            spec[key] = jax.ShapeDtypeStruct(tuple(value.shape[1:]), value.dtype)
    return spec


def refuse_text(columns: Mapping[str, np.ndarray], *, where: str, streaming_hint: str) -> None:
    """Eager (device-resident) sources cannot hold text; name the fields and the fixes."""
    text = [k for k, v in columns.items() if is_text_array(v)]
    if text:
        raise DataraxError(
            f"{where}: field(s) {text} hold text, which cannot live in device memory. Drop "
            f"them with exclude_keys={tuple(text)!r} (or list the numeric fields in "
            f"include_keys), encode them to token ids first, or use {streaming_hint}, "
            "whose batches carry text to your operators."
        )
