"""PNG and JPEG headers read from their bytes, with no pixel decoded.

:func:`read_image_header` gives what PIL would say of an image when it opens it (height,
width, mode) from the header alone; :func:`intact_image_header` also checks the whole
file's structure (every PNG chunk's CRC-32 and order; a JPEG's segments and end marker),
which is how the converter checks an image it stores as it is, without a decode.

Both answer None for anything they do not know for sure (a palette, 16 bits, ``tRNS``,
trailing bytes, more pixels than PIL's decompression-bomb limit ...): the caller then
asks PIL. Bad compressed pixels under matching checksums are found when the record is read.

Example:
    >>> import io
    >>> from PIL import Image
    >>> out = io.BytesIO(); Image.new("RGB", (5, 3)).save(out, format="PNG")
    >>> intact_image_header(out.getvalue())
    ImageHeader(format='png', height=3, width=5, mode='RGB', bits=8)
    >>> intact_image_header(out.getvalue()[:-1]) is None  # cut short: PIL decides
    True
"""

from __future__ import annotations

import struct
import sys
from typing import NamedTuple
from zlib import crc32

__all__ = ["JPEG_MAGIC", "PNG_MAGIC", "ImageHeader", "intact_image_header", "pixel_limit",
           "read_image_header"]

#: the signatures PNG and JPEG files start with
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
JPEG_MAGIC = b"\xff\xd8\xff"
_U32 = struct.Struct(">I")
_IHDR = struct.Struct(">IIBBBBB")
_U16 = struct.Struct(">H")
_SOF = struct.Struct(">HHB")
#: PNG (bit depth, colour type) -> the mode PIL opens it in (its own table)
_PNG_MODES = {(1, 0): "1", (2, 0): "L", (4, 0): "L", (8, 0): "L", (16, 0): "I;16",
              (8, 2): "RGB", (16, 2): "RGB", (1, 3): "P", (2, 3): "P", (4, 3): "P", (8, 3): "P",
              (8, 4): "LA", (16, 4): "RGBA", (8, 6): "RGBA", (16, 6): "RGBA"}
#: ancillary PNG chunks PIL reads without a step that could fail or change the mode
_PNG_PLAIN_CHUNKS = frozenset({b"gAMA", b"cHRM", b"sRGB", b"pHYs", b"tEXt", b"bKGD", b"sBIT",
                               b"tIME"})
#: JPEG frames decoded as stored: baseline, extended sequential, progressive (Huffman)
_JPEG_FRAMES = {0xC0, 0xC1, 0xC2}
#: JPEG segments that only carry tables or application data: DHT, DRI, APPn, COM (DQT apart)
_JPEG_PLAIN_SEGMENTS = frozenset({0xC4, 0xDD, 0xFE, *range(0xE0, 0xF0)})
_JPEG_MODES = {1: "L", 3: "RGB", 4: "CMYK"}
#: ``PIL.Image.MAX_IMAGE_PIXELS`` as PIL sets it (no PIL import to learn it)
PIL_MAX_IMAGE_PIXELS = int(1024 * 1024 * 1024 // 4 // 3)


class ImageHeader(NamedTuple):
    """What an encoded image's header says: ``format`` (``"png"`` / ``"jpeg"``), its
    ``height`` and ``width``, the PIL ``mode`` it opens in and its ``bits`` per channel (PIL
    opens a 16-bit colour PNG as ``"RGB"``). A named tuple: cheaper to make per image."""

    format: str
    height: int
    width: int
    mode: str
    bits: int = 8


def read_image_header(data: bytes) -> ImageHeader | None:
    """The header of PNG / JPEG bytes (a prefix of the file is enough) as PIL reads it;
    None when the bytes are no image, or one PIL should judge."""
    if data.startswith(PNG_MAGIC):
        found = _png(data, whole=False)
    elif data.startswith(JPEG_MAGIC):
        found = _jpeg(data)
    else:
        return None
    return found[0] if found is not None and _not_huge(found[0]) else None


def intact_image_header(data: bytes) -> ImageHeader | None:
    """The header of a whole PNG / JPEG file whose structure holds, in mode ``L``, ``RGB``
    or ``RGBA`` at 8 bits per channel; None otherwise."""
    if data.startswith(PNG_MAGIC):
        found = _png(data, whole=True)
        if found is None or found[1] != len(data):
            return None
        header = found[0]
    elif data.startswith(JPEG_MAGIC):
        found = _jpeg(data)
        if found is None or not data.endswith(b"\xff\xd9") or found[1] > len(data) - 2:
            return None
        header = found[0]
    else:
        return None
    keep = header.mode in ("L", "RGB", "RGBA") and header.bits == 8
    return header if keep and _not_huge(header) else None


def pixel_limit() -> int | None:
    """``PIL.Image.MAX_IMAGE_PIXELS``: the most pixels PIL opens without its
    decompression-bomb warning."""
    image = sys.modules.get("PIL.Image")
    return PIL_MAX_IMAGE_PIXELS if image is None else image.MAX_IMAGE_PIXELS


def _not_huge(header: ImageHeader) -> bool:
    """Whether PIL opens an image this size without its decompression-bomb warning."""
    limit = pixel_limit()
    return limit is None or header.height * header.width <= limit


def _png(data: bytes, *, whole: bool) -> tuple[ImageHeader, int] | None:
    """The header and where the walk ended: the end of ``IEND`` (``whole``) or the start
    of the first ``IDAT``; None where a chunk is cut short, fails its CRC or is not known."""
    view = memoryview(data)
    size = len(data)
    if size < 33 or data[12:16] != b"IHDR" or _U32.unpack_from(data, 8)[0] != 13:
        return None  # IHDR first: width, height, depth, colour type, methods
    width, height, depth, colour, compression, filtering, interlace = _IHDR.unpack_from(data, 16)
    mode = _PNG_MODES.get((depth, colour))
    if mode is None or not width or not height or compression or filtering or interlace > 1:
        return None
    header = ImageHeader("png", height, width, mode, depth)
    pos, pixels = 8, "before"
    while pos + 12 <= size:
        length, = _U32.unpack_from(data, pos)
        kind = data[pos + 4:pos + 8]
        end = pos + 12 + length
        if end > size or crc32(view[pos + 4:end - 4]) != _U32.unpack_from(data, end - 4)[0]:
            return None
        if kind == b"IDAT":
            if pixels == "after" or length == 0 and pixels == "before":
                return None
            if not whole:
                return header, pos
            pixels = "in"
        elif kind == b"IEND":
            return (header, end) if pixels != "before" and length == 0 else None
        elif kind in _PNG_PLAIN_CHUNKS or kind == b"PLTE" and mode == "P" or (
                kind == b"IHDR" and pos == 8):
            pixels = "after" if pixels == "in" else pixels
        else:
            return None
        pos = end
    return None


def _jpeg(data: bytes) -> tuple[ImageHeader, int] | None:
    """The header and where the scan's data starts; None where a segment is cut short or
    not one of the known kinds, or the frame is not one 8-bit frame decoded as stored."""
    size = len(data)
    pos, header = 2, None
    while pos + 4 <= size and data[pos] == 0xFF:
        marker = data[pos + 1]
        length, = _U16.unpack_from(data, pos + 2)
        end = pos + 2 + length
        if length < 2 or end > size:
            return None
        if marker in _JPEG_FRAMES:
            if header is not None or length < 8 or data[pos + 4] != 8:
                return None
            height, width, layers = _SOF.unpack_from(data, pos + 5)
            mode = _JPEG_MODES.get(layers)
            if mode is None or not height or not width:
                return None
            header = ImageHeader("jpeg", height, width, mode)
        elif marker == 0xDA:  # start of scan: the header ends
            return (header, end) if header is not None else None
        elif marker == 0xDB:
            if not _quantization_tables(data[pos + 4:end]):
                return None
        elif marker not in _JPEG_PLAIN_SEGMENTS:
            return None
        pos = end
    return None


def _quantization_tables(segment: bytes) -> bool:
    """Whether a DQT segment holds whole tables (64 entries of 1 or 2 bytes each)."""
    pos = 0
    while pos < len(segment):
        pos += 1 + 64 * (1 + (segment[pos] >> 4))
    return pos == len(segment) and len(segment) > 0
