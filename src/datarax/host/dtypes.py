"""One dtype policy for the values datarax sees, and one answer to "is this text".

**Text** (kept on the host): ``str``/``bytes``, a numpy array of kind ``U``/``S``/``O``/``T``,
or a non-empty sequence whose first item is a ``str``/``bytes``.

**64-bit values** while ``jax_enable_x64`` is off (JAX would narrow them silently):
``int64``/``uint64`` become ``int32`` when every value fits, else a ``NarrowingError``
names field, record and value; ``float64``/``complex128`` is a ``ConfigError`` unless
``cast_float64=True`` (then a finite value past ``float32``'s range is refused); Python
numbers take JAX's defaults (``int32``, ``float32``). Big-endian arrays become native.

Imports neither JAX nor Flax (decode workers use it). Documented as :mod:`datarax.core.dtypes`.

Example:
    >>> import numpy as np
    >>> fit_column("label", np.array([0, 7, 9]), where="MySource", cast_float64=False).dtype
    dtype('int32')
    >>> fit_column("id", np.array([1, 2**40]), where="MySource", cast_float64=False)
    Traceback (most recent call last):
    ...
    datarax.core.dtypes.NarrowingError: MySource: field 'id' is int64 and record 1 holds 1099511627776, outside the int32 range, so it cannot be cast to int32 without loss while jax_enable_x64 is off. Enable x64 with jax.config.update('jax_enable_x64', True), or drop the field (exclude_keys).
    >>> fit_value("score", 0.5, cast_float64=False).dtype  # a Python float: JAX's default
    dtype('float32')
    >>> is_text_value(np.array(["a", "b"])), is_text_value(np.zeros(2))
    (True, False)
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, Union

import numpy as np

from datarax.errors import ConfigError, RecordError

#: numpy dtype kinds that hold text (``O``: ``object`` arrays are taken to hold strings).
TEXT_KINDS = "USOT"
#: the fix named last in every 64-bit message, unless the caller names its own.
DROP_FIELD = "drop the field (exclude_keys)"

_INT32 = np.iinfo(np.int32)


class NarrowingError(RecordError):
    """A record holds a value the 32-bit type JAX uses while ``jax_enable_x64`` is off
    cannot hold; the message names the setting to change, not a fault in the file."""


NarrowingError.__module__ = "datarax.core.dtypes"  # its documented home (tracebacks, docs)

_NARROW = {
    np.dtype(np.int64): np.dtype(np.int32),
    np.dtype(np.uint64): np.dtype(np.int32),
    np.dtype(np.float64): np.dtype(np.float32),
    np.dtype(np.complex128): np.dtype(np.complex64),
}


#: a decode worker's answer to :func:`x64_enabled`, set by :func:`follow_x64` (no JAX import)
_WORKER_X64: bool | None = None


def x64_enabled() -> bool:
    """Whether ``jax_enable_x64`` is on right now (in a decode worker: in its parent)."""
    jax = sys.modules.get("jax")
    if jax is None:
        if _WORKER_X64 is not None:
            return _WORKER_X64
        import jax
    return bool(jax.config.jax_enable_x64)


def follow_x64(enabled: bool) -> None:
    """Make :func:`x64_enabled` answer ``enabled`` here until JAX is imported (decode workers)."""
    global _WORKER_X64
    _WORKER_X64 = bool(enabled)


def is_text_dtype(dtype: Any) -> bool:
    """True for numpy dtypes that hold strings (``U``/``S``/``O``/``T`` kinds)."""
    return np.dtype(dtype).kind in TEXT_KINDS


def is_text_scalar(value: Any) -> bool:
    """True for one ``str`` or ``bytes`` (numpy's ``str_``/``bytes_`` too).

    Example:
        >>> is_text_scalar("a"), is_text_scalar(np.bytes_(b"a")), is_text_scalar(["a"])
        (True, True, False)
    """
    return isinstance(value, (str, bytes))


def text_kind(value: Any) -> str | None:
    """``"str"``/``"bytes"`` for text of that one kind, ``""`` for mixed kinds, None for non-text.

    Example:
        >>> mixed = np.array(["a", b"b"], dtype=object)
        >>> text_kind("a"), text_kind(np.array([b"a"])), text_kind(mixed), text_kind(1)
        ('str', 'bytes', '', None)
    """
    if isinstance(value, str):
        return "str"
    if isinstance(value, bytes):
        return "bytes"
    if not isinstance(value, (np.ndarray, list, tuple)):
        return None
    array = np.asarray(value)
    if array.dtype.kind == "U":
        return "str"
    if array.dtype.kind == "S":
        return "bytes"
    if array.dtype.kind != "O":
        return None
    kinds = {text_kind(v) for v in array.reshape(-1)}
    return kinds.pop() if len(kinds) == 1 else ""


def is_text_value(value: Any) -> bool:
    """True for host string data: ``str``/``bytes``, a text array, a sequence of ``str``
    or of text arrays (a field of several strings per record)."""
    if is_text_scalar(value):
        return True
    if isinstance(value, np.ndarray):
        return value.dtype.kind in TEXT_KINDS
    if isinstance(value, Sequence) and len(value) > 0:
        first = value[0]
        return is_text_scalar(first) or (
            isinstance(first, np.ndarray) and first.dtype.kind in TEXT_KINDS)
    return False


def is_host_leaf(value: Any) -> bool:
    """Whether ``value`` is a batch leaf kept on the host: text or a list of per-record values.

    Example:
        >>> is_host_leaf(["a", "b"]), is_host_leaf([[1], [2, 3]]), is_host_leaf(np.zeros(2))
        (True, True, False)
    """
    return is_text_value(value) or isinstance(value, list)


def text_as_list(value: Any) -> Any:
    """A numpy text field as a list (of ``str``, or of each record's string array); else ``value``.

    Example:
        >>> text_as_list(np.array(["a", "b"])), len(text_as_list(np.array([["a", "b"]])))
        (['a', 'b'], 1)
    """
    if isinstance(value, np.ndarray) and value.dtype.kind in TEXT_KINDS:
        return value.tolist() if value.ndim == 1 else list(value)
    return value


def is_64bit(dtype: Any) -> bool:
    """True for the dtypes JAX narrows while x64 is off (int64, uint64, float64, complex128)."""
    return np.dtype(dtype) in _NARROW


def declared_64bit(dtypes: dict[str, Any]) -> list[str]:
    """Fields of ``{name: dtype}`` that are 64-bit while x64 is off."""
    if x64_enabled():
        return []
    return [name for name, dtype in dtypes.items() if is_64bit(dtype)]


Records = Union[int, np.ndarray]
"""A column's records, for messages: row 0's number (rows consecutive) or each row's."""


def record_number(records: Records, row: int) -> int:
    """The number of ``row``'s record.

    >>> record_number(10, 2), record_number(np.array([3, 7, 11]), 2)
    (12, 11)
    """
    if isinstance(records, np.ndarray):
        return int(records[row])
    return int(records) + row


def fit_column(
    field: str,
    value: Any,
    *,
    where: str | None,
    cast_float64: bool,
    first_record: Records | None = 0,
    drop_hint: str = DROP_FIELD,
) -> Any:
    """One field's values (records along axis 0) under this module's policy.

    ``first_record`` (:data:`Records`) names the record of a value that does not fit.
    """
    jax = sys.modules.get("jax")  # a JAX array: only where JAX is loaded
    if jax is not None and isinstance(value, jax.Array):
        return value
    weak = not isinstance(value, (np.ndarray, np.generic))  # Python numbers (or lists)
    array = np.asarray(value)
    if not array.dtype.isnative:  # big-endian ('>i4'): JAX takes the same values native
        array = array.astype(array.dtype.newbyteorder("="))
    if array.dtype.kind in TEXT_KINDS or array.dtype not in _NARROW or x64_enabled():
        return value if array.dtype.kind in TEXT_KINDS else array
    prefix = f"{where}: " if where else ""
    end = "." if first_record is not None else ""  # fit_value: a clause for the caller
    dtype, target = array.dtype, _NARROW[array.dtype]
    if dtype.kind in "iu":
        if array.size:
            too_big = array > _INT32.max
            if dtype.kind == "i":
                too_big |= array < _INT32.min
            if too_big.any():
                flat = int(np.flatnonzero(too_big.reshape(-1))[0])
                bad = array.reshape(-1)[flat]
                record, at = _record_of(array, flat, first_record)
                raise NarrowingError(
                    f"{prefix}field '{field}' is {dtype.name} and {at}holds {bad}, outside "
                    "the int32 range, so it cannot be cast to int32 without loss while "
                    "jax_enable_x64 is off. Enable x64 with "
                    f"jax.config.update('jax_enable_x64', True), or {drop_hint}{end}",
                    index=record,
                )
        return array.astype(target)
    if not (cast_float64 or weak):
        raise ConfigError(
            f"{prefix}field '{field}' is {dtype.name} but jax_enable_x64 is off, and datarax "
            f"never narrows silently. Set cast_float64=True in the config to cast it to "
            f"{target.name}, enable x64 with jax.config.update('jax_enable_x64', True), or "
            f"{drop_hint}{end}"
        )
    with np.errstate(over="ignore", invalid="ignore"):
        out = array.astype(target)
    overflow = np.isinf(out) & ~np.isinf(array)
    if overflow.any():  # a finite value past float32's range would become inf
        flat = int(np.flatnonzero(overflow.reshape(-1))[0])
        record, at = _record_of(array, flat, first_record)
        raise NarrowingError(
            f"{prefix}field '{field}' is {dtype.name} and {at}holds "
            f"{array.reshape(-1)[flat]}, beyond the {target.name} range, so casting it to "
            f"{target.name} would make it inf. Enable x64 with "
            f"jax.config.update('jax_enable_x64', True), scale the values, or {drop_hint}{end}",
            index=record,
        )
    return out


def _record_of(array: np.ndarray, flat: int, first_record: Records | None) -> tuple[int | None, str]:
    """The record holding flat element ``flat`` and its words for a message."""
    if first_record is None or not array.ndim:
        return None, ""
    record = record_number(first_record, flat // max(1, int(np.prod(array.shape[1:]))))
    return record, f"record {record} "


def fit_value(
    field: str,
    value: Any,
    *,
    cast_float64: bool,
    where: str | None = None,
    drop_hint: str = DROP_FIELD,
) -> Any:
    """One record's value under this module's policy; the message is a clause without
    its period, the caller (e.g. the host reader) adds the record's location."""
    return fit_column(field, value, where=where, cast_float64=cast_float64,
                      first_record=None, drop_hint=drop_hint)
