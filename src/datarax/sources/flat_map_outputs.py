"""What :class:`~datarax.sources.flat_map.FlatMapSource` checks of the records ``fn``
returns: values fitted to a batch's dtypes, and every output of one structure (the first
output's fields, shapes and dtypes).

Example:
    >>> import numpy as np
    >>> spec = spec_tree({"x": np.int32(1)})
    >>> check_tree({"x": np.int32(2)}, spec, "output 0 of parent record 4", "the first output")
    >>> check_tree({"x": np.zeros(2, np.int32)}, spec, "output 0 of parent record 4",
    ...            "the first output")
    Traceback (most recent call last):
    ...
    datarax.core.errors.DataraxError: FlatMapSource: field 'x' of output 0 of parent record 4 is int32(2,), the first output has int32(); fn must return records of one structure (pad, crop or cast them to one shape and dtype).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from datarax.core.dtypes import fit_value, is_text_scalar
from datarax.core.errors import DataraxError
from datarax.core.spec import describe_field
from datarax.sources.decoded_records import spec_of

__all__ = ["check_tree", "fit_tree", "spec_tree"]


def fit_tree(record: Mapping[str, Any], cast_float64: bool, where: str,
             prefix: str = "") -> dict[str, Any]:
    """``record``'s values fitted to the dtypes a batch holds (text kept as it is); a
    value that does not fit is named by its path (``meta/id``)."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, Mapping):
            out[key] = fit_tree(value, cast_float64, where, f"{prefix}{key}/")
        elif is_text_scalar(value):
            out[key] = value
        else:
            out[key] = fit_value(f"{prefix}{key}", value, cast_float64=cast_float64,
                                 where=f"FlatMapSource, {where}", drop_hint=_FIX_IN_FN)
    return out


#: the last fix a 64-bit message names (FlatMapSource has no exclude_keys)
_FIX_IN_FN = "cast or drop the field in fn."


def spec_tree(record: Mapping[str, Any]) -> dict[str, Any]:
    """The element spec of one output (nested dicts kept)."""
    return {k: spec_tree(v) if isinstance(v, Mapping) else spec_of(v) for k, v in record.items()}


def _describe(spec: Any) -> str:
    return "a dict of fields" if isinstance(spec, dict) else describe_field(spec)


def check_tree(record: Any, spec: dict[str, Any], where: str, first: str, prefix: str = "") -> None:
    """Refuse ``record`` unless it has exactly ``spec``'s fields, shapes and dtypes."""
    if list(record) != list(spec):
        raise DataraxError(
            f"FlatMapSource: {where} has fields {list(record)}{' under ' + prefix if prefix else ''}, "
            f"{first} has {list(spec)}; fn must return the same fields every time."
        )
    for key, field in spec.items():
        value = record[key]
        name = f"{prefix}{key}"
        if isinstance(field, dict):
            if not isinstance(value, Mapping):
                raise DataraxError(
                    f"FlatMapSource: field '{name}' of {where} is {type(value).__name__}, "
                    f"{first} has a dict of fields there."
                )
            check_tree(value, field, where, first, f"{name}/")
            continue
        got = spec_of(value) if not isinstance(value, Mapping) else {}
        if _describe(got) != _describe(field):
            raise DataraxError(
                f"FlatMapSource: field '{name}' of {where} is {_describe(got)}, {first} has "
                f"{_describe(field)}; fn must return records of one structure (pad, crop or "
                "cast them to one shape and dtype)."
            )
