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
import io
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
    read_encoded_image,
)
from datarax.dataset.image_headers import intact_image_header
from datarax.dataset.images import (
    IMAGE_MODES,
    channels_of,
    channels_of_mode,
    image_format,
    open_image,
    pil_image,
)
from datarax.errors import RecordError

__all__ = ["decode_records", "encode_record"]

_U32 = np.dtype("<u4")
_F32 = struct.Struct("<f")


@functools.lru_cache(maxsize=64)
def _lengths(count: int) -> struct.Struct:
    """The little-endian ``uint32`` payload lengths of ``count`` variable fields."""
    return struct.Struct(f"<{count}I")


def little_endian(dtype: Any) -> np.dtype:
    """``dtype`` stored little-endian, as the native dtype itself where the machine is
    little-endian (``newbyteorder("<")`` would give an equal dtype spelt ``'<i4'``, which
    JAX's dtype cache then hands back for every later ``int32``)."""
    dtype = np.dtype(dtype)
    return dtype if np.little_endian else dtype.newbyteorder("<")
_ALIGNMENT = 64
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
    """The bytes of a Python ``int`` in an ``int64`` scalar field (a label, an id) or a
    finite ``float`` in a ``float32`` one, made without NumPy (the same bytes) when the
    value fits (and its class names); None leaves it to :func:`_numeric`."""
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
            raise RecordMismatchError(
                f"{located(f.name, row)}: dtype {array.dtype}, the features say {want} (cast the "
                f"value, or declare the field {array.dtype}).", field=f.name, row=row, mismatch=True)
    else:
        try:
            array = np.asarray(value)
        except Exception as err:  # noqa: BLE001 - reported with the row and field
            raise not_an_array(f.name, row, err) from err
        if array.size == 0 and array.dtype.kind in "biuf":
            array = array.astype(want)  # an empty list: no values to check
        if isinstance(value, int) and array.dtype.kind == "O":  # beyond 64 bits
            raise RecordMismatchError(
                f"{located(f.name, row)}: the integer {value} does not fit the features' {want}.",
                field=f.name, row=row, mismatch=True)
        if array.dtype.kind not in "biuf" or (array.dtype.kind == "f" and want.kind in "biu"):
            raise RecordMismatchError(
                f"{located(f.name, row)}: a {type(value).__name__} of dtype {array.dtype} does not "
                f"fit the features' {want}.", field=f.name, row=row, mismatch=True)
    with np.errstate(over="ignore", invalid="ignore"):  # checked below, named by row
        out = array.astype(little_endian(want), copy=False)
    if out.dtype != array.dtype and (
        # integers (and bools: 2 is not True) kept exactly; finite floats kept finite
        (out.dtype.kind in "biu" and array.dtype.kind in "biu" and not np.array_equal(out, array))
        or (out.dtype.kind == "f" and bool((np.isinf(out) & ~np.isinf(array)).any()))
    ):
        raise RecordMismatchError(f"{located(f.name, row)}: values do not fit {want}.",
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
            f"{tuple('None' if d is None else d for d in f.shape)}.", field=f.name, row=row, mismatch=True)
    return out


def _lost_in_conversion(image: Any, channels: int) -> str | None:
    """What converting ``image`` to ``channels`` channels would lose: its colours (to
    grey) or its transparency (alpha dropped); None when nothing (grey to colour, an
    opaque alpha, colour that is grey)."""
    has_alpha = image.mode in ("RGBA", "LA", "PA") or (
        image.mode == "P" and "transparency" in image.info)
    if channels != 4 and has_alpha and (np.asarray(image.convert("RGBA"))[..., 3] != 255).any():
        return "transparency (alpha channel)"
    if channels == 1 and channels_of(image) != 1:
        rgb = np.asarray(image.convert("RGB"))
        if (rgb[..., 0] != rgb[..., 1]).any() or (rgb[..., 1] != rgb[..., 2]).any():
            return "colours"
    return None


def _deeper_than_8_bits(image: Any, data: bytes | None) -> str | None:
    """What an image holds beyond 8 bits per channel (a 16-bit PNG, whose colour PIL reads
    as 8 bits; a 16-bit or 32-bit grey image with a value beyond 255 or a fraction);
    None when 8 bits hold it exactly."""
    if image.mode in ("I", "F") or image.mode.startswith("I;16"):
        pixels = np.asarray(image)
        if pixels.size and (pixels.min() < 0 or pixels.max() > 255
                            or (pixels.dtype.kind == "f" and (pixels != np.floor(pixels)).any())):
            kind = "32-bit float" if image.mode == "F" else (
                "32-bit integer" if image.mode == "I" else "16-bit")
            return f"{kind} grey image (values {pixels.min():g}..{pixels.max():g})"
        return None
    if data is not None and image_format(data) == "png" and len(data) > 24 and data[24] == 16:
        return "16-bit PNG image"  # IHDR bit depth: PIL has already cut its colour to 8 bits
    return None


def _stored_as_it_is(f: Field, value: Any) -> bytes | None:
    """The bytes of an encoded image (bytes, an HF image dict holding them) that the field
    keeps as they are, known from the header and structure alone (no pixel decoded:
    :func:`~datarax.dataset.image_headers.intact_image_header`); None leaves it to PIL."""
    if isinstance(value, dict) and value.keys() <= {"bytes", "path"}:
        value = value.get("bytes")
    if type(value) is not bytes:
        return None
    header = intact_image_header(value)
    height, width, channels = f.shape
    if header is None or header.format != f.encoding or (
            channels_of_mode(header.mode) != channels) or (
            height is not None and height != header.height) or (
            width is not None and width != header.width):
        return None
    return value


def _image_payload(f: Field, value: Any, row: int | None) -> bytes:
    kept = _stored_as_it_is(f, value)
    if kept is not None:
        return kept
    encoded = read_encoded_image(f.name, value, row)
    if encoded is not None:
        data, image = encoded
        keep = image_format(data) == f.encoding and channels_of(image) == f.shape[2] and (
            image.mode in ("L", "RGB", "RGBA"))
    else:
        image = pil_image(value)
        if image is None:
            from PIL import Image

            array = np.asarray(value) if not isinstance(value, (bytes, str)) else None
            if array is None or array.dtype != np.uint8 or array.ndim not in (2, 3):
                raise RecordMismatchError(
                    f"{located(f.name, row)}: expected an image (PNG/JPEG bytes, a PIL image or a "
                    f"uint8 array), got {type(value).__name__}.", field=f.name, row=row, mismatch=True)
            if array.ndim == 3 and array.shape[2] == 1:
                array = array[:, :, 0]
            image = Image.fromarray(array)
        keep = False
    deep = _deeper_than_8_bits(image, data if encoded is not None else None)
    if deep:
        raise RecordMismatchError(
            f"{located(f.name, row)}: a {deep}; image fields hold 8 bits per channel "
            "(0..255), so storing it would lose its values. Scale the images to 8 bits first, "
            "or store the pixels as an array field (e.g. uint16, from .npy files).",
            field=f.name, row=row)
    size = (image.height, image.width)
    if any(d is not None and d != s for d, s in zip(f.shape[:2], size)):
        raise RecordMismatchError(
            f"{located(f.name, row)}: image of height x width {size[0]}x{size[1]}, the features "
            f"say {f.shape[0]}x{f.shape[1]} (resize the images, or declare None dimensions).",
            field=f.name, row=row, mismatch=True)
    if keep:
        return data  # type: ignore[return-value]
    converted = image.convert(IMAGE_MODES[f.shape[2]])
    lost = _lost_in_conversion(image, f.shape[2])
    if lost:
        raise RecordMismatchError(
            f"{located(f.name, row)}: a {image.mode} image, the features say {f.shape[2]} "
            f"channel(s); storing it so would lose its {lost}. Declare the field with "
            f"{channels_of(image)} channels (features=), or convert the images first.",
            field=f.name, row=row, mismatch=True)
    image = converted
    buffer = io.BytesIO()
    if f.encoding == "png":
        image.save(buffer, format="PNG")
    else:
        image.save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()


def _plain_record(features: Features, record: dict[str, Any]) -> bytes | None:
    """The bytes of a record of exactly the features' fields, each an ``int`` / ``float``
    (:func:`_scalar_bytes`), a ``str`` or a kept image (:func:`_stored_as_it_is`), as
    :func:`encode_record` makes them; None leaves it to those checks, which name what is wrong."""
    head: list[bytes] = []
    lengths: list[int] = []
    tail: list[bytes] = []
    for f in features.fields:
        value = record.get(f.name)
        encoding = f.encoding
        if encoding == "raw":
            data = _scalar_bytes(f, value)
            if data is None:
                return None
            head.append(data)
            continue
        if encoding == "utf8" and type(value) is str:
            try:
                data = value.encode("utf-8")
            except UnicodeEncodeError:
                return None
        elif encoding in ("png", "jpeg"):
            data = _stored_as_it_is(f, value)
            if data is None:
                return None
        else:
            return None
        lengths.append(len(data))
        tail.append(data)
    return b"".join(head) + _lengths(len(lengths)).pack(*lengths) + b"".join(tail)


def encode_record(features: Features, record: Mapping[str, Any], *, row: int | None = None) -> bytes:
    """One record's bytes in the layout of ``features`` (the same record, the same bytes);
    ``row`` (the source row) is named in errors.

    Raises:
        RecordMismatchError: a field is missing or extra, or has the wrong dtype or
            shape; an image cannot be decoded; text is not UTF-8.
    """
    if type(record) is dict and len(record) == len(features.fields) and not features.variable_fields:
        try:  # the common case: exactly the features' raw fields (no per-record checks of keys)
            return b"".join([_numeric(f, record[f.name], row).tobytes() for f in features.fields])
        except KeyError:
            pass  # a field is missing: the checks below name it
    elif type(record) is dict and len(record) == len(features.fields):
        plain = _plain_record(features, record)
        if plain is not None:
            return plain
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
            payload = _image_payload(f, value, row)
        lengths.append(len(payload))
        tail.append(payload)
    return b"".join(head) + _lengths(len(lengths)).pack(*lengths) + b"".join(tail)


def _aligned(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    buffer = np.empty(nbytes + _ALIGNMENT, np.uint8)
    offset = (-buffer.ctypes.data) % _ALIGNMENT
    return buffer[offset:offset + nbytes].view(dtype).reshape(shape)


def _decode_image(f: Field, data: bytes, index: int) -> np.ndarray:
    try:
        image = open_image(data)
    except Exception as err:  # noqa: BLE001 - named by record
        raise RecordError(f"record {index} of the batch, field '{f.name}': undecodable "
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
    """Per raw field, worked out once per features: name, head offset, bytes, stored
    (little-endian) dtype, native dtype, shape."""
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
                    values.append(np.frombuffer(payload[4 * k:], little_endian(f.dtype))
                                  .astype(f.dtype).reshape(shape))
                elif f.name in encoded:
                    values.append(bytes(payload))
                else:
                    values.append(_decode_image(f, bytes(payload), i))
            if f.encoding == "utf8" or f.name in encoded:
                text = np.empty(n, dtype=object)
                text[:] = values
                out[f.name] = text
            else:
                out[f.name] = _stack(f, values, empty)
    return {name: out[name] for name in features.names}
