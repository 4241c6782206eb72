"""Image values in records: recognising them, opening them, their channel count.

An image value is PNG / JPEG bytes (told by their signature), a Hugging Face image dict
(``{"bytes", "path"}``) or a PIL image. A stored image has 1, 3 or 4 channels
(:data:`IMAGE_MODES`).

Example:
    >>> image_format(b"\\x89PNG\\r\\n\\x1a\\n..."), image_format(b"GIF89a")
    ('png', None)
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

__all__ = ["IMAGE_MODES", "channels_of", "encoded_image_bytes", "image_format", "open_image",
           "pil_image"]

#: The PIL mode a stored image of each channel count is decoded to.
IMAGE_MODES = {1: "L", 3: "RGB", 4: "RGBA"}
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_JPEG_MAGIC = b"\xff\xd8\xff"


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
    if data.startswith(_PNG_MAGIC):
        return "png"
    if data.startswith(_JPEG_MAGIC):
        return "jpeg"
    return None


def open_image(data: bytes) -> Any:
    """The PIL image encoded in ``data``, fully read (PIL's error when it is not one)."""
    from PIL import Image

    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def channels_of(image: Any) -> int:
    """The channels a PIL image is stored with: 1 (grey), 4 (with alpha) or 3."""
    return {"L": 1, "1": 1, "I": 1, "I;16": 1, "F": 1, "LA": 4, "RGBA": 4, "PA": 4}.get(image.mode, 3)
