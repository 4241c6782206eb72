"""Opening encoded images with Pillow, its decompression-bomb warning naming the image.

Pillow's ``DecompressionBombWarning`` names no image. :func:`open_pil` opens an image as
``Image.open`` does and issues that warning again (same category: filters still apply)
naming the file or record set by :func:`image_named`. Pillow's settings are never changed.

Example:
    >>> import io, warnings
    >>> from PIL import Image
    >>> out = io.BytesIO(); Image.new("L", (40, 30)).save(out, "PNG")
    >>> with image_named("cat.png"):
    ...     open_pil(out.getvalue()).size
    (40, 30)
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import threading
import warnings
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from datarax.extras import require

__all__ = ["image_named", "open_pil", "pil_image_module"]

_WHERE: contextvars.ContextVar[str] = contextvars.ContextVar("image_named", default="an image")
# warnings.catch_warnings swaps the warnings module's global state: one thread at a time
# (held only while Pillow reads a header, not while it decodes pixels)
_CATCHING = threading.Lock()


@contextlib.contextmanager
def image_named(where: str) -> Iterator[None]:
    """Name the image :func:`open_pil` opens inside the block (a file path, or
    ``row 3, field 'image'``) in the warning it issues for an oversized image."""
    token = _WHERE.set(where)
    try:
        yield
    finally:
        _WHERE.reset(token)


def pil_image_module() -> ModuleType:
    """``PIL.Image``, or :class:`~datarax.errors.MissingExtraError` naming the ``image``
    extra: Pillow reads and writes every PNG / JPEG field, and is optional."""
    return require("PIL.Image", extra="image", user="reading or writing PNG / JPEG images")


def open_pil(data: bytes | str) -> Any:
    """``PIL.Image.open`` of the encoded ``data`` (or the file at that path), its
    ``DecompressionBombWarning`` issued again naming the image (:func:`image_named`)."""
    Image = pil_image_module()
    where = data if isinstance(data, str) else _WHERE.get()  # a file names itself
    with _CATCHING, warnings.catch_warnings(record=True) as caught:
        image = Image.open(data if isinstance(data, str) else io.BytesIO(data))
    for warning in caught:
        if issubclass(warning.category, Image.DecompressionBombWarning):
            warnings.warn(
                f"{where}: {warning.message} Pillow decodes it all the same and "
                "refuses an image of more than twice its limit (PIL.Image.MAX_IMAGE_PIXELS, "
                f"{Image.MAX_IMAGE_PIXELS}); check the image, or raise that limit if such "
                "images are expected.", Image.DecompressionBombWarning, stacklevel=2)
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename,
                                   warning.lineno, source=warning.source)
    return image
