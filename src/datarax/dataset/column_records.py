"""Records of a table's rows encoded a slice at a time, from its columns.

:func:`column_encoder` makes :func:`~datarax.dataset.layout.record_encoder`'s bytes for a
whole slice of a table at once: every row's fixed head in one NumPy array, text straight
from Arrow's buffers, images kept through the same header check. It takes exactly the
records the row encoder's plain path takes and answers None otherwise, so the writer
encodes that slice row by row, whose checks name a bad row.

Example:
    >>> import pyarrow as pa
    >>> from datarax.dataset.fields import Features, Field
    >>> from datarax.dataset.layout import record_encoder
    >>> features = Features((Field("text", "str", (), "utf8"), Field("label", "int64", (), "raw")))
    >>> table = pa.table({"label": [3, 4], "text": ["hi", "héllo"]})
    >>> records = column_encoder(features)(table)
    >>> records == [record_encoder(features)(row) for row in table.to_pylist()]
    True
    >>> column_encoder(features)(pa.table({"label": [3, None], "text": ["a", "b"]})) is None
    True
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from datarax.dataset.fields import Features, Field
from datarax.dataset.image_header_columns import binary_values, png_header_columns
from datarax.dataset.image_payload import stored_as_it_is

__all__ = ["arrow_numbers", "column_encoder"]

_INT64_MAX = 2**63 - 1
_LENGTH_MAX = 2**32 - 1  # a variable field's length is a uint32 in the head


@functools.lru_cache(maxsize=64)
def column_encoder(features: Features) -> Callable[[Any], list[bytes] | None] | None:
    """For features of the row encoder's plain kinds only: ``encode(table) -> [record
    bytes per row]`` of a ``pyarrow`` table of exactly the features' fields, or None where
    a value is not one the plain path takes; None for other features."""
    scalars: list[Field] = []
    variable: list[Field] = []
    for f in features.fields:
        if f.encoding == "raw" and f.shape == () and f.dtype in ("int64", "float32"):
            scalars.append(f)
        elif f.encoding in ("utf8", "png", "jpeg"):
            variable.append(f)
        else:
            return None
    head = np.dtype([(f"s{i}", "<i8" if f.dtype == "int64" else "<f4")
                     for i, f in enumerate(scalars)]
                    + [(f"v{j}", "<u4") for j in range(len(variable))])
    names = frozenset(features.names)

    def encode(table: Any, headers: Mapping[str, tuple[Any, ...]] | None = None,
               ) -> list[bytes] | None:
        import pyarrow as pa

        if not isinstance(table, pa.Table) or frozenset(table.column_names) != names or (
                len(table.column_names) != len(names)):
            return None
        n = table.num_rows
        heads = np.empty(n, head)
        for i, f in enumerate(scalars):
            values = _scalar_column(f, table.column(f.name))
            if values is None:
                return None
            heads[f"s{i}"] = values
        tails: list[Any] = []
        for j, f in enumerate(variable):
            column = table.column(f.name)
            parts = (_text_column(column) if f.encoding == "utf8" else
                     _image_column(f, column, None if headers is None else headers.get(f.name)))
            if parts is None:
                return None
            data, lengths = parts
            if n and int(lengths.max()) > _LENGTH_MAX:
                return None
            heads[f"v{j}"] = lengths
            tails.append((data, lengths))
        whole = heads.tobytes()
        size = head.itemsize
        # each row's head, then its variable fields' bytes (loops of map: no Python per row)
        heads = map(whole.__getitem__, map(slice, range(0, n * size, size),
                                           range(size, n * size + size, size)))
        rows = [data if isinstance(data, list) else _split(data, lengths)
                for data, lengths in tails]
        if len(rows) == 1:
            return list(map(operator.add, heads, rows[0]))
        return list(map(b"".join, zip(heads, *rows)))

    return encode


def _split(data: np.ndarray, lengths: np.ndarray) -> list[bytes]:
    """``data`` (rows' bytes one after another) cut at ``lengths``."""
    whole = data.tobytes()
    ends = np.cumsum(lengths).tolist()
    return list(map(whole.__getitem__, map(slice, [0, *ends[:-1]], ends)))


def _scalar_column(f: Field, column: Any) -> np.ndarray | None:
    """A scalar column as the head stores it, or None off the plain path."""
    import pyarrow as pa

    kind = column.type
    if column.null_count:
        return None
    if f.dtype == "int64":
        if not pa.types.is_integer(kind):
            return None  # (bools: the plain path takes only ints)
        values = arrow_numbers(column)
        if values.size and values.dtype.kind == "u" and int(values.max()) > _INT64_MAX:
            return None
        if f.class_names is not None and values.size and (
                int(values.min()) < -1 or int(values.max()) >= len(f.class_names)):
            return None
        return values.astype("<i8", copy=False)
    if not (pa.types.is_float64(kind) or pa.types.is_float32(kind)):
        return None
    values = arrow_numbers(column)
    with np.errstate(over="ignore", invalid="ignore"):
        narrow = values.astype("<f4")
    if not (np.isfinite(values).all() and np.isfinite(narrow).all()):
        return None
    return narrow


def arrow_numbers(column: Any) -> np.ndarray:
    """The values of a column of integers or floats as one NumPy array, nulls left out,
    read from Arrow's buffers (``to_numpy`` would import pandas)."""
    import pyarrow as pa

    kind = column.type
    letter = "f" if pa.types.is_floating(kind) else "i" if pa.types.is_signed_integer(kind) else "u"
    dtype = np.dtype(f"={letter}{kind.bit_width // 8}")
    parts = []
    for chunk in getattr(column, "chunks", [column]):
        validity, data = chunk.buffers()[:2]
        span = slice(chunk.offset, chunk.offset + len(chunk))
        values = np.frombuffer(data, dtype)[span] if len(chunk) else np.zeros(0, dtype)
        if chunk.null_count:
            bits = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")
            values = values[bits[span].astype(bool)]
        parts.append(values)
    return parts[0] if len(parts) == 1 else np.concatenate(parts or [np.zeros(0, dtype)])


def _text_column(column: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """Every row's UTF-8 bytes end to end and each row's length, or None."""
    import pyarrow as pa

    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        return None
    values = binary_values(column)  # (text is laid out as bytes are; None: a null)
    if values is None:
        return None
    data, starts, lengths = values
    first = int(starts[0]) if len(starts) else 0
    return data[first:first + int(lengths.sum())], lengths


def _image_column(f: Field, column: Any, header: tuple[Any, ...] | None = None,
                  ) -> tuple[list[bytes], np.ndarray] | None:
    """Each row's kept image bytes and their lengths, or None."""
    import pyarrow as pa

    kind = column.type
    if column.null_count:
        return None
    if pa.types.is_struct(kind):
        fields = {kind.field(i).name for i in range(kind.num_fields)}
        if "bytes" not in fields or not fields <= {"bytes", "path"}:
            return None
        array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        column = array.field("bytes")
        if column.null_count:
            return None
        kind = column.type
    if not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
        return None
    images = column.to_pylist()
    sure = _kept_pngs(f, column, header)
    if sure is None:
        return None
    for row in np.flatnonzero(~sure).tolist():  # the rest: one by one, as the row encoder
        if stored_as_it_is(f, images[row]) is None:
            return None
    return images, np.fromiter(map(len, images), np.int64, len(images))


def _kept_pngs(f: Field, column: Any, header: tuple[Any, ...] | None) -> np.ndarray | None:
    """Which images of a binary column are plain PNGs the field keeps as they are (``header``:
    what the probe read of them); None where the field does not keep one such PNG."""
    if header is None:
        values = binary_values(column)
        if values is None:
            return np.zeros(len(column), bool)
        header = png_header_columns(*values, whole=True)
    known, height, width, channels = header
    rows, cols, depth = f.shape
    fits = channels == depth
    if rows is not None:
        fits &= height == rows
    if cols is not None:
        fits &= width == cols
    if (known & ~fits).any():
        return None
    return known
