"""The self-describing dataset format: records on ArrayRecord shards plus one JSON file.

A dataset is a folder::

    DST/data-00000-of-00004.array_record   # shards (shard_name)
    DST/...
    DST/datarax_dataset.json               # metadata (METADATA_FILE), written last

**Fields.** :class:`Features` lists :class:`Field` s in order: ``name``, ``dtype`` (a numpy
dtype name; ``"str"`` for text), ``shape`` (``None`` for a variable dimension), and the
``encoding``:

* ``raw`` — fixed-shape numbers, their little-endian bytes;
* ``varlen`` — numbers with variable dimensions (one ``uint32`` per ``None`` dimension,
  then the bytes);
* ``png`` / ``jpeg`` — an image of ``shape`` ``(height, width, channels)``, stored encoded;
* ``utf8`` — a ``str``, stored as UTF-8.

A field may carry ``class_names`` (the label ``i`` means ``class_names[i]``).

**One record** (:func:`encode_record`) is a fixed-size head followed by a variable tail:
the head holds every ``raw`` field's bytes in field order, then one little-endian
``uint32`` payload length per variable field (``varlen``, ``png``, ``jpeg``, ``utf8``),
in field order; the tail holds those payloads in the same order. So
:func:`decode_records` decodes a batch's fixed fields with one ``np.frombuffer`` over the
joined records (or one gather when records differ in length) and views, with no Python
call per record; only variable fields (images, text) are decoded record by record.

**Metadata** (:class:`DatasetInfo`, :func:`write_metadata` / :func:`read_metadata`):
``format`` and ``format_version``, the features, per shard its file name, record count,
size in bytes and SHA-256 (:func:`shard_info` computes them from a finished file),
the rows skipped by a conversion (``{"row", "field", "error"}``) and free-form ``extra``.

**Writing shards elsewhere** (e.g. a distributed runner): encode each record with
:func:`encode_record`, write shard ``i`` of ``n`` to a temporary name, then rename it to
``shard_name(i, n)``; write it with ``array_record``'s ``ArrayRecordWriter(path,
WRITER_OPTIONS)``; collect :func:`shard_info` of each finished shard and finish with
:func:`write_metadata` — a folder without the metadata file is not a dataset yet.

Example:
    >>> import numpy as np
    >>> feats = infer_features({"x": np.float32([1, 2]), "label": 3, "name": "a"})
    >>> [(f.name, f.dtype, f.shape, f.encoding) for f in feats.fields]
    [('x', 'float32', (2,), 'raw'), ('label', 'int64', (), 'raw'), ('name', 'str', (), 'utf8')]
    >>> recs = [encode_record(feats, {"x": np.float32([i, i]), "label": i, "name": f"r{i}"})
    ...         for i in range(3)]
    >>> out = decode_records(feats, recs)
    >>> out["x"][:, 0].tolist(), out["label"].tolist(), list(out["name"])
    ([0.0, 1.0, 2.0], [0, 1, 2], ['r0', 'r1', 'r2'])
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from datarax.errors import DataraxError, RecordError

__all__ = [
    "ENCODINGS",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "METADATA_FILE",
    "WRITER_OPTIONS",
    "DatasetInfo",
    "Field",
    "Features",
    "RecordMismatchError",
    "ShardInfo",
    "decode_records",
    "encode_record",
    "find_dataset",
    "infer_features",
    "read_metadata",
    "shard_info",
    "shard_name",
    "write_metadata",
]

FORMAT_NAME = "datarax.array_record"
FORMAT_VERSION = 1
METADATA_FILE = "datarax_dataset.json"
#: array_record writer options of every shard (random access: one record per chunk).
WRITER_OPTIONS = "group_size:1"
ENCODINGS = ("raw", "varlen", "png", "jpeg", "utf8")
_IMAGE_MODES = {1: "L", 3: "RGB", 4: "RGBA"}
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_JPEG_MAGIC = b"\xff\xd8\xff"
_U32 = np.dtype("<u4")
_ALIGNMENT = 64
_BIG_ENDIAN = np.dtype("=u4").byteorder == ">" or np.little_endian is False


class RecordMismatchError(DataraxError):
    """A record does not match the features: ``row`` (source row, when known) and
    ``field`` say where."""

    def __init__(self, message: str, *, field: str | None = None, row: int | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.row = row


# ----------------------------------------------------------------------- fields
@dataclasses.dataclass(frozen=True)
class Field:
    """One field of a record.

    Attributes:
        name: the field's key in a record.
        dtype: numpy dtype name (``"uint8"``, ``"float32"`` ...); ``"str"`` for ``utf8``.
        shape: per-record shape; ``None`` marks a variable dimension (``varlen``, images).
        encoding: one of :data:`ENCODINGS`.
        class_names: for a label field, the name of each class index.

    Example:
        >>> Field("image", "uint8", (32, 32, 3), "png").fixed
        False
    """

    name: str
    dtype: str
    shape: tuple[int | None, ...]
    encoding: str
    class_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise DataraxError(
                f"field '{self.name}': encoding '{self.encoding}' is not one of {ENCODINGS}.")
        object.__setattr__(self, "shape", tuple(None if d is None else int(d) for d in self.shape))
        if self.encoding == "utf8":
            if self.dtype != "str" or self.shape != ():
                raise DataraxError(f"field '{self.name}': utf8 text has dtype 'str' and shape ().")
        else:
            np.dtype(self.dtype)  # a known dtype, or numpy's error
        if self.encoding == "raw" and None in self.shape:
            raise DataraxError(
                f"field '{self.name}': a raw field has a fixed shape, got {self.shape}; use "
                "encoding 'varlen' for variable dimensions.")
        if self.encoding in ("png", "jpeg") and (
                self.dtype != "uint8" or len(self.shape) != 3 or self.shape[2] not in _IMAGE_MODES):
            raise DataraxError(
                f"field '{self.name}': a {self.encoding} image is uint8 of shape (height, width, "
                f"channels) with 1, 3 or 4 channels, got {self.dtype}{self.shape}.")
        if self.class_names is not None:
            object.__setattr__(self, "class_names", tuple(str(c) for c in self.class_names))

    @property
    def fixed(self) -> bool:
        """Whether the field lives in the fixed-size head (``raw``)."""
        return self.encoding == "raw"

    @property
    def nbytes(self) -> int:
        """Bytes of a ``raw`` field in the head."""
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "dtype": self.dtype, "shape": list(self.shape),
                               "encoding": self.encoding}
        if self.class_names is not None:
            out["class_names"] = list(self.class_names)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Field:
        names = data.get("class_names")
        return cls(str(data["name"]), str(data["dtype"]), tuple(data["shape"]),
                   str(data["encoding"]), tuple(names) if names is not None else None)


@dataclasses.dataclass(frozen=True)
class Features:
    """The ordered fields of every record, and the record layout they imply.

    Example:
        >>> f = Features((Field("x", "float32", (4,), "raw"), Field("t", "str", (), "utf8")))
        >>> f.head_size, f.names
        (20, ('x', 't'))
    """

    fields: tuple[Field, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))
        if not self.fields:
            raise DataraxError("Features needs at least one field.")
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise DataraxError(f"Features: field names repeat: {names}.")

    @functools.cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @functools.cached_property
    def raw_fields(self) -> tuple[Field, ...]:
        return tuple(f for f in self.fields if f.fixed)

    @functools.cached_property
    def variable_fields(self) -> tuple[Field, ...]:
        return tuple(f for f in self.fields if not f.fixed)

    @functools.cached_property
    def head_size(self) -> int:
        """Bytes of a record's fixed head: raw fields, then one uint32 per variable field."""
        return sum(f.nbytes for f in self.raw_fields) + 4 * len(self.variable_fields)

    def __getitem__(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def to_json(self) -> list[dict[str, Any]]:
        return [f.to_json() for f in self.fields]

    @classmethod
    def from_json(cls, data: Sequence[Mapping[str, Any]]) -> Features:
        return cls(tuple(Field.from_json(d) for d in data))


# -------------------------------------------------------------------- inference
def _image_from(value: Any) -> Any:
    """A PIL image for an image value, or None when ``value`` is not one."""
    if type(value).__module__.startswith("PIL."):
        return value
    return None


def _encoded_image_bytes(value: Any) -> bytes | None:
    """Encoded image bytes: raw bytes with a PNG/JPEG signature, or an HF image dict."""
    if isinstance(value, Mapping) and set(value) <= {"bytes", "path"}:
        data = value.get("bytes")
        if data is None and value.get("path"):
            with open(value["path"], "rb") as f:
                data = f.read()
        return bytes(data) if data is not None else None
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        if data.startswith(_PNG_MAGIC) or data.startswith(_JPEG_MAGIC):
            return data
    return None


def _image_format(data: bytes) -> str | None:
    if data.startswith(_PNG_MAGIC):
        return "png"
    if data.startswith(_JPEG_MAGIC):
        return "jpeg"
    return None


def _open_image(data: bytes) -> Any:
    from PIL import Image

    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def _channels_of(image: Any) -> int:
    return {"L": 1, "1": 1, "I": 1, "I;16": 1, "F": 1, "LA": 4, "RGBA": 4, "PA": 4}.get(image.mode, 3)


def infer_field(name: str, value: Any, *, class_names: Sequence[str] | None = None) -> Field:
    """The :class:`Field` a value of one record implies.

    Numbers and numpy arrays are ``raw`` (Python ``int`` → ``int64``, ``float`` →
    ``float32``, ``bool`` → ``bool``); ``str`` is ``utf8``; PNG / JPEG bytes, Hugging
    Face image dicts (``{"bytes", "path"}``) and PIL images are ``png`` / ``jpeg`` of the
    image's shape (PIL images and arrays are written as PNG); other bytes are ``varlen``
    ``uint8``.

    Example:
        >>> infer_field("t", b"\\x00\\x01")
        Field(name='t', dtype='uint8', shape=(None,), encoding='varlen', class_names=None)
    """
    names = tuple(class_names) if class_names is not None else None
    if isinstance(value, (str, np.str_)):
        return Field(name, "str", (), "utf8", names)
    data = _encoded_image_bytes(value)
    if data is not None:
        image = _open_image(data)
        return Field(name, "uint8", (image.height, image.width, _channels_of(image)),
                     _image_format(data) or "png", names)
    image = _image_from(value)
    if image is not None:
        return Field(name, "uint8", (image.height, image.width, _channels_of(image)), "png", names)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return Field(name, "uint8", (None,), "varlen", names)
    if isinstance(value, bool):
        return Field(name, "bool", (), "raw", names)
    if isinstance(value, int):
        return Field(name, "int64", (), "raw", names)
    if isinstance(value, float):
        return Field(name, "float32", (), "raw", names)
    array = np.asarray(value)
    if array.dtype.kind not in "biufc":
        raise RecordMismatchError(
            f"field '{name}': cannot store a value of type {type(value).__name__} "
            f"(dtype {array.dtype}); give numbers, numpy arrays, str, bytes or images.",
            field=name)
    if array.dtype == np.float64 and not isinstance(value, np.ndarray | np.generic):
        array = array.astype(np.float32)  # Python floats in a list
    return Field(name, array.dtype.name, tuple(array.shape), "raw", names)


def infer_features(record: Mapping[str, Any], *,
                   class_names: Mapping[str, Sequence[str]] | None = None) -> Features:
    """:class:`Features` from one record (a dict of field values), in its key order.

    ``class_names`` maps a label field to its class names (stored in the metadata).
    """
    if not isinstance(record, Mapping) or not record:
        raise RecordMismatchError(
            f"a record is a non-empty dict of fields, got {type(record).__name__}.")
    class_names = class_names or {}
    return Features(tuple(infer_field(str(k), v, class_names=class_names.get(k))
                          for k, v in record.items()))


# --------------------------------------------------------------------- encoding
def _where(field: str, row: int | None) -> str:
    return f"row {row}, field '{field}'" if row is not None else f"field '{field}'"


def _numeric(f: Field, value: Any, row: int | None) -> np.ndarray:
    want = np.dtype(f.dtype)
    if type(value) is np.ndarray and value.dtype == want and value.shape == f.shape and (
            want.byteorder in "=|<" and not _BIG_ENDIAN):
        return value  # the common case: already what the features say
    if isinstance(value, np.ndarray | np.generic):
        array = np.asarray(value)
        if array.dtype != want and not np.can_cast(array.dtype, want, "safe"):
            raise RecordMismatchError(
                f"{_where(f.name, row)}: dtype {array.dtype}, the features say {want} (cast the "
                f"value, or declare the field {array.dtype}).", field=f.name, row=row)
    else:
        try:
            array = np.asarray(value)
        except Exception as err:  # noqa: BLE001 - reported with the row and field
            raise RecordMismatchError(f"{_where(f.name, row)}: not an array ({err}).",
                                      field=f.name, row=row) from err
        if array.dtype.kind not in "biuf" or (array.dtype.kind == "f" and want.kind in "biu"):
            raise RecordMismatchError(
                f"{_where(f.name, row)}: a {type(value).__name__} of dtype {array.dtype} does not "
                f"fit the features' {want}.", field=f.name, row=row)
    out = array.astype(want.newbyteorder("<"), copy=False)
    if out.dtype != array.dtype and out.dtype.kind in "iu" and array.dtype.kind in "iu" and (
            not np.array_equal(out, array)):
        raise RecordMismatchError(f"{_where(f.name, row)}: values do not fit {want}.",
                                  field=f.name, row=row)
    shape = out.shape
    if len(shape) != len(f.shape) or any(d is not None and d != s for d, s in zip(f.shape, shape)):
        raise RecordMismatchError(
            f"{_where(f.name, row)}: shape {shape}, the features say "
            f"{tuple('None' if d is None else d for d in f.shape)}.", field=f.name, row=row)
    return out


def _image_payload(f: Field, value: Any, row: int | None) -> bytes:
    data = _encoded_image_bytes(value)
    if data is not None:
        try:
            image = _open_image(data)
        except Exception as err:  # noqa: BLE001 - reported with the row and field
            raise RecordMismatchError(
                f"{_where(f.name, row)}: undecodable image ({type(err).__name__}: {err}).",
                field=f.name, row=row) from err
        kind = _image_format(data)
        keep = kind == f.encoding and _channels_of(image) == f.shape[2] and image.mode in (
            "L", "RGB", "RGBA")
    else:
        image = _image_from(value)
        if image is None:
            from PIL import Image

            array = np.asarray(value) if not isinstance(value, (bytes, str)) else None
            if array is None or array.dtype != np.uint8 or array.ndim not in (2, 3):
                raise RecordMismatchError(
                    f"{_where(f.name, row)}: expected an image (PNG/JPEG bytes, a PIL image or a "
                    f"uint8 array), got {type(value).__name__}.", field=f.name, row=row)
            if array.ndim == 3 and array.shape[2] == 1:
                array = array[:, :, 0]
            image = Image.fromarray(array)
        keep = False
    size = (image.height, image.width)
    if any(d is not None and d != s for d, s in zip(f.shape[:2], size)):
        raise RecordMismatchError(
            f"{_where(f.name, row)}: image of height x width {size[0]}x{size[1]}, the features "
            f"say {f.shape[0]}x{f.shape[1]} (resize the images, or declare None dimensions).",
            field=f.name, row=row)
    if keep:
        return data  # type: ignore[return-value]
    image = image.convert(_IMAGE_MODES[f.shape[2]])
    buffer = io.BytesIO()
    if f.encoding == "png":
        image.save(buffer, format="PNG")
    else:
        image.save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()


def encode_record(features: Features, record: Mapping[str, Any], *, row: int | None = None) -> bytes:
    """One record's bytes in the layout of ``features`` (see the module docstring).

    Deterministic: the same record gives the same bytes. ``row`` (the source row) is
    named in errors.

    Raises:
        RecordMismatchError: a field is missing or extra, or has the wrong dtype or
            shape; an image cannot be decoded; text is not UTF-8.
    """
    if type(record) is dict and len(record) == len(features.fields) and not features.variable_fields:
        try:  # the common case: exactly the features' raw fields (no per-record checks of keys)
            return b"".join([_numeric(f, record[f.name], row).tobytes() for f in features.fields])
        except KeyError:
            pass  # a field is missing: the checks below name it
    if not isinstance(record, Mapping):
        raise RecordMismatchError(
            f"row {row}: a record is a dict of fields, got {type(record).__name__}.", row=row)
    extra = [k for k in record if k not in features.names]
    if extra:
        raise RecordMismatchError(
            f"row {row}: field '{extra[0]}' is not in the features {list(features.names)}.",
            field=str(extra[0]), row=row)
    head: list[bytes] = []
    lengths: list[int] = []
    tail: list[bytes] = []
    for f in features.fields:
        if f.name not in record:
            raise RecordMismatchError(
                f"{_where(f.name, row)}: missing (the features name {list(features.names)}).",
                field=f.name, row=row)
        value = record[f.name]
        if f.encoding == "raw":
            head.append(_numeric(f, value, row).tobytes())
            continue
        if f.encoding == "utf8":
            if isinstance(value, (bytes, bytearray, memoryview)):
                try:
                    bytes(value).decode("utf-8")
                except UnicodeDecodeError as err:
                    raise RecordMismatchError(
                        f"{_where(f.name, row)}: text is not valid UTF-8 ({err}).",
                        field=f.name, row=row) from err
                payload = bytes(value)
            elif isinstance(value, str):
                try:
                    payload = value.encode("utf-8")
                except UnicodeEncodeError as err:
                    raise RecordMismatchError(
                        f"{_where(f.name, row)}: text cannot be written as UTF-8 ({err}).",
                        field=f.name, row=row) from err
            else:
                raise RecordMismatchError(
                    f"{_where(f.name, row)}: expected str, got {type(value).__name__}.",
                    field=f.name, row=row)
        elif f.encoding == "varlen":
            if isinstance(value, (bytes, bytearray, memoryview)):
                value = np.frombuffer(bytes(value), np.uint8)
            array = _numeric(f, value, row)
            dims = [s for d, s in zip(f.shape, array.shape) if d is None]
            payload = np.asarray(dims, _U32).tobytes() + array.tobytes()
        else:
            payload = _image_payload(f, value, row)
        lengths.append(len(payload))
        tail.append(payload)
    return b"".join(head) + np.asarray(lengths, _U32).tobytes() + b"".join(tail)


# --------------------------------------------------------------------- decoding
def _aligned(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    buffer = np.empty(nbytes + _ALIGNMENT, np.uint8)
    offset = (-buffer.ctypes.data) % _ALIGNMENT
    return buffer[offset:offset + nbytes].view(dtype).reshape(shape)


def _decode_image(f: Field, data: bytes, index: int) -> np.ndarray:
    try:
        image = _open_image(data)
    except Exception as err:  # noqa: BLE001 - named by record
        raise RecordError(f"record {index} of the batch, field '{f.name}': undecodable "
                          f"{f.encoding} image ({type(err).__name__}: {err}).") from err
    mode = _IMAGE_MODES[f.shape[2]]
    if image.mode != mode:
        image = image.convert(mode)
    array = np.asarray(image)
    return array.reshape(array.shape[0], array.shape[1], f.shape[2])


def _stack(f: Field, values: list[np.ndarray],
           empty: Callable[[tuple[int, ...], np.dtype], np.ndarray]) -> np.ndarray:
    if None not in f.shape:
        out = empty((len(values), *f.shape), np.dtype(f.dtype))
        for i, v in enumerate(values):
            out[i] = v
        return out
    arrays = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        arrays[i] = v
    return arrays


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
    """Per raw field, worked out once per features: name, head offset, bytes, stored
    (little-endian) dtype, native dtype, shape."""
    out = []
    offset = 0
    for f in features.raw_fields:
        dtype = np.dtype(f.dtype)
        out.append((f.name, offset, f.nbytes, dtype.newbyteorder("<"), dtype, f.shape))
        offset += f.nbytes
    return tuple(out)


def decode_records(features: Features, records: Sequence[bytes], *,
                   empty: Callable[[tuple[int, ...], np.dtype], np.ndarray] | None = None
                   ) -> dict[str, np.ndarray]:
    """A batch of encoded records as one array per field, one row per record.

    ``raw`` fields come out as ``(n, *shape)`` arrays of their dtype (64-byte aligned),
    cut from the records with no Python call per record (a record that is one raw field
    is copied once, straight into its row); images of a fixed shape as ``(n, h, w, c)``
    ``uint8``; text as an object array of ``str``; ``varlen`` fields and images with a
    variable dimension as object arrays of per-record arrays. ``empty(shape, dtype)``
    allocates each numeric output array (default: a fresh 64-byte aligned one).

    Raises:
        RecordError: a record's length does not match its layout, or an image cannot
            be decoded (the message names the record's place in the batch).
    """
    empty = empty or _aligned
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
                f"record {int(bad[0])} of the batch has {int(lengths[bad[0]])} bytes, the "
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
                f"record {int(bad[0])} of the batch has {int(lengths[bad[0]])} bytes, shorter "
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
                f"record {int(bad[0])} of the batch has {int(lengths[bad[0]])} bytes, its "
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
                    values.append(np.frombuffer(payload[4 * k:], np.dtype(f.dtype).newbyteorder("<"))
                                  .astype(f.dtype).reshape(shape))
                else:
                    values.append(_decode_image(f, bytes(payload), i))
            if f.encoding == "utf8":
                text = np.empty(n, dtype=object)
                text[:] = values
                out[f.name] = text
            else:
                out[f.name] = _stack(f, values, empty)
    return {name: out[name] for name in features.names}


# --------------------------------------------------------------------- metadata
def shard_name(index: int, count: int, prefix: str = "data") -> str:
    """File name of shard ``index`` of ``count``.

    Example:
        >>> shard_name(3, 16)
        'data-00003-of-00016.array_record'
    """
    return f"{prefix}-{index:05d}-of-{count:05d}.array_record"


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """A finished shard: file name (relative to the dataset folder), records, bytes, SHA-256."""

    file: str
    records: int
    bytes: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def shard_info(path: str | os.PathLike[str], records: int) -> ShardInfo:
    """The :class:`ShardInfo` of a finished shard file holding ``records`` records."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
            size += len(chunk)
    return ShardInfo(os.path.basename(os.fspath(path)), int(records), size, digest.hexdigest())


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """What the metadata file holds.

    Attributes:
        features: the records' :class:`Features`.
        shards: the shards in record-numbering order.
        skipped: rows left out by a conversion, ``{"row", "field", "error"}`` each.
        extra: free-form JSON (the conversion's source and options).
    """

    features: Features
    shards: tuple[ShardInfo, ...]
    skipped: tuple[dict[str, Any], ...] = ()
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def num_records(self) -> int:
        return sum(s.records for s in self.shards)

    def class_names(self, field: str) -> tuple[str, ...] | None:
        return self.features[field].class_names

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT_NAME, "format_version": FORMAT_VERSION,
                "num_records": self.num_records, "features": self.features.to_json(),
                "shards": [s.to_json() for s in self.shards], "skipped": list(self.skipped),
                "extra": dict(self.extra)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "metadata") -> DatasetInfo:
        if data.get("format") != FORMAT_NAME:
            raise DataraxError(f"{where}: not a {FORMAT_NAME} dataset (format {data.get('format')!r}).")
        version = data.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise DataraxError(
                f"{where}: format_version {version!r}; this datarax reads up to "
                f"{FORMAT_VERSION} (upgrade datarax).")
        return cls(Features.from_json(data["features"]),
                   tuple(ShardInfo(**s) for s in data["shards"]),
                   tuple(data.get("skipped", ())), dict(data.get("extra", {})))


def write_metadata(directory: str | os.PathLike[str], info: DatasetInfo) -> str:
    """Write ``info`` as the folder's metadata file (temporary name, then rename)."""
    path = os.path.join(os.fspath(directory), METADATA_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(info.to_json(), f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def read_metadata(directory: str | os.PathLike[str]) -> DatasetInfo:
    """The :class:`DatasetInfo` of a dataset folder."""
    path = os.path.join(os.fspath(directory), METADATA_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError as err:
        raise DataraxError(f"'{directory}' holds no {METADATA_FILE}: not a finished dataset "
                           "(convert it, or resume an interrupted conversion).") from err
    except json.JSONDecodeError as err:
        raise DataraxError(f"'{path}' is not valid JSON ({err}).") from err
    return DatasetInfo.from_json(data, where=path)


def find_dataset(paths: Any) -> str | None:
    """The dataset folder ``paths`` names, or None for plain files.

    ``paths`` names a dataset when it is a folder holding :data:`METADATA_FILE`, or a
    glob pattern / list of files whose folder holds it and whose files are all shards.
    """
    if isinstance(paths, (str, os.PathLike)):
        path = os.fspath(paths)
        if os.path.isdir(path):
            return path if os.path.isfile(os.path.join(path, METADATA_FILE)) else None
        items = [path]
    elif isinstance(paths, Sequence) and paths and not isinstance(paths, bytes):
        items = [os.fspath(p) for p in paths if isinstance(p, (str, os.PathLike))]
        if len(items) != len(paths):
            return None
    else:
        return None
    folders = {os.path.dirname(os.path.abspath(p)) for p in items}
    if len(folders) != 1:
        return None
    folder = folders.pop()
    if not os.path.isfile(os.path.join(folder, METADATA_FILE)):
        return None
    return folder
