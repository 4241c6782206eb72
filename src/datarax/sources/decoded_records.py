"""Decoded records of a reader-backed source: checked against the first record, stacked.

A random-access source's ``decode(raw) -> dict`` runs on reader threads for every
record. :class:`DecodedRecords` learns the structure (fields, shapes, dtypes — after
the one dtype policy of :mod:`datarax.core.dtypes`) from the first readable record and
refuses a later record that differs, naming the field (a text field holds ``str`` in every
record or ``bytes`` in every record, as the first does); a hot path accepts records that
are already numpy arrays of the learned shapes without re-checking them.
:func:`stack_values` stacks a field's per-record values into one 64-byte aligned
batch array.

Example:
    >>> import numpy as np
    >>> records = DecodedRecords(lambda b: {"x": np.frombuffer(b, np.int32)})
    >>> records.learn(np.int32([1, 2]).tobytes(), 0)["x"].tolist()
    [1, 2]
    >>> records.check(np.int32([1, 2, 3]).tobytes())
    Traceback (most recent call last):
    ...
    datarax.sources.decoded_records.RecordStructureError: field 'x' decodes to int32(3,), the first record's is int32(2,); every record must decode to the same shapes and dtypes
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

# host-side pieces only, no JAX or Flax: decode worker processes load this module
from datarax.errors import ConfigError, DataraxError
from datarax.host.arrays import CPU_SHARED_ALIGNMENT, aligned_copy, fresh_aligned, seal
from datarax.host.dtypes import fit_value, text_kind
from datarax.host.specs import ArraySpec, TextSpec, describe_field, host_field_spec

__all__ = ["DecodedRecords", "KeyedRecord", "RecordStructureError", "describe_cause", "keyed",
           "spec_of", "stack_values", "structure_hint", "SKIP_ADVICE"]


class KeyedRecord(NamedTuple):
    """A raw record with its stable index and the pass (epoch) reading it: what a reader
    hands a ``decode`` that sets ``takes_record_keys = True`` (e.g.
    :func:`datarax.decode_images` with a random crop), so a random decision can be made
    per record, the same at any batch size, worker count and after a resume."""

    raw: Any
    index: int
    epoch: int


def keyed(decode: Callable[..., Any]) -> bool:
    """Whether ``decode`` takes :class:`KeyedRecord` s (its ``takes_record_keys``)."""
    return bool(getattr(decode, "takes_record_keys", False))


def spec_of(value: Any) -> Any:
    """Per-record spec of one decoded field value (:func:`~datarax.core.spec.field_spec`)."""
    from datarax.core.spec import field_spec  # JAX: in the source's process only

    return field_spec(value)


_TEXT_FIX = {"str": "bytes.decode('utf-8') turns bytes into str",
             "bytes": "str.encode('utf-8') turns str into bytes"}


def _kind_name(value: Any, kind: str | None) -> str:
    """What a value that is not one kind of text holds, for a message: ``NoneType``, or
    ``a mix of NoneType and str`` for an array (a list) of several kinds."""
    if isinstance(value, (np.ndarray, list, tuple)):
        names = sorted({type(v).__name__ for v in np.asarray(value, dtype=object).reshape(-1)})
        if not names:
            return "an empty object array"
        return f"a mix of {' and '.join(names)}" if len(names) > 1 else f"an array of {names[0]}"
    return "mixed str and bytes" if kind == "" else type(value).__name__


def _not_text(key: str, value: Any, kind: str | None) -> RecordStructureError:
    """The error for field ``key`` of the first record holding neither numbers nor text
    (None, an object, str mixed with other values)."""
    return RecordStructureError(
        f"field '{key}' decodes to {_kind_name(value, kind)}, which is neither numbers nor "
        "text: return a number, an array of numbers, or str / bytes (in every record) for "
        "it from decode (a missing value: a placeholder such as '' or -1)"
    )


_SHAPE = operator.attrgetter("shape")
_DTYPE = operator.attrgetter("dtype")

def stack_values(values: list[Any]) -> np.ndarray:
    """Stack per-record values into one batch array, 64-byte aligned and read-only
    when numeric (datarax's own: the pipeline places it without another copy)."""
    first = values[0]
    spec = host_field_spec(first)
    if isinstance(spec, TextSpec):
        # an object column, value by value: numpy's str and bytes dtypes drop trailing
        # NULs (b"\x05\x00" would come back as b"\x05", "a\x00" as "a")
        text = np.empty((len(values), *spec.shape), dtype=object)
        for row, value in enumerate(values):
            text[row] = value.item() if isinstance(value, np.ndarray) and not value.ndim else value
        return text
    first = np.asarray(first)
    out = fresh_aligned((len(values), *first.shape), first.dtype)
    np.stack(values, out=out)
    return seal(out)


def _stack_into(column: np.ndarray, values: list[np.ndarray]) -> None:
    """Fill ``column`` (shapes and dtypes already checked) with ``values``: their bytes
    joined in one pass when C-contiguous (Python's lock released once, not per value),
    else by ``np.concatenate``; records of 64 KiB and more are stacked straight into the
    column (the join's temporary copy would cost more than the copy itself)."""
    if values and column.nbytes >= len(values) << 16:
        np.stack(values, out=column)
        return
    try:
        joined = b"".join(values)
    except TypeError:  # a value that is not C-contiguous
        rows, first, *rest = column.shape
        np.concatenate(values, out=column.reshape(rows * first, *rest))
        return
    column[...] = np.frombuffer(joined, column.dtype).reshape(column.shape)


class RecordStructureError(ValueError):
    """A decoded record whose structure differs from the first record's."""


#: how a message tells the user to skip bad records, for a source whose config has
#: ``on_error`` (every built-in source's does).
SKIP_ADVICE = "construct the source with on_error='skip'"


def structure_hint(cause: BaseException, skip_advice: str = SKIP_ADVICE) -> str | None:
    """What to do about a record that decodes to other fields, shapes or dtypes than the
    first (the file may well be fine); None for any other failure. ``skip_advice``: how
    to skip bad records with this source."""
    if not isinstance(cause, RecordStructureError):
        return None
    return ("The file may be fine: pass a decode= that gives every record the same "
            "(records of several lengths: pad or cut them; images of several sizes: "
            f"decode=datarax.decode_images(...)), or {skip_advice} "
            "to drop such records (they are counted and reported).")


#: the fix a 64-bit message names last for a decoded value.
_DECODE_FIX = "cast or drop the field in decode"


def describe_cause(cause: BaseException) -> str:
    """A failure's cause for a message: datarax's own errors in their words (without a
    closing period, the message goes on); others with their type."""
    if isinstance(cause, (RecordStructureError, DataraxError)):
        return str(cause).rstrip(".")
    return f"{type(cause).__name__}: {cause}"


def _nested(key: str, value: Mapping[str, Any], *, first: bool) -> Exception:
    """The error for field ``key`` of a decoded record holding a dict: a decode that
    returns one from its first record is set up wrong (a ConfigError, never skipped as a
    bad record); a later record that does differs from the first."""
    path = str(key)
    while isinstance(value, Mapping) and value:
        inner, value = next(iter(value.items()))
        path += f"/{inner}"
    if path == str(key):
        where, fix = f"field '{key}' holds an empty dict", f"drop '{key}'"
    else:
        where = f"field '{path}' is inside the dict under '{key}'"
        fix = f"return each field at the top level, e.g. '{path.replace('/', '_')}' for '{path}'"
    if first:
        return ConfigError(
            f"decode returned a nested dict ({where}), and a reader's records are flat dicts "
            f"of arrays, numbers or strings: {fix}")
    return RecordStructureError(
        f"decode returned a nested dict ({where}), the first record's fields are flat "
        f"arrays, numbers or strings: {fix}")


class DecodedRecords:
    """``decode`` plus the structure of the first record every later one must match.

    Args:
        decode: raw record -> dict of arrays (numbers / numpy arrays / strings).
        cast_float64: decoded ``float64`` values are cast to ``float32`` (else refused).
    """

    def __init__(self, decode: Callable[[Any], Mapping[str, Any]], *, cast_float64: bool = False) -> None:
        self.decode = decode
        self.cast_float64 = cast_float64
        # the fix a 64-bit message names last: a decoder of datarax's own (a dataset's,
        # which the user did not write) names its own as ``dtype_fix``
        self.dtype_fix = getattr(getattr(decode, "__self__", None), "dtype_fix", _DECODE_FIX)
        # per-record host specs (no JAX: workers check against them), from the first record
        self.fields: dict[str, ArraySpec | TextSpec] | None = None
        self._spec: dict[str, Any] | None = None  # .spec, made once in the source's process
        self.spec_index: int | None = None  # which record that was
        self._text: dict[str, str] = {}  # text field -> "str" or "bytes", from the first record
        self._fast: dict[str, tuple[tuple[int, ...], np.dtype]] = {}

    @property
    def spec(self) -> dict[str, Any] | None:
        """The per-record spec of the first record (``jax.ShapeDtypeStruct`` /
        :class:`~datarax.core.spec.TextSpec` per field), None before :meth:`learn`."""
        if self.fields is None:
            return None
        if self._spec is None:
            from datarax.core.spec import as_field_spec  # JAX: in the source's process only

            self._spec = {key: as_field_spec(spec) for key, spec in self.fields.items()}
        return self._spec

    def __getstate__(self) -> dict[str, Any]:
        """What a decode worker receives: the JAX spec is left behind (it is rebuilt from
        :attr:`fields` where asked for), so unpickling does not import JAX."""
        return {**self.__dict__, "_spec": None}

    def check_batch(self, raws: list[Any], decode_batch: Callable[[list[Any]], Mapping[str, Any]]
                    ) -> dict[str, np.ndarray] | None:
        """``decode_batch(raws)`` as columns, or None where they do not match the first
        record's structure (exactly its fields, one row per record of its shape and
        dtype) — the caller then decodes record by record, which names a bad record."""
        try:
            columns = decode_batch(raws)
        except Exception:  # noqa: BLE001 - narrowed down record by record
            return None
        if type(columns) is not dict or len(columns) != len(self._fast) or self.fields is None:
            return None
        if len(self._fast) != len(self.fields):  # text fields: the per-record path
            return None
        out = {}
        for key, (shape, dtype) in self._fast.items():
            value = columns.get(key)
            if type(value) is not np.ndarray or value.shape != (len(raws), *shape) or value.dtype != dtype:
                return None
            if value.ctypes.data % CPU_SHARED_ALIGNMENT or not value.flags.c_contiguous:
                value = seal(aligned_copy(value))  # so that JAX can take it without a copy
            out[key] = value
        return out

    def decode_all(self, raws: list[Any]) -> tuple[dict[str, np.ndarray] | None, list[Any] | None]:
        """Every record of a chunk decoded, and — where each is exactly the first
        record's structure as numpy values — stacked into columns, checked per field
        at once rather than record by record.

        Returns ``(columns, decoded)``: columns None where some record differs
        (:meth:`check_decoded` then checks ``decoded`` one by one, naming the record);
        ``decoded`` None where ``decode`` raised (the caller decodes one by one). A
        ``decode`` with a ``decode_chunk(raws) -> columns`` method (:func:`datarax.decode_images`)
        fills the columns itself, checked as :meth:`check_batch` checks them.
        """
        decode_chunk = getattr(self.decode, "decode_chunk", None)
        if decode_chunk is not None:  # a decoder that fills whole columns (decode_images)
            columns = self.check_batch(raws, decode_chunk)
            if columns is not None:
                return columns, None
        try:
            decoded = list(map(self.decode, raws))
        except Exception:  # noqa: BLE001 - narrowed down record by record
            return None, None
        fast = self._fast
        if self.fields is None or not decoded or len(fast) != len(self.fields):
            return None, decoded  # text fields: the per-record path
        if set(map(type, decoded)) != {dict} or set(map(len, decoded)) != {len(fast)}:
            return None, decoded
        n = len(decoded)
        out = {}
        for key, (shape, dtype) in fast.items():
            try:
                values = list(map(operator.itemgetter(key), decoded))
            except KeyError:
                return None, decoded
            # numpy values of the first record's shape and exactly its dtype (checked
            # over the whole field at once, each test one pass in C)
            if not all(kind is np.ndarray or issubclass(kind, np.generic)
                       for kind in set(map(type, values))):
                return None, decoded
            if set(map(_SHAPE, values)) != {shape} or set(map(_DTYPE, values)) != {dtype}:
                return None, decoded
            column = fresh_aligned((n, *shape), dtype)
            if shape:  # one copy of every record into its row, no view per record
                _stack_into(column, values)
            else:
                column[...] = values
            out[key] = seal(column)
        return out, decoded

    def check(self, raw: Any) -> Mapping[str, Any]:
        """Decode ``raw`` and check it against the first record (:meth:`learn` first)."""
        return self._checked(self.decode(raw), self.fields)

    def check_decoded(self, record: Any) -> Mapping[str, Any]:
        """Check a record ``decode`` returned against the first record."""
        return self._checked(record, self.fields)

    def learn(self, raw: Any, index: int) -> Mapping[str, Any]:
        """Decode record ``index``, the first readable one: its fields, shapes and dtypes
        become the structure every later record must have."""
        record = self._checked(self.decode(raw), None)
        fields = {k: host_field_spec(v) for k, v in record.items()}
        text = {k: text_kind(record[k]) for k, v in fields.items() if isinstance(v, TextSpec)}
        for key, kind in text.items():
            if not kind:  # None, an object, text mixed with other values: not a field
                raise _not_text(key, record[key], kind)
        self.fields = fields
        self._spec = None
        self._fast = {k: (v.shape, np.dtype(v.dtype)) for k, v in self.fields.items()
                      if isinstance(v, ArraySpec)}
        self.spec_index = index
        self._text = text
        return record

    def _checked(self, record: Any, reference: dict[str, Any] | None) -> Mapping[str, Any]:
        fast = self._fast
        if reference is not None and type(record) is dict and len(record) == len(fast) == len(reference):
            # Hot path: every field a numpy array of the first record's shape and dtype.
            try:
                for key, (shape, dtype) in fast.items():
                    value = record[key]
                    kind = type(value)
                    if not (kind is np.ndarray or issubclass(kind, np.generic)) or (
                        value.shape != shape or value.dtype != dtype
                    ):
                        break
                else:
                    return record
            except KeyError:
                pass
        if not isinstance(record, Mapping):
            raise RecordStructureError(
                f"decode returned {type(record).__name__}, expected a dict of arrays "
                "(e.g. {'image': np.frombuffer(record, np.uint8)})"
            )
        if not record:
            raise RecordStructureError("decode returned an empty dict; return at least one field")
        for key, value in record.items():
            if not isinstance(key, str):  # 1 and '1' would both name the batch's field '1'
                raise RecordStructureError(
                    f"decode returned a field named by {type(key).__name__} {key!r}; name "
                    f"every field with a str (e.g. {str(key)!r}): batches are dicts keyed by str")
            if isinstance(value, Mapping):
                raise _nested(key, value, first=reference is None)
        record = {
            key: fit_value(key, value, cast_float64=self.cast_float64, drop_hint=self.dtype_fix)
            for key, value in record.items()
        }
        if reference is None:
            return record
        if list(record.keys()) != list(reference.keys()):
            raise RecordStructureError(
                f"decode returned fields {list(record.keys())}, the first record "
                f"(record {self.spec_index}) has {list(reference.keys())}"
            )
        out = {}
        for key, spec in reference.items():
            value = record[key]
            fast = self._fast.get(key)
            if fast is not None and type(value) is np.ndarray and value.shape == fast[0] and value.dtype == fast[1]:
                out[key] = value
                continue
            got = host_field_spec(value)
            if got != spec:
                raise RecordStructureError(
                    f"field '{key}' decodes to {describe_field(got)}, the first record's is "
                    f"{describe_field(spec)}; every record must decode to the same shapes and "
                    "dtypes"
                )
            declared = self._text.get(key)
            if declared is not None and (kind := text_kind(value)) != declared:
                raise RecordStructureError(
                    f"field '{key}' decodes to {kind or _kind_name(value, kind)}, the first "
                    f"record's (record {self.spec_index}) is {declared}; a text field holds "
                    f"{declared} in every record: return {declared} for it from decode "
                    f"({_TEXT_FIX[declared]})"
                )
            out[key] = value
        return out
