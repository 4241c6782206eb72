"""Per-record field specs without JAX: what a decode worker compares records against.

:func:`host_field_spec` is the rule :func:`datarax.core.spec.field_spec` follows, in plain
values. Imports neither JAX nor Flax.

Example:
    >>> import numpy as np
    >>> host_field_spec("a film"), host_field_spec(np.zeros((4, 3), np.float32), batched=True)
    (TextSpec(shape=()), ArraySpec(shape=(3,), dtype=dtype('float32')))
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import numpy as np

from datarax.host.dtypes import is_text_dtype, text_kind

__all__ = ["ArraySpec", "TextSpec", "describe_field", "host_field_spec"]


@dataclasses.dataclass(frozen=True)
class TextSpec:
    """A string field carried on the host (a list or numpy array of ``str`` per batch);
    ``kind``, ``"str"`` or ``"bytes"`` where the values told it, is not compared."""

    shape: tuple[int, ...] = ()
    kind: str | None = dataclasses.field(default=None, compare=False, repr=False)


class ArraySpec(NamedTuple):
    """A numeric field's per-record shape and numpy dtype."""

    shape: tuple[int, ...]
    dtype: np.dtype


def host_field_spec(value: Any, *, batched: bool = False) -> ArraySpec | TextSpec:
    """The per-record spec of one field's value; ``batched``: records along axis 0
    (dropped from the shape)."""
    if isinstance(value, (str, bytes)):
        return TextSpec((), text_kind(value))
    array = np.asarray(value)
    shape = tuple(array.shape[1:] if batched else array.shape)
    if is_text_dtype(array.dtype):  # the kind of the first value (a mix is refused elsewhere)
        return TextSpec(shape, text_kind(array.reshape(-1)[:1]) or None)
    return ArraySpec(shape, array.dtype)


def describe_field(spec: Any) -> str:
    """A field's per-record spec in a few characters.

    >>> describe_field(ArraySpec((3,), np.dtype(np.int32))), describe_field(TextSpec(()))
    ('int32(3,)', 'text()')
    """
    if isinstance(spec, TextSpec):
        return f"text{tuple(spec.shape)}"
    return f"{np.dtype(spec.dtype).name}{tuple(spec.shape)}"
