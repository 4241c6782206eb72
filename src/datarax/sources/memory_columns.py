"""A :class:`~datarax.sources.memory.MemorySource`'s ``data`` turned into columns by
field path, checked: device arrays for numbers (under :mod:`datarax.core.dtypes`),
``object`` arrays on the host for text; nested dicts are nested fields, named by path
(``"meta/id"``) in messages.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from datarax.core.dtypes import fit_column, is_text_scalar, is_text_value, text_kind
from datarax.core.element import Element
from datarax.core.errors import DataraxError
from datarax.core.owned import owned_device_put
from datarax.sources._columns import as_text

Path = tuple[str, ...]


def flatten(tree: Mapping[str, Any], prefix: Path = ()) -> dict[Path, Any]:
    """A nested dict's leaves by path."""
    flat: dict[Path, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            flat.update(flatten(value, (*prefix, key)))
        else:
            flat[(*prefix, key)] = value
    return flat


def unflatten(flat: Mapping[Path, Any]) -> dict[str, Any]:
    """The nested dict of leaves by path (paths in order)."""
    tree: dict[str, Any] = {}
    for path, value in flat.items():
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return tree


def _name(path: Path) -> str:
    return "/".join(path)


def to_columns(data: Any, cast_float64: bool) -> dict[Path, Any]:
    """Turn a dict of arrays or a sequence of records into columns by field path:
    :class:`DeviceColumn` for numbers, ``object`` arrays (host) for text."""
    if isinstance(data, Mapping):
        if not data:
            raise DataraxError("MemorySource got an empty dict; pass at least one field.")
        columns = _columns_of_dict(data, (), cast_float64)
    elif isinstance(data, Sequence) and not isinstance(data, (str, bytes)):
        if len(data) == 0:
            raise DataraxError("MemorySource got an empty sequence; pass at least one record.")
        records = [r.data if isinstance(r, Element) else r for r in data]
        if not isinstance(records[0], Mapping):
            raise DataraxError(
                f"MemorySource records must be dicts of fields, record 0 is "
                f"{type(records[0]).__name__}. Wrap it, e.g. [{{'x': r}} for r in data], or pass "
                "a dict of arrays."
            )
        columns = _columns_of_records(records, (), cast_float64)
    else:
        if hasattr(data, "columns") and hasattr(data, "to_dict"):  # a pandas DataFrame
            hint = "; pass dict(frame), its columns by name."
        elif isinstance(data, (np.ndarray, jax.Array)):
            hint = "; name the field: {'x': array} (records along axis 0)."
        elif hasattr(data, "with_format") and type(data).__module__.startswith("datasets"):
            hint = ("; pass its columns, data.with_format('numpy')[:] (a Hugging Face Dataset), "
                    "or read a folder written by data.save_to_disk(folder) with HFEagerSource.")
        elif isinstance(data, Iterator):
            hint = "; pass list(data) (MemorySource holds every record; an iterator is read once)."
        elif isinstance(data, (str, bytes)):
            hint = "."
        elif hasattr(data, "with_format") and hasattr(data, "column_names"):  # datasets'
            hint = "; pass its columns: data.with_format('numpy')[:]."
        elif hasattr(data, "__len__") and hasattr(data, "__getitem__"):  # a dataset by index
            hint = (" (read by index, but not a list, tuple or collections.abc.Sequence); pass "
                    "[data[i] for i in range(len(data))].")
        elif isinstance(data, Iterable):
            hint = "; pass list(data) (a sequence: a list or tuple of records)."
        else:
            hint = "."
        raise DataraxError(
            "MemorySource data must be a dict of arrays or a sequence of records, got "
            f"{type(data).__name__}{hint}")
    lengths = {_name(p): int(_rows_of(v).shape[0]) for p, v in columns.items()}
    if len(set(lengths.values())) > 1:
        raise DataraxError(
            f"MemorySource fields have different numbers of records: {lengths}; every field "
            "needs one entry per record."
        )
    if next(iter(lengths.values())) == 0:
        field, shape = next((_name(p), _rows_of(v).shape) for p, v in columns.items())
        raise DataraxError(
            f"MemorySource data holds no records: field '{field}' has shape {shape}, 0 "
            "records along axis 0; pass at least one record.")
    return columns


def _field_path(prefix: Path, key: Any) -> Path:
    """``prefix`` and the field ``key``, which must be a str: batches are dicts of str
    names, and ``1`` and ``'1'`` would both be ``'1'``."""
    if not isinstance(key, str):
        where = f" in field '{_name(prefix)}'" if prefix else ""
        raise DataraxError(
            f"MemorySource field names must be str; got {type(key).__name__} {key!r}{where}. "
            f"Name the field with a str (e.g. {str(key)!r}): batches are dicts keyed by str.")
    return (*prefix, key)


def _rows_of(column: Any) -> Any:
    return column.rows if isinstance(column, DeviceColumn) else column


def _columns_of_dict(data: Mapping[Any, Any], prefix: Path, cast_float64: bool) -> dict[Path, Any]:
    columns: dict[Path, Any] = {}
    for key, value in data.items():
        path = _field_path(prefix, key)
        if isinstance(value, Mapping):
            if not value:
                raise DataraxError(
                    f"MemorySource field '{_name(path)}' is an empty dict; give it at least "
                    "one field or remove it."
                )
            columns.update(_columns_of_dict(value, path, cast_float64))
        else:
            columns[path] = _column(path, value, cast_float64)
    return columns


def _columns_of_records(records: Sequence[Any], prefix: Path, cast_float64: bool) -> dict[Path, Any]:
    keys = list(records[0].keys())
    where = f" field '{_name(prefix)}'" if prefix else ""
    for i, record in enumerate(records):  # the same fields, in any order
        if not isinstance(record, Mapping) or record.keys() != set(keys):
            got = list(record.keys()) if isinstance(record, Mapping) else type(record).__name__
            raise DataraxError(
                f"MemorySource record {i}{where} has fields {got}, record 0 has {keys}; every "
                "record needs the same fields."
            )
    if not keys:
        raise DataraxError(
            f"MemorySource record 0{where} has no fields; give it at least one field."
        )
    columns: dict[Path, Any] = {}
    for key in keys:
        path = _field_path(prefix, key)
        values = [record[key] for record in records]
        if isinstance(values[0], Mapping):
            columns.update(_columns_of_records(values, path, cast_float64))
            continue
        shapes = [_record_shape(v) for v in values]
        bad = next((i for i, s in enumerate(shapes) if s != shapes[0]), None)
        if bad is not None:
            if isinstance(shapes[bad], tuple) and isinstance(shapes[0], tuple):
                got, first = f"shape {shapes[bad]}", str(shapes[0])
            else:
                got, first = _describe(shapes[bad]), _describe(shapes[0])
            raise DataraxError(
                f"MemorySource field '{_name(path)}': record {bad} has {got}, record 0 has "
                f"{first}; every record needs the same fields and shapes (pad or resize "
                "records to one shape)."
            )
        if all(isinstance(v, (jax.Array, np.ndarray, np.generic)) for v in values):
            arrays = [np.asarray(v) for v in values]
            stacked = np.stack(arrays)
            dtypes = [a.dtype for a in arrays]
            if (stacked.dtype in (np.float64, np.complex128) and stacked.dtype not in dtypes
                    and not cast_float64 and not jax.config.jax_enable_x64):
                # float32 and int32 records stack as float64: not what the user gave
                bad = next(i for i, d in enumerate(dtypes) if d != dtypes[0])
                raise DataraxError(
                    f"MemorySource field '{_name(path)}': record {bad} is {dtypes[bad]}, record "
                    f"0 is {dtypes[0]}, which NumPy stacks as {stacked.dtype}, a dtype no record "
                    "has; give every record of a field one dtype (e.g. "
                    f"np.asarray(value, np.{dtypes[0]}))."
                )
            columns[path] = _column(path, stacked, cast_float64)
        else:
            columns[path] = _column(path, values, cast_float64, records=True)
    return columns


def _record_shape(value: Any) -> Any:
    if isinstance(value, Mapping):
        return "a dict"
    if is_text_scalar(value):
        return ()
    try:
        return np.shape(value)
    except ValueError:  # ragged nested lists
        return "a ragged list"


def _describe(shape: Any) -> str:
    return shape if isinstance(shape, str) else f"shape {shape}"


def _column(path: Path, value: Any, cast_float64: bool, records: bool = False) -> Any:
    """One field: a device array for numbers (under the dtype policy), an ``object``
    array on the host for text."""
    name = _name(path)
    if is_text_value(value) or (records and any(is_text_scalar(v) for v in value)):
        return _text_column(name, value)
    if isinstance(value, jax.Array):
        array = value
    else:
        mask = np.ma.getmaskarray(value) if isinstance(value, np.ma.MaskedArray) else None
        if mask is not None and mask.any():
            first = int(np.flatnonzero(mask.reshape(len(mask), -1).any(1))[0]) if mask.ndim else 0
            raise DataraxError(
                f"MemorySource field '{name}' is a masked array with masked entries (first "
                f"in record {first}); a batch carries the values under the mask, not the "
                f"mask. Fill them (value.filled(0)) and pass the mask as a field of its own "
                f"(np.ma.getmaskarray(value)).")
        try:
            array = np.asarray(value)
        except (TypeError, ValueError) as err:
            raise DataraxError(
                f"MemorySource field '{name}' cannot be turned into an array: {err}"
            ) from err
        if array.dtype == object and array.size and all(  # text of another array type
                is_text_scalar(v) for v in array.reshape(-1)):  # (a pandas column of str)
            return _text_column(name, array)
        if array.dtype.kind in "US" and array.ndim > 1:  # records each a list of str?
            items = np.asarray(value, dtype=object)  # as given: no str made of a number
            other = next((v for v in items.reshape(-1) if not is_text_scalar(v)), None)
            if other is None:
                return _text_column(name, items)
            raise _mixes_text(name, other)
        if array.dtype.kind not in "biufc" and not jax.dtypes.issubdtype(array.dtype, np.number):
            raise DataraxError(  # (bfloat16, float8 are numbers JAX holds: kind 'V')
                f"MemorySource field '{name}' holds {array.dtype} values; MemorySource keeps "
                "numbers (bool, int, float, complex) on the device and text (str/bytes) on "
                "the host. Convert the field to one of those."
            )
    _check_per_record(name, array)
    array = fit_column(  # Python numbers (value a list) take JAX's defaults
        name, array if isinstance(value, (jax.Array, np.ndarray)) else value, where="MemorySource", cast_float64=cast_float64,
        drop_hint="remove the field from data",
    )
    # device_put, not jnp.asarray: the latter compiles a conversion per new shape; a
    # copy of the caller's buffer, never a view of it (core/owned.py).
    return DeviceColumn(owned_device_put(row_major(array)), tuple(array.shape[1:]))


class DeviceColumn(NamedTuple):
    """A numeric field on the device in its gather layout: ``rows`` holds one record a
    row, flattened (``(n, prod(record_shape))``) when a record has two or more axes;
    ``record_shape`` is a record's own shape, restored after the gather."""

    rows: Any
    record_shape: tuple[int, ...]


def row_major(array: Any) -> Any:
    """``array`` with each record flattened to one row when a record has two or more
    axes (``(n, 32, 32, 3)`` -> ``(n, 3072)``), else ``array`` itself.

    Accelerators gather whole rows of a 2-D array fastest (docs/benchmarks.md); the
    bytes are the same, so a gathered row reshaped is the record, bit for bit.

    Example:
        >>> import numpy as np
        >>> row_major(np.zeros((5, 4, 4, 3), np.uint8)).shape, row_major(np.zeros((5, 2))).shape
        ((5, 48), (5, 2))
    """
    if array.ndim <= 2:
        return array
    return array.reshape(array.shape[0], math.prod(array.shape[1:]))


def _check_per_record(name: str, array: np.ndarray) -> None:
    if array.ndim == 0:
        raise DataraxError(f"MemorySource field '{name}' is a scalar; a dict of arrays needs "
                           "one entry per record along axis 0.")


def _mixes_text(name: str, other: Any) -> DataraxError:
    return DataraxError(f"MemorySource field '{name}' mixes text with {type(other).__name__} "
                        f"values ({other!r}); a field holds either text or numbers.")


def _text_column(name: str, value: Any) -> np.ndarray:
    if is_text_scalar(value):
        raise DataraxError(
            f"MemorySource field '{name}' is a single string; a dict of arrays needs one "
            "entry per record along axis 0 (e.g. a list of str)."
        )
    if isinstance(value, np.ndarray):
        array = as_text(value)
        if array is value:  # the caller's object array: copied, as numbers are (core/owned.py)
            array = value.copy()
    elif all(is_text_scalar(v) for v in value):
        array = np.empty(len(value), dtype=object)
        array[:] = list(value)
        return _one_text_kind(name, array)
    else:
        first = next(v for v in value if not is_text_scalar(v))
        if not isinstance(first, (Sequence, np.ndarray)) or not is_text_value(first):
            raise _mixes_text(name, first)
        array = as_text(np.asarray(value))  # records each holding a list of str
        return array
    _check_per_record(name, array)
    for bad in array.reshape(-1):
        if is_text_scalar(bad):
            continue
        raise DataraxError(
            f"MemorySource field '{name}' is an object array holding {type(bad).__name__} "
            f"values ({bad!r}); MemorySource keeps numbers on the device and str/bytes on "
            "the host. Convert the field to a numeric array or to text."
        )
    return _one_text_kind(name, array)


def _one_text_kind(name: str, array: np.ndarray) -> np.ndarray:
    """``array`` (an ``object`` array of text), refused where it mixes ``str`` and
    ``bytes``: a text field holds one of them in every record, as in every source."""
    if array.dtype != object or text_kind(array) != "":
        return array
    items = array.reshape(len(array), -1)
    kinds = [{text_kind(v) for v in row} for row in items]
    bad = next(i for i, k in enumerate(kinds) if len(k) > 1 or k != kinds[0])
    got, first = (" and ".join(sorted(k)) for k in (kinds[bad], kinds[0]))
    where = f"record {bad} holds {got}" + ("" if bad == 0 else f", record 0 {first}")
    raise DataraxError(
        f"MemorySource field '{name}': {where}; a text field holds str in every record or "
        "bytes in every record. Convert one to the other (e.g. value.decode('utf-8'))."
    )
