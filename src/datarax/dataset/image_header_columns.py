"""PNG headers of a whole column of encoded images at once.

A Parquet image column holds its images' bytes one after another in one Arrow buffer.
:func:`png_header_columns` walks the chunks of every image together with NumPy for the
plain form nearly every PNG has (8-bit grey / RGB / RGBA ``IHDR``, ``IDAT`` chunks,
``IEND``), giving what :mod:`~datarax.dataset.image_headers` gives; every other image is
left to those functions, so every verdict is theirs.

Example:
    >>> import io, numpy as np
    >>> from PIL import Image
    >>> out = io.BytesIO(); Image.new("L", (5, 3)).save(out, format="PNG")
    >>> png = np.frombuffer(out.getvalue() + b"GIF89a...", np.uint8)
    >>> known, height, width, channels = png_header_columns(
    ...     png, np.array([0, len(out.getvalue())]), np.array([len(out.getvalue()), 9]), whole=True)
    >>> known.tolist(), int(height[0]), int(width[0]), int(channels[0])
    ([True, False], 3, 5, 1)
"""

from __future__ import annotations

from typing import Any
from zlib import crc32

import numpy as np

from datarax.dataset.image_headers import pixel_limit
from datarax.dataset.images import readable_size

__all__ = ["binary_values", "image_column_sizes", "png_header_columns"]

_SIGNATURE_AND_IHDR = np.frombuffer(b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR", np.uint8)
_IDAT = int.from_bytes(b"IDAT", "big")
_IEND = int.from_bytes(b"IEND", "big")
#: PNG colour type of an 8-bit image -> its channels (grey, RGB, RGBA: the modes kept)
_CHANNELS = np.zeros(256, np.int64)
_CHANNELS[[0, 2, 6]] = [1, 3, 4]
#: the smallest plain PNG: signature, IHDR, an IDAT of one byte, IEND
_SMALLEST = 8 + 25 + 13 + 12


def binary_values(array: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """A ``pyarrow`` binary or text array without nulls (or an HF image struct array with
    bytes in every row) as its data buffer and each value's start and size (no copy); None
    for any other array."""
    import pyarrow as pa

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    kind = array.type
    if pa.types.is_struct(kind):
        if array.null_count or kind.get_field_index("bytes") < 0:
            return None
        array = array.field("bytes")
        kind = array.type
    wide = pa.types.is_large_binary(kind) or pa.types.is_large_string(kind)
    if array.null_count or not (wide or pa.types.is_binary(kind) or pa.types.is_string(kind)):
        return None
    _, offsets, values = array.buffers()
    at = np.frombuffer(offsets, "<i8" if wide else "<i4")[
        array.offset:array.offset + len(array) + 1].astype(np.int64)
    data = np.frombuffer(values, np.uint8) if values is not None else np.zeros(0, np.uint8)
    return data, at[:-1], np.diff(at)


def _u32(data: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The big-endian uint32 at each position ``at`` of ``data`` (as int64)."""
    b = data[at[:, None] + np.arange(4)].astype(np.int64)
    return (b[:, 0] << 24) | (b[:, 1] << 16) | (b[:, 2] << 8) | b[:, 3]


def _crc_ok(view: memoryview, data: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Whether the CRC-32 of each chunk ``data[lo:hi]`` is the one stored after it."""
    chunks = map(view.__getitem__, map(slice, lo.tolist(), hi.tolist()))  # (no Python loop)
    computed = np.fromiter(map(crc32, chunks), np.int64, len(lo))
    return computed == _u32(data, hi)


def png_header_columns(data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, *, whole: bool
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For the images ``data[starts[i]:starts[i] + sizes[i]]`` (``data`` a uint8 array):
    ``known`` (bool per image), and where it is True the image's ``height``, ``width`` and
    ``channels`` as :func:`~datarax.dataset.image_headers.intact_image_header` (``whole``)
    or ``read_image_header`` give them. ``known`` False says nothing."""
    n = len(starts)
    known = np.zeros(n, bool)
    height = np.zeros(n, np.int64)
    width = np.zeros(n, np.int64)
    channels = np.zeros(n, np.int64)
    starts = np.asarray(starts, np.int64)
    ends = starts + np.asarray(sizes, np.int64)
    rows = np.flatnonzero(ends - starts >= _SMALLEST)
    if not rows.size:
        return known, height, width, channels
    s = starts[rows]
    head = data[s[:, None] + np.arange(33)]  # signature, then the IHDR chunk
    h, w = _u32(data, s + 20), _u32(data, s + 16)
    ok = (head[:, :16] == _SIGNATURE_AND_IHDR).all(1) & (head[:, 24] == 8) & (
        _CHANNELS[head[:, 25]] > 0) & (head[:, 26] == 0) & (head[:, 27] == 0) & (
        head[:, 28] <= 1) & (h > 0) & (w > 0) & (h < 2**31) & (w < 2**31)  # (no overflow)
    limit = pixel_limit()
    if limit is not None:
        ok &= h * w <= limit
    view = memoryview(data)
    rows, s, h, w, colour = rows[ok], s[ok], h[ok], w[ok], head[ok, 25]
    ok = _crc_ok(view, data, s + 12, s + 29)
    rows, h, w, colour = rows[ok], h[ok], w[ok], colour[ok]
    pos, end = s[ok] + 33, ends[rows]
    pixels = np.zeros(len(rows), bool)  # an IDAT seen
    done = np.zeros(len(rows), bool)
    walking = np.arange(len(rows))
    while walking.size:
        p, e = pos[walking], end[walking]
        fits = p + 12 <= e
        walking, p, e = walking[fits], p[fits], e[fits]
        length, kind = _u32(data, p), _u32(data, p + 4)
        stop = p + 12 + length
        fits = stop <= e
        walking, p, e, length, kind, stop = (
            walking[fits], p[fits], e[fits], length[fits], kind[fits], stop[fits])
        crc = _crc_ok(view, data, p + 4, stop - 4)
        seen = pixels[walking]
        idat = crc & (kind == _IDAT) & (seen | (length > 0))
        iend = crc & (kind == _IEND) & seen & (length == 0) & (stop == e)
        if whole:
            done[walking[iend]] = True
        else:
            done[walking[idat & ~seen]] = True  # the pixels start: the header is read
            idat &= seen  # (never true: a prefix ends at its first IDAT)
        pixels[walking[idat]] = True
        pos[walking[idat]] = stop[idat]
        walking = walking[idat]
    rows, h, w, colour = rows[done], h[done], w[done], colour[done]
    known[rows] = True
    height[rows], width[rows], channels[rows] = h, w, _CHANNELS[colour]
    return known, height, width, channels


def _encoded_images(column: Any) -> list[Any]:
    """An image column's items as ``readable_size`` takes them."""
    import pyarrow as pa

    kind = column.type
    if column.null_count or not (pa.types.is_struct(kind) and kind.get_field_index("bytes") >= 0):
        return column.to_pylist()  # (a null row's children may hold anything)
    data = column.field("bytes").to_pylist()
    if kind.get_field_index("path") < 0:
        return data
    paths = column.field("path").to_pylist()
    return [b or p for b, p in zip(data, paths)]


def image_column_sizes(column: Any, headers: list[tuple[Any, ...]]) -> tuple[Any, Any, Any]:
    """Height, width and whether grey of each image of an image column that opens, as
    :func:`~datarax.dataset.images.readable_size` reads them (intact plain PNGs together,
    their headers added to ``headers``)."""
    values = binary_values(column)
    if values is None:
        known = np.zeros(len(column), bool)
        height, width, channels = (np.zeros(len(column), np.int64) for _ in range(3))
    else:  # (an intact image's header is the one read_image_header gives)
        known, height, width, channels = png_header_columns(*values, whole=True)
    headers.append((known, height, width, channels))
    height, width = height.copy(), width.copy()
    grey, readable = channels == 1, known.copy()
    rest = np.flatnonzero(~known).tolist()
    items = _encoded_images(column) if rest else []
    for row in rest:
        size = readable_size(items[row])
        if size is not None:
            height[row], width[row], grey[row] = size
            readable[row] = True
    return height[readable].tolist(), width[readable].tolist(), grey[readable].tolist()
