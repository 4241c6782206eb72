"""The record layout: one record's bytes, and a batch of records decoded into columns.

A record (:func:`encode_record`) is a fixed-size head, then a variable tail. The head
holds every ``raw`` field's little-endian bytes, then one little-endian ``uint32`` payload
length per variable field (``varlen``, ``png``, ``jpeg``, ``utf8``); the tail holds those
payloads (a ``varlen`` one starts with one ``uint32`` per ``None`` dimension), all in field
order. So :func:`decode_records` cuts a batch's fixed fields with no Python call per
record; only variable fields (images, text) are decoded record by record.

Example:
    >>> import numpy as np
    >>> from datarax.dataset.fields import infer_features
    >>> feats = infer_features({"x": np.float32([1, 2]), "name": "a"})
    >>> recs = [encode_record(feats, {"x": np.float32([i, i]), "name": f"r{i}"}) for i in range(3)]
    >>> out = decode_records(feats, recs)
    >>> out["x"][:, 0].tolist(), list(out["name"])
    ([0.0, 1.0, 2.0], ['r0', 'r1', 'r2'])
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from datarax.dataset.fields import (
    Features,
    Field,
    RecordMismatchError,
    error_text,
    located,
    no_value,
    not_an_array,
    null_in_list,
)
from datarax.dataset.image_payload import image_payload, stored_as_it_is
from datarax.dataset.image_open import image_named
from datarax.dataset.images import IMAGE_MODES, open_image
from datarax.errors import MissingExtraError, RecordError
from datarax.host.arrays import fresh_aligned

__all__ = ["DATASET_DTYPE_FIX", "decode_records", "encode_record", "record_encoder"]

#: the fix a 64-bit message names last for a dataset's field read back while x64 is off
#: (its readers have no ``exclude_keys``, and their decode is not the user's)
DATASET_DTYPE_FIX = ("rewrite the dataset with the field as 32 bits (where its values fit) "
                     "or without it")

_U32 = np.dtype("<u4")
_F32 = struct.Struct("<f")


@functools.lru_cache(maxsize=64)
def _lengths(count: int) -> struct.Struct:
    """The little-endian ``uint32`` payload lengths of ``count`` variable fields."""
    return struct.Struct(f"<{count}I")


def little_endian(dtype: Any) -> np.dtype:
    """``dtype`` stored little-endian, the native dtype itself on a little-endian machine
    (an equal ``'<i4'`` would be handed back by JAX's dtype cache for every later int32)."""
    dtype = np.dtype(dtype)
    return dtype if np.little_endian else dtype.newbyteorder("<")
_BIG_ENDIAN = np.dtype("=u4").byteorder == ">" or np.little_endian is False


def _numeric(f: Field, value: Any, row: int | None) -> np.ndarray:
    out = _fitted(f, value, row)
    if f.class_names is not None and out.dtype.kind in "iu" and out.size:
        count = len(f.class_names)
        bad = out[(out < -1) | (out >= count)]
        if bad.size:
            raise RecordMismatchError(
                f"{located(f.name, row)}: the label {bad.flat[0]} is outside its {count} class "
                f"names (0..{count - 1}, or -1 for no label): correct the label, or give the field "
                "every class name.", field=f.name, row=row)
    return out


def _scalar_bytes(f: Field, value: Any) -> bytes | None:
    """The bytes of a Python ``int`` in an ``int64`` scalar field or a finite ``float`` in
    a ``float32`` one, without NumPy, when it fits; None leaves it to :func:`_numeric`."""
    kind = type(value)
    if f.shape != () or (kind is not int and kind is not float):
        return None
    if kind is int and f.dtype == "int64":
        if f.class_names is not None and not -1 <= value < len(f.class_names):
            return None
        return value.to_bytes(8, "little", signed=True) if -2**63 <= value < 2**63 else None
    if kind is float and f.dtype == "float32" and value - value == 0.0:  # finite
        try:
            return _F32.pack(value)  # rounded as NumPy's cast rounds it
        except OverflowError:  # beyond float32: _numeric names it
            return None
    return None


def _fitted(f: Field, value: Any, row: int | None) -> np.ndarray:
    want = np.dtype(f.dtype)
    if value is None:
        raise no_value(f.name, row)
    if type(value) is np.ndarray and value.dtype == want and value.shape == f.shape and (
            want.byteorder in "=|<" and not _BIG_ENDIAN):
        return value  # the common case: already what the features say
    if isinstance(value, np.ndarray | np.generic):
        array = np.asarray(value)
        if array.dtype != want and not np.can_cast(array.dtype, want, "safe"):
            way = (f", or declare the field {array.dtype}" if array.dtype.kind in "biufc" else
                   f": a field cannot be {array.dtype}, an ml_dtypes type")  # no NumPy name
            raise RecordMismatchError(
                f"{located(f.name, row)}: dtype {array.dtype}, the features say {want} (cast the "
                f"value{way}).", field=f.name, row=row, mismatch=True)
    else:
        try:
            array = np.asarray(value)
        except Exception as err:  # noqa: BLE001 - reported with the row and field
            raise not_an_array(f.name, row, err) from err
        if array.size == 0 and array.dtype.kind in "biuf":
            array = array.astype(want)  # an empty list: no values to check
            if array.ndim == 1 and len(f.shape) > 1 and f.shape[0] in (None, 0):
                # [] in a field of rows of rows: no rows, each of the field's inner shape
                array = array.reshape((0, *(d or 0 for d in f.shape[1:])))
        if isinstance(value, int) and array.dtype.kind == "O":  # beyond 64 bits
            raise RecordMismatchError(
                f"{located(f.name, row)}: the integer {value} does not fit the features' {want}.",
                field=f.name, row=row, mismatch=True)
        if array.dtype.kind not in "biuf" or (array.dtype.kind == "f" and want.kind in "biu"):
            raise null_in_list(f.name, row, value) or RecordMismatchError(
                f"{located(f.name, row)}: a {type(value).__name__} of dtype {array.dtype} does not "
                f"fit the features' {want}.", field=f.name, row=row, mismatch=True)
    with np.errstate(over="ignore", invalid="ignore"):  # checked below, named by row
        out = array.astype(little_endian(want), copy=False)
    if out.dtype != array.dtype and (
        # integers (and bools: 2 is not True) kept exactly; finite floats kept finite
        (out.dtype.kind in "biu" and array.dtype.kind in "biu" and not np.array_equal(out, array))
        or (out.dtype.kind == "f" and bool((np.isinf(out) & ~np.isinf(array)).any()))
    ):
        wider = {"f": "float64", "i": "int64", "u": "uint64"}.get(want.kind, want.name)
        keep = (f" (declare the field {wider} in features= to keep them)"
                if wider != want.name else "")
        raise RecordMismatchError(f"{located(f.name, row)}: values do not fit {want}{keep}.",
                                  field=f.name, row=row, mismatch=True)
    if out.dtype.kind == "f" and array.dtype.kind in "iu" and not np.array_equal(out, array):
        raise RecordMismatchError(
            f"{located(f.name, row)}: the integer {array.flat[np.argmax(out != array)]} has "
            f"no exact {want} value (it would be stored as "
            f"{out.flat[np.argmax(out != array)]:.9g}); declare the field int64 (features=), "
            "or give the value as a float.", field=f.name, row=row)
    shape = out.shape
    if len(shape) != len(f.shape) or any(d is not None and d != s for d, s in zip(f.shape, shape)):
        raise RecordMismatchError(
            f"{located(f.name, row)}: shape {shape}, the features say "
            f"{f.shape}.", field=f.name, row=row, mismatch=True)
    return out


@functools.lru_cache(maxsize=64)
def _plain_encoder(features: Features) -> Callable[[dict[str, Any]], bytes | None] | None:
    """For features of ``int64`` / ``float32`` scalars, text and images only: a function
    giving :func:`encode_record`'s bytes of a plain record, or None to leave it to the
    checks, which name what is wrong."""
    scalars: list[tuple[str, bool, int | None]] = []  # name, int64 (else float32), classes
    variable: list[tuple[str, Field | None]] = []  # name, the image field (None: text)
    for f in features.fields:
        if f.encoding == "raw":
            if f.shape != () or f.dtype not in ("int64", "float32"):
                return None
            classes = len(f.class_names) if f.class_names is not None else None
            scalars.append((f.name, f.dtype == "int64", classes))
        elif f.encoding in ("utf8", "png", "jpeg"):
            variable.append((f.name, None if f.encoding == "utf8" else f))
        else:
            return None
    head = struct.Struct("<" + "".join("q" if is_int else "f" for _, is_int, _ in scalars)
                        + "I" * len(variable))

    def encode(record: dict[str, Any]) -> bytes | None:
        values: list[Any] = []
        for name, is_int, classes in scalars:
            value = record.get(name)
            if is_int:
                if type(value) is not int or (classes is not None and not -1 <= value < classes):
                    return None
            elif type(value) is not float or value - value != 0.0:  # not finite
                return None
            values.append(value)
        tail: list[bytes] = []
        for name, image in variable:
            value = record.get(name)
            if image is None:
                if type(value) is not str:
                    return None
                try:
                    data = value.encode("utf-8")
                except UnicodeEncodeError:
                    return None
            else:
                data = stored_as_it_is(image, value)
                if data is None:
                    return None
            values.append(len(data))
            tail.append(data)
        try:  # an int beyond int64, a float beyond float32: left to the checks
            return b"".join([head.pack(*values), *tail])
        except (struct.error, OverflowError):
            return None

    return encode


def encode_record(features: Features, record: Mapping[str, Any], *, row: int | None = None) -> bytes:
    """One record's bytes in the layout of ``features``; ``row`` (the source row) is named
    in errors.

    Raises:
        RecordMismatchError: a field is missing or extra, or has the wrong dtype or
            shape; an image cannot be decoded; text is not UTF-8.
    """
    return record_encoder(features)(record, row)


def record_encoder(features: Features) -> Callable[..., bytes]:
    """:func:`encode_record` for records of ``features``, worked out once:
    ``encode(record, row=None)``.

    Example:
        >>> from datarax.dataset.fields import infer_features
        >>> feats = infer_features({"text": "a", "label": 1})
        >>> encode = record_encoder(feats)
        >>> encode({"text": "hi", "label": 3}) == encode_record(feats, {"text": "hi", "label": 3})
        True
    """
    plain = _plain_encoder(features)
    count = len(features.fields)

    def encode(record: Mapping[str, Any], row: int | None = None) -> bytes:
        if plain is not None and type(record) is dict and len(record) == count:
            data = plain(record)
            if data is not None:
                return data
        return _checked_record(features, record, row)

    return encode


def _at(row: int | None) -> str:
    """``row 3: `` before a message about a whole record, or nothing when rows are unknown."""
    return f"row {row}: " if row is not None else ""


def _checked_record(features: Features, record: Any, row: int | None) -> bytes:
    """:func:`encode_record` past the plain encoder: each field checked."""
    if type(record) is dict and len(record) == len(features.fields) and (
            not features.variable_fields):
        try:  # exactly the features' raw fields (no per-record checks of keys)
            return b"".join([_numeric(f, record[f.name], row).tobytes()
                             for f in features.fields])
        except KeyError:
            pass  # a field is missing: the checks below name it
    if not isinstance(record, Mapping):
        raise RecordMismatchError(
            f"{_at(row)}a record is a dict of fields, got {type(record).__name__}.", row=row)
    extra = [k for k in record if k not in features.names]
    if extra:
        raise RecordMismatchError(
            f"{_at(row)}field '{extra[0]}' is not in the features {list(features.names)}.",
            field=str(extra[0]), row=row)
    head: list[bytes] = []
    lengths: list[int] = []
    tail: list[bytes] = []
    for f in features.fields:
        if f.name not in record:
            raise RecordMismatchError(
                f"{located(f.name, row)}: missing (the features name {list(features.names)}).",
                field=f.name, row=row)
        value = record[f.name]
        if value is None:
            raise no_value(f.name, row)
        if f.encoding == "raw":
            head.append(_scalar_bytes(f, value) or _numeric(f, value, row).tobytes())
            continue
        if f.encoding == "utf8":
            if isinstance(value, (bytes, bytearray, memoryview)):
                try:
                    bytes(value).decode("utf-8")
                except UnicodeDecodeError as err:
                    raise RecordMismatchError(
                        f"{located(f.name, row)}: text is not valid UTF-8 ({err}); a file in "
                        "another encoding (Latin-1, Windows-1252) is saved as UTF-8 first.",
                        field=f.name, row=row) from err
                payload = bytes(value)
            elif isinstance(value, str):
                try:
                    payload = value.encode("utf-8")
                except UnicodeEncodeError as err:
                    raise RecordMismatchError(
                        f"{located(f.name, row)}: text cannot be written as UTF-8 ({err}).",
                        field=f.name, row=row) from err
            else:
                raise RecordMismatchError(
                    f"{located(f.name, row)}: expected str, got {type(value).__name__}.",
                    field=f.name, row=row, mismatch=True)
        elif f.encoding == "varlen":
            if isinstance(value, (bytes, bytearray, memoryview)):
                value = np.frombuffer(bytes(value), np.uint8)
            array = _numeric(f, value, row)
            dims = [s for d, s in zip(f.shape, array.shape) if d is None]
            payload = np.asarray(dims, _U32).tobytes() + array.tobytes()
        else:
            payload = image_payload(f, value, row)
        lengths.append(len(payload))
        tail.append(payload)
    return b"".join(head) + _lengths(len(lengths)).pack(*lengths) + b"".join(tail)


def _in_batch(index: int, n: int) -> str:
    """``record 3 of the batch``, or ``the record`` when it is the only one."""
    return "the record" if n == 1 else f"record {index} of the batch"


def _decode_image(f: Field, data: bytes, index: int, n: int) -> np.ndarray:
    try:
        with image_named(f"{_in_batch(index, n)}, field '{f.name}'"):
            image = open_image(data)
    except MissingExtraError:  # Pillow not installed: no record is to blame
        raise
    except Exception as err:  # noqa: BLE001 - named by record
        raise RecordError(f"{_in_batch(index, n)}, field '{f.name}': undecodable "
                          f"{f.encoding} image ({error_text(err)}).") from err
    mode = IMAGE_MODES[f.shape[2]]
    if image.mode != mode:
        image = image.convert(mode)
    array = np.asarray(image)
    return array.reshape(array.shape[0], array.shape[1], f.shape[2])


def _stack(f: Field, values: list[np.ndarray],
           empty: Callable[[tuple[int, ...], np.dtype], np.ndarray]) -> np.ndarray:
    if None not in f.shape:
        out = empty((len(values), *f.shape), np.dtype(f.dtype))
    else:  # an array per record
        out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def _native(column: np.ndarray, dtype: np.dtype,
            empty: Callable[[tuple[int, ...], np.dtype], np.ndarray]) -> np.ndarray:
    """``column`` (little-endian) in the host's byte order, in an array from ``empty``."""
    if column.dtype == dtype:
        return column
    out = empty(column.shape, dtype)
    out[...] = column
    return out


@functools.lru_cache(maxsize=64)
def _raw_layout(features: Features) -> tuple[tuple[str, int, int, np.dtype, np.dtype, tuple[int, ...]], ...]:
    """Per raw field: name, head offset, bytes, stored and native dtype, shape."""
    out = []
    offset = 0
    for f in features.raw_fields:
        dtype = np.dtype(f.dtype)
        out.append((f.name, offset, f.nbytes, little_endian(dtype), dtype, f.shape))
        offset += f.nbytes
    return tuple(out)


def decode_records(features: Features, records: Sequence[bytes], *,
                   empty: Callable[[tuple[int, ...], np.dtype], np.ndarray] | None = None,
                   encoded: frozenset[str] = frozenset(),
                   ) -> dict[str, np.ndarray]:
    """A batch of encoded records as one array per field, one row per record.

    ``raw`` fields and fixed-shape images come out as ``(n, *shape)`` arrays, allocated by
    ``empty(shape, dtype)`` (default: 64-byte aligned); text as an object array of
    ``str``; fields with a variable dimension as object arrays of per-record arrays; the
    image fields named in ``encoded`` as object arrays of their stored PNG / JPEG bytes
    (for a decoder of its own, e.g. :func:`datarax.decode_images`).

    Raises:
        RecordError: a record's length does not match its layout, or an image cannot
            be decoded (the message names the record's place in the batch).
    """
    empty = empty or fresh_aligned
    n = len(records)
    head = features.head_size
    lengths = np.fromiter(map(len, records), np.int64, n)
    variable = features.variable_fields
    layout = _raw_layout(features)
    out: dict[str, Any] = {}
    if not variable:
        bad = np.flatnonzero(lengths != head)
        if bad.size:
            raise RecordError(
                f"{_in_batch(int(bad[0]), n)} has {int(lengths[bad[0]])} bytes, the "
                f"features' layout {head}; the files do not match their metadata.")
        if len(layout) == 1 and head and n:  # the record is the field: one copy into rows
            name, _, _, little, dtype, shape = layout[0]
            column = empty((n, *shape), little)
            column.view(np.uint8).reshape(n, head).view(f"S{head}").reshape(n)[:] = records
            out[name] = _native(column, dtype, empty)
            return out
        block = np.frombuffer(b"".join(records), np.uint8).reshape(n, head)
    else:
        bad = np.flatnonzero(lengths < head)
        if bad.size:
            raise RecordError(
                f"{_in_batch(int(bad[0]), n)} has {int(lengths[bad[0]])} bytes, shorter "
                f"than the features' head of {head}; the files do not match their metadata.")
        joined = np.frombuffer(b"".join(records), np.uint8)
        starts = np.cumsum(lengths) - lengths
        block = joined[starts[:, None] + np.arange(head)] if n else np.zeros((0, head), np.uint8)
    for name, offset, nbytes, little, dtype, shape in layout:
        column = empty((n, *shape), little)
        if nbytes:
            column.view(np.uint8).reshape(n, nbytes)[...] = block[:, offset:offset + nbytes]
        out[name] = _native(column, dtype, empty)
    offset = head - 4 * len(variable)
    if variable:
        sizes = np.ascontiguousarray(block[:, offset:head]).view(_U32).reshape(n, len(variable))
        ends = np.cumsum(sizes.astype(np.int64), axis=1)
        bad = np.flatnonzero(lengths != head + (ends[:, -1] if n else 0))
        if bad.size:
            raise RecordError(
                f"{_in_batch(int(bad[0]), n)} has {int(lengths[bad[0]])} bytes, its "
                "layout says otherwise; the files do not match their metadata.")
        for j, f in enumerate(variable):
            values: list[Any] = []
            for i, record in enumerate(records):
                a = head + int(ends[i, j] - sizes[i, j])
                payload = record[a:head + int(ends[i, j])]
                if f.encoding == "utf8":
                    values.append(bytes(payload).decode("utf-8"))
                elif f.encoding == "varlen":
                    k = sum(d is None for d in f.shape)
                    dims = np.frombuffer(payload[:4 * k], _U32).tolist()
                    it = iter(dims)
                    shape = tuple(next(it) if d is None else d for d in f.shape)
                    values.append(np.frombuffer(payload[4 * k:], little_endian(f.dtype))
                                  .astype(f.dtype).reshape(shape))
                elif f.name in encoded:
                    values.append(bytes(payload))
                else:
                    values.append(_decode_image(f, bytes(payload), i, n))
            if f.encoding == "utf8" or f.name in encoded:
                text = np.empty(n, dtype=object)
                text[:] = values
                out[f.name] = text
            else:
                out[f.name] = _stack(f, values, empty)
    return {name: out[name] for name in features.names}
