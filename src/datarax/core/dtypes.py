"""One dtype policy for the values datarax sees, and one answer to "is this text".

Defined in :mod:`datarax.host.dtypes` (which imports neither JAX nor Flax, so a decode
worker process checks its records without loading them) and named here, their
documented home; the rules are written there.

Example:
    >>> import numpy as np
    >>> fit_column("label", np.array([0, 7, 9]), where="MySource", cast_float64=False).dtype
    dtype('int32')
    >>> fit_value("score", 0.5, cast_float64=False).dtype  # a Python float: JAX's default
    dtype('float32')
"""

from __future__ import annotations

from datarax.host.dtypes import (
    DROP_FIELD,
    TEXT_KINDS,
    NarrowingError,
    Records,
    declared_64bit,
    fit_column,
    fit_value,
    is_64bit,
    is_host_leaf,
    is_text_dtype,
    is_text_scalar,
    is_text_value,
    record_number,
    text_as_list,
    text_kind,
    x64_enabled,
)

__all__ = [
    "DROP_FIELD", "TEXT_KINDS", "NarrowingError", "Records", "declared_64bit", "fit_column",
    "fit_value", "is_64bit", "is_host_leaf", "is_text_dtype", "is_text_scalar",
    "is_text_value", "record_number", "text_as_list", "text_kind", "x64_enabled",
]
