"""Field descriptions: what each field of a record is and how it is stored.

:class:`Features` lists :class:`Field` s in order; :func:`infer_features` works them out
from one record. The encodings (:data:`ENCODINGS`):

* ``raw`` — fixed-shape numbers, their little-endian bytes;
* ``varlen`` — numbers with variable dimensions (``None`` in the shape);
* ``png`` / ``jpeg`` — a ``uint8`` image of shape ``(height, width, channels)``, stored encoded;
* ``utf8`` — a ``str``, stored as UTF-8.

A field may carry ``class_names`` (the label ``i`` means ``class_names[i]``).

Example:
    >>> import numpy as np
    >>> feats = infer_features({"x": np.float32([1, 2]), "label": 3, "name": "a"})
    >>> [(f.name, f.dtype, f.shape, f.encoding) for f in feats.fields]
    [('x', 'float32', (2,), 'raw'), ('label', 'int64', (), 'raw'), ('name', 'str', (), 'utf8')]
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from datarax.dataset.image_headers import ImageHeader, intact_image_header
from datarax.dataset.image_open import image_named
from datarax.dataset.images import (
    IMAGE_MODES,
    channels_of,
    channels_of_mode,
    encoded_image_bytes,
    image_format,
    open_image,
    pil_image,
)
from datarax.errors import DataraxError, MissingExtraError
from datarax.host.dtypes import is_text_dtype

__all__ = ["ENCODINGS", "Features", "Field", "RecordMismatchError", "infer_features", "infer_field"]

ENCODINGS = ("raw", "varlen", "png", "jpeg", "utf8")


class RecordMismatchError(DataraxError):
    """A record does not match the features at ``row`` / ``field`` (when known);
    ``mismatch``: the value has another shape or type (not missing, not undecodable);
    ``missing``: the field has no value."""

    def __init__(self, message: str, *, field: str | None = None, row: int | None = None,
                 mismatch: bool = False, missing: bool = False) -> None:
        super().__init__(message)
        self.field = field
        self.row = row
        self.mismatch = mismatch
        self.missing = missing


def located(field: str, row: int | None) -> str:
    """Where a bad value is, as errors name it: ``row 3, field 'x'`` (or ``field 'x'``)."""
    return f"row {row}, field '{field}'" if row is not None else f"field '{field}'"


def no_value(field: str, row: int | None = None) -> RecordMismatchError:
    return RecordMismatchError(
        f"{located(field, row)}: no value (None, or a null / empty cell in the source); every "
        "record needs a value for every field.", field=field, row=row, missing=True)


def not_an_array(field: str, row: int | None, err: BaseException) -> RecordMismatchError:
    return UnstorableValueError(  # no features hold it
        f"{located(field, row)}: not an array ({err}); a nested list is stored when it is "
        "rectangular (pad the inner lists to one length).", field=field, row=row)


def null_in_list(field: str, row: int | None, value: Any) -> RecordMismatchError | None:
    """The error for a list that holds a null (``[1, None]``), naming its position; None
    for any other value."""
    def where(items: Any, at: list[int]) -> list[int] | None:
        for i, item in enumerate(items if isinstance(items, (list, tuple)) else ()):
            found = at + [i] if item is None else where(item, at + [i])
            if found is not None:
                return found
        return None

    at = where(value, [])
    if at is None:
        return None
    return RecordMismatchError(
        f"{located(field, row)}: a list holding a null (None) at {at}; every element of a "
        "list needs a value. Fill the nulls (0, NaN) or drop them before converting.",
        field=field, row=row)


def error_text(err: BaseException) -> str:
    """``type: message`` of an exception, without object addresses (stable across runs)."""
    text = re.sub(r"\s*<[^<>]*? at 0x[0-9a-fA-F]+>", "", str(err))
    return f"{type(err).__name__}: {text}"


def read_encoded_image(field: str, value: Any, row: int | None = None) -> tuple[bytes, Any] | None:
    """``(bytes, PIL image)`` of an encoded image value (PNG / JPEG bytes, an HF image
    dict), or None for any other value."""
    try:
        data = encoded_image_bytes(value)
    except OSError as err:  # an image dict naming a file that is not there
        raise RecordMismatchError(f"{located(field, row)}: cannot read the image file ({err}).",
                                  field=field, row=row) from err
    if data is None:
        return None
    path = value.get("path") if isinstance(value, Mapping) else None
    if not data:  # a file cut to nothing (a failed download, a full disk): PIL only says
        raise RecordMismatchError(  # 'cannot identify image file'
            f"{located(field, row)}: the image is empty (0 bytes"
            + (f", file {path}" if path else "") + ").",
            field=field, row=row)
    try:
        with image_named(located(field, row) + (f" (file {path})" if path else "")):
            return data, open_image(data)
    except MissingExtraError:  # Pillow not installed: no row is to blame
        raise
    except Exception as err:  # noqa: BLE001 - reported with the row and field
        raise RecordMismatchError(f"{located(field, row)}: undecodable image ({error_text(err)}).",
                                  field=field, row=row) from err


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
        if not isinstance(self.name, str) or not self.name:
            raise DataraxError(f"a field's name is a non-empty str, got {self.name!r}.")
        if self.encoding not in ENCODINGS:
            raise DataraxError(
                f"field '{self.name}': encoding '{self.encoding}' is not one of {ENCODINGS}.")
        object.__setattr__(self, "shape", tuple(None if d is None else int(d) for d in self.shape))
        if any(d is not None and d < 0 for d in self.shape):
            raise DataraxError(
                f"field '{self.name}': shape {self.shape} has a negative dimension; give sizes "
                ">= 0, or None for a dimension that varies (encoding 'varlen').")
        if self.encoding == "utf8":
            if self.dtype != "str" or self.shape != ():
                raise DataraxError(f"field '{self.name}': utf8 text has dtype 'str' and shape ().")
        else:
            try:
                dtype = np.dtype(self.dtype)
            except TypeError as err:
                raise DataraxError(f"field '{self.name}': dtype {self.dtype!r} is not a NumPy "
                                   f"dtype ({err}); e.g. 'uint8', 'int32', 'float32'.") from err
            if is_text_dtype(dtype) or dtype.kind in "Mm" or dtype.name.startswith("void"):
                # bfloat16 ... pass
                raise DataraxError(
                    f"field '{self.name}': dtype {self.dtype!r} is not a number type; text is "
                    "dtype 'str' with encoding 'utf8', bytes a 'uint8' 'varlen' field.")
        if self.encoding == "raw" and None in self.shape:
            raise DataraxError(
                f"field '{self.name}': a raw field has a fixed shape, got {self.shape}; use "
                "encoding 'varlen' for variable dimensions.")
        if self.encoding in ("png", "jpeg") and (
                self.dtype != "uint8" or len(self.shape) != 3 or self.shape[2] not in IMAGE_MODES):
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

    Read like a mapping of field name to :class:`Field`: ``features["x"]``, ``"x" in
    features``, ``list(features)`` (the names); ``features.fields`` holds the fields.

    Example:
        >>> f = Features((Field("x", "float32", (4,), "raw"), Field("t", "str", (), "utf8")))
        >>> f.head_size, f.names, list(f), "t" in f, len(f)
        (20, ('x', 't'), ['x', 't'], True, 2)
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
        raise KeyError(f"no field {name!r}; the fields are {list(self.names)}")

    def __iter__(self) -> Iterator[str]:
        """The field names, in order (as a mapping of name to :class:`Field`)."""
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.fields)

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def to_json(self) -> list[dict[str, Any]]:
        return [f.to_json() for f in self.fields]

    @classmethod
    def from_json(cls, data: Sequence[Mapping[str, Any]]) -> Features:
        return cls(tuple(Field.from_json(d) for d in data))


class UnstorableValueError(RecordMismatchError):
    """A field's value is of a kind no field holds, whatever the features: an object (a
    dict), a list of them, a list of text, a date or time, a decimal."""


def _nested_object(name: str, value: Any) -> UnstorableValueError | None:
    """The error for a dict, list of dicts or list of text as a value; None for others."""
    items = value if isinstance(value, (list, tuple)) and value else None
    inner = items[0] if items is not None else value
    if items is not None and isinstance(inner, str):
        shown = ", ".join(repr(v) for v in items[:3]) + (", ..." if len(items) > 3 else "")
        return UnstorableValueError(
            f"field '{name}' holds a list of {type(inner).__name__} ({shown}); a text field holds "
            "one text. Join the list into one text (e.g. comma-separated or as JSON) before "
            "converting, or leave the field out.", field=name)
    if isinstance(value, (datetime.date, datetime.time, datetime.timedelta, decimal.Decimal,
                          np.datetime64, np.timedelta64)) or (
            isinstance(value, np.ndarray) and value.dtype.kind in "mM"):
        kind = ("a decimal" if isinstance(value, decimal.Decimal) else
                f"a {value.dtype} value" if isinstance(value, np.ndarray | np.generic) else
                f"a {type(value).__name__}")
        way = ("a float, or text" if isinstance(value, decimal.Decimal) else
               "text (ISO 8601, e.g. df[col].astype(str)) or a number (e.g. seconds since 1970)")
        return UnstorableValueError(
            f"field '{name}' holds {kind} ({value}); a field holds numbers, an array, text, "
            f"bytes or an image. Store it as {way} before converting, or leave the field out.",
            field=name)
    if not isinstance(inner, Mapping):
        return None
    keys = [str(k) for k in inner][:5]
    listed = ", ".join(f"'{k}'" for k in keys) + (", ..." if len(inner) > 5 else "")
    first = keys[0] if keys else "key"
    what = ("a list of objects" if items is not None else "a nested object") + f" (keys {listed})"
    way = (f"one list field per key (e.g. '{name}.{first}' holding every object's '{first}')"
           if items is not None else f"one field per key (e.g. '{name}.{first}')")
    return UnstorableValueError(
        f"field '{name}' holds {what}; a field holds numbers, an array, text, bytes or an image. "
        f"Flatten it into {way} before converting, or leave the field out.", field=name)


def kept_image(value: Any) -> tuple[bytes, ImageHeader] | None:
    """The bytes and header of an encoded image an image field may keep as it is, known
    from its header alone (no pixel decoded); None for anything else (PIL opens it)."""
    if isinstance(value, dict) and value.keys() <= {"bytes", "path"}:
        value = value.get("bytes")
    header = intact_image_header(value) if type(value) is bytes else None
    return None if header is None else (value, header)


def _ml_dtype_field(name: str, dtype: np.dtype) -> RecordMismatchError:
    """A value of an ml_dtypes type (bfloat16, float8, int4), which a field cannot hold:
    the metadata names NumPy dtypes, and a reader without ml_dtypes could not read it."""
    cast = "np.int8" if dtype.name.startswith(("int", "uint")) else "np.float32"
    return RecordMismatchError(
        f"field '{name}' is {dtype.name} (an ml_dtypes type), which a dataset field cannot "
        f"store: its dtype is a NumPy one. Store value.astype({cast}) (exact) and cast it back "
        f"in a stage, or value.view(np.uint{8 * dtype.itemsize}) to keep its bits "
        f"(jax.lax.bitcast_convert_type(x, jnp.{dtype.name}) in a stage).", field=name)


def infer_field(name: str, value: Any, *, class_names: Sequence[str] | None = None) -> Field:
    """The :class:`Field` a value of one record implies.

    Numbers are ``raw`` (``int`` → ``int64``, ``float`` → ``float32``; numpy values keep
    their dtype); ``str`` is ``utf8``; PNG / JPEG bytes, Hugging Face image dicts and PIL
    images (as PNG) are ``png`` / ``jpeg``; other bytes are ``varlen`` ``uint8``.

    Example:
        >>> infer_field("t", b"\\x00\\x01")
        Field(name='t', dtype='uint8', shape=(None,), encoding='varlen', class_names=None)
    """
    names = tuple(class_names) if class_names is not None else None
    if value is None:
        raise no_value(name)
    if isinstance(value, str):  # np.str_ too
        return Field(name, "str", (), "utf8", names)
    kept = kept_image(value)
    if kept is not None:  # what PIL would say, from the header: no decode, no PIL import
        header = kept[1]
        return Field(name, "uint8", (header.height, header.width, channels_of_mode(header.mode)),
                     header.format, names)
    encoded = read_encoded_image(name, value)
    if encoded is not None:
        data, image = encoded
        return Field(name, "uint8", (image.height, image.width, channels_of(image)),
                     image_format(data) or "png", names)
    image = pil_image(value)
    if image is not None:
        return Field(name, "uint8", (image.height, image.width, channels_of(image)), "png", names)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return Field(name, "uint8", (None,), "varlen", names)
    if isinstance(value, bool):
        return Field(name, "bool", (), "raw", names)
    if isinstance(value, int):
        return Field(name, "int64", (), "raw", names)
    if isinstance(value, float) and not isinstance(value, np.generic):  # not np.float64
        return Field(name, "float32", (), "raw", names)
    nested = _nested_object(name, value)
    if nested is not None:
        raise nested
    try:
        array = np.asarray(value)
    except ValueError as err:  # a ragged nested list
        raise not_an_array(name, None, err) from err
    dtype = array.dtype
    if dtype.kind == "V" and not dtype.names and not dtype.name.startswith("void"):
        raise _ml_dtype_field(name, dtype)  # bfloat16, float8, int4: no NumPy name
    if array.dtype.kind not in "biufc":
        raise null_in_list(name, None, value) or RecordMismatchError(
            f"field '{name}': cannot store a value of type {type(value).__name__} "
            f"(dtype {array.dtype}); give numbers, numpy arrays, str, bytes or images.",
            field=name)
    if array.dtype == np.float64 and not isinstance(value, np.ndarray | np.generic):
        array = array.astype(np.float32)  # Python floats in a list
    return Field(name, array.dtype.name, tuple(array.shape), "raw", names)


def infer_features(record: Mapping[str, Any], *,
                   class_names: Mapping[str, Sequence[str]] | None = None) -> Features:
    """:class:`Features` from one record (a dict of field values), in its key order;
    ``class_names`` maps a label field to its class names."""
    if not isinstance(record, Mapping) or not record:
        raise RecordMismatchError(
            f"a record is a non-empty dict of fields, got {type(record).__name__}.")
    keys = [k for k in record if not isinstance(k, str)]
    if keys:
        raise RecordMismatchError(
            f"field names are str, got the key {keys[0]!r} ({type(keys[0]).__name__}); name "
            "every field with a str.", field=str(keys[0]))
    class_names = class_names or {}
    return Features(tuple(infer_field(str(k), v, class_names=class_names.get(k))
                          for k, v in record.items()))
