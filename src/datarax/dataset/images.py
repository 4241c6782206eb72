"""Image values in records: recognising them, opening them, their channel count.

An image value is PNG / JPEG bytes (told by their signature), a Hugging Face image dict
(``{"bytes", "path"}``) or a PIL image. A stored image has 1, 3 or 4 channels
(:data:`IMAGE_MODES`).

Example:
    >>> image_format(b"\\x89PNG\\r\\n\\x1a\\n..."), image_format(b"GIF89a")
    ('png', None)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from datarax.dataset.image_headers import JPEG_MAGIC, PNG_MAGIC, read_image_header
from datarax.dataset.image_open import open_pil

__all__ = ["HEADER_BYTES", "IMAGE_MODES", "ImageSizes", "alpha_in_use", "alpha_unused",
           "arrow_images", "channels_of", "channels_of_mode", "encoded_image_bytes", "file_bytes",
           "has_transparency",
           "image_format", "image_size_and_grey", "open_image", "pil_image",
           "readable_size"]

#: The PIL mode a stored image of each channel count is decoded to.
IMAGE_MODES = {1: "L", 3: "RGB", 4: "RGBA"}


def pil_image(value: Any) -> Any:
    """``value`` when it is a PIL image, else None."""
    return value if type(value).__module__.startswith("PIL.") else None


def encoded_image_bytes(value: Any) -> bytes | None:
    """Encoded image bytes: raw bytes with a PNG/JPEG signature, or an HF image dict."""
    if isinstance(value, Mapping) and set(value) <= {"bytes", "path"}:
        data = value.get("bytes")
        if data is None and value.get("path"):
            with open(value["path"], "rb") as f:
                data = f.read()
        return bytes(data) if data is not None else None
    if isinstance(value, (bytes, bytearray, memoryview)) and image_format(bytes(value)):
        return bytes(value)
    return None


def image_format(data: bytes) -> str | None:
    """``"png"`` or ``"jpeg"`` by the bytes' signature; None for anything else."""
    if data.startswith(PNG_MAGIC):
        return "png"
    if data.startswith(JPEG_MAGIC):
        return "jpeg"
    return None


def open_image(data: bytes) -> Any:
    """The PIL image encoded in ``data``, fully read (PIL's error when it is not one)."""
    image = open_pil(data)
    image.load()
    return image


def channels_of(image: Any) -> int:
    """The channels a PIL image is stored with: 1 (grey), 4 (with alpha, or a transparent
    colour a pixel uses: :func:`has_transparency`) or 3."""
    return 4 if has_transparency(image) else channels_of_mode(image.mode)


def has_transparency(image: Any) -> bool:
    """Whether a palette, grey or RGB PIL image has a transparent colour that a pixel uses
    (it then has an alpha channel once converted to RGBA)."""
    return image.mode in ("P", "L", "RGB") and "transparency" in image.info and (
        image.convert("RGBA").getchannel("A").getextrema()[0] < 255)


def alpha_in_use(item: bytes | str, first: bytes | None = None) -> bool | None:
    """Whether an encoded image (bytes, or its file's path) hides a pixel with its alpha
    channel or transparent colour: None when it has neither, False when every pixel is
    opaque; OSError or ValueError when it is no image. ``first``: the file's first
    :data:`HEADER_BYTES`, read already.

    Example:
        >>> import io; from PIL import Image; out = io.BytesIO()
        >>> Image.new("RGBA", (2, 2), (1, 2, 3, 255)).save(out, format="PNG")
        >>> alpha_in_use(out.getvalue())
        False
    """
    header = read_image_header(item if isinstance(item, bytes) else first or b"")
    if header is not None and header.mode in ("L", "RGB"):
        return None
    try:
        with open_pil(item) as image:
            if image.mode not in ("RGBA", "LA", "PA") and "transparency" not in image.info:
                return None
            return image.convert("RGBA").getchannel("A").getextrema()[0] < 255
    except OSError:
        raise
    except Exception as err:  # noqa: BLE001 - PIL's others (a decompression bomb, a bad header)
        raise ValueError(f"{type(err).__name__}: {err}") from err


def alpha_unused(images: Iterable[Any]) -> bool:
    """Whether the first image has an alpha channel (or a transparent colour) that no
    image uses: then the field is stored with 3 channels. Each of ``images``: encoded
    bytes, a file's path, or None; one that is no image is passed over (its row is named
    when it is written).

    Example:
        >>> import io; from PIL import Image
        >>> def png(colour):
        ...     out = io.BytesIO(); Image.new("RGBA", (2, 2), colour).save(out, format="PNG")
        ...     return out.getvalue()
        >>> alpha_unused([png((1, 2, 3, 255)), None]), alpha_unused([png((1, 2, 3, 0))])
        (True, False)
    """
    first = True
    for item in images:
        if item is None:
            continue
        try:
            used = alpha_in_use(item, file_bytes(item, HEADER_BYTES) if isinstance(item, str)
                                else None)
        except (OSError, ValueError):
            continue
        if used or (first and used is None):
            return False
        first = False
    return not first


def arrow_images(chunks: Iterable[Any]) -> Iterable[bytes | str | None]:
    """Each value of the chunks of an Arrow image column, for :func:`alpha_unused`: a
    binary value, or a Hugging Face ``Image`` struct's ``bytes`` (else its ``path``);
    None where it has neither."""
    for chunk in chunks:
        for i in range(len(chunk)):
            value = chunk[i].as_py()
            if isinstance(value, Mapping):
                value = value.get("bytes") if value.get("bytes") is not None else value.get("path")
            yield value if isinstance(value, (bytes, str)) else None


def channels_of_mode(mode: str) -> int:
    """The channels an image of PIL mode ``mode`` is stored with (as :func:`channels_of`)."""
    return _CHANNELS.get(mode, 3)


_CHANNELS = {"L": 1, "1": 1, "I": 1, "I;16": 1, "F": 1, "LA": 4, "RGBA": 4, "PA": 4}


#: bytes of a file read first for its image header (fewer: the whole file), and where
#: that was not enough
HEADER_BYTES = 4096
_MORE_HEADER_BYTES = 65536
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_BINARY", 0)


def file_bytes(path: str, limit: int | None = None) -> bytes:
    """The bytes of the file ``path`` (with ``limit``: up to its first ``limit`` bytes), by
    ``os.read`` (a Python file object costs more than a small image's read).

    Example:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "f")
        >>> with open(path, "wb") as f:
        ...     _ = f.write(b"abcdef")
        >>> file_bytes(path), file_bytes(path, 2)
        (b'abcdef', b'ab')
    """
    fd = os.open(path, _READ_FLAGS)
    try:
        if limit is not None:  # one call: fewer bytes than asked only at the end of a file
            return os.read(fd, limit)
        size = os.fstat(fd).st_size
        first = os.read(fd, size + 1)  # one more byte: the end is known in one call
        if len(first) <= size:  # a short read of a file: its end
            return first
        parts = [first]  # it grew since fstat: the rest too
        while part := os.read(fd, size + 1):
            parts.append(part)
        return b"".join(parts)
    finally:
        os.close(fd)


def image_size_and_grey(item: bytes | bytearray | memoryview | str,
                        first: bytes | None = None) -> tuple[int, int, bool]:
    """``(height, width, grey)`` of an encoded image (bytes, or its file's path) as PIL opens
    it, from its header; OSError or ValueError when it is none. ``first``: the file's first
    :data:`HEADER_BYTES`, read already.

    Example:
        >>> import io; out = io.BytesIO()
        >>> from PIL import Image; Image.new("L", (5, 3)).save(out, format="PNG")
        >>> image_size_and_grey(out.getvalue())
        (3, 5, True)
    """
    if isinstance(item, (bytes, bytearray, memoryview)):
        head, opened = (item if type(item) is bytes else bytes(item)), None  # no copy of bytes
        header = read_image_header(head)
    else:  # a few KB hold most headers; a JPEG's EXIF thumbnail may push it further
        head, opened = file_bytes(item, HEADER_BYTES) if first is None else first, item
        header = read_image_header(head)
        if header is None and len(head) == HEADER_BYTES:
            head = file_bytes(item, _MORE_HEADER_BYTES)
            header = read_image_header(head)
    if header is not None:
        return header.height, header.width, channels_of_mode(header.mode) == 1
    try:
        with open_pil(head if opened is None else opened) as image:
            return image.height, image.width, channels_of(image) == 1
    except OSError:
        raise
    except Exception as err:  # noqa: BLE001 - PIL's others (a decompression bomb, a bad header)
        raise ValueError(f"{type(err).__name__}: {err}") from err


@dataclasses.dataclass
class ImageSizes:
    """The sizes of a column's images, gathered in order until nothing later changes its
    :meth:`hint`; :meth:`joined` adds parts of the rows up in order."""

    heights: set[int] = dataclasses.field(default_factory=set)
    widths: set[int] = dataclasses.field(default_factory=set)
    first_grey: bool | None = None
    colour: bool = False

    def add(self, heights: Iterable[int], widths: Iterable[int], greys: Sequence[Any]) -> bool:
        """Take the next images' heights, widths and whether grey; whether nothing later
        changes the hint (both sizes vary, and colour was seen)."""
        self.heights.update(heights)
        self.widths.update(widths)
        if len(greys):
            self.first_grey = bool(greys[0]) if self.first_grey is None else self.first_grey
            self.colour = self.colour or not all(greys)
        return len(self.heights) > 1 and len(self.widths) > 1 and self.colour

    @classmethod
    def of(cls, parts: Iterable[tuple[Iterable[int], Iterable[int], Sequence[Any]]]) -> ImageSizes:
        """The sizes of parts ``(heights, widths, greys)``, in order, read until nothing
        later changes the hint."""
        sizes = cls()
        next((part for part in parts if sizes.add(*part)), None)
        return sizes

    @classmethod
    def joined(cls, parts: Iterable[ImageSizes]) -> ImageSizes:
        """Consecutive parts' sizes as one (a part's greys: its first, then whether all are)."""
        return cls.of((p.heights, p.widths,
                       [] if p.first_grey is None else [p.first_grey, not p.colour])
                      for p in parts)

    def hint(self) -> dict[str, Any]:
        """``image_size`` (height, width; ``None`` for one that varies) when the sizes
        vary, ``image_channels`` 3 when the first image is grey and a later one has colour."""
        hint: dict[str, Any] = {}
        if len(self.heights) > 1 or len(self.widths) > 1:
            hint["image_size"] = (next(iter(self.heights)) if len(self.heights) == 1 else None,
                                  next(iter(self.widths)) if len(self.widths) == 1 else None)
        if self.first_grey and self.colour:
            hint["image_channels"] = 3
        return hint


def readable_size(item: Any) -> tuple[int, int, bool] | None:
    """:func:`image_size_and_grey` of an image column's item; None for no image or one that
    cannot be opened (the writer names its row)."""
    if isinstance(item, Mapping):
        item = item.get("bytes") or item.get("path")
    if item is None:
        return None
    try:
        return image_size_and_grey(item)
    except (OSError, ValueError):
        return None
