"""An image field's stored bytes: the encoded image (PNG or JPEG, whichever the field's
encoding) kept as it is where its header and structure show it fits the field (no pixel
decoded), else decoded, checked (size, 8 bits, what a conversion of its channels would
lose) and encoded again: as PNG (lossless) when it came encoded, else (pixels) in the
field's encoding. Readers go by the bytes, not by the field's encoding.

Example:
    >>> import io
    >>> from PIL import Image
    >>> from datarax.dataset.fields import Field
    >>> out = io.BytesIO(); Image.new("RGB", (4, 2)).save(out, format="PNG")
    >>> field = Field("image", "uint8", (2, 4, 3), "png")
    >>> image_payload(field, out.getvalue(), 0) == out.getvalue()  # kept as it is
    True
    >>> grey = Field("image", "uint8", (2, 4, 1), "png")
    >>> Image.open(io.BytesIO(image_payload(grey, out.getvalue(), 0))).mode  # black: no colour lost
    'L'
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from datarax.dataset.fields import (
    Field,
    RecordMismatchError,
    error_text,
    kept_image,
    located,
    read_encoded_image,
)
from datarax.dataset.image_open import pil_image_module
from datarax.dataset.images import (
    IMAGE_MODES,
    channels_of,
    channels_of_mode,
    has_transparency,
    image_format,
    pil_image,
)
from datarax.host.dtypes import is_text_scalar

__all__ = ["deeper_than_8_bits", "image_payload", "stored_as_it_is"]


def _lost_in_conversion(image: Any, channels: int) -> str | None:
    """What converting ``image`` to ``channels`` would lose; None: nothing."""
    has_alpha = image.mode in ("RGBA", "LA", "PA") or has_transparency(image)
    if channels != 4 and has_alpha and (np.asarray(image.convert("RGBA"))[..., 3] != 255).any():
        return "transparency (alpha channel)"
    if channels == 1 and channels_of(image) != 1:
        rgb = np.asarray(image.convert("RGB"))
        if (rgb[..., 0] != rgb[..., 1]).any() or (rgb[..., 1] != rgb[..., 2]).any():
            return "colours"
    return None


#: PIL modes in words, for messages (others are named by their mode: RGB, RGBA, CMYK)
_MODE_WORDS = {"1": "black-and-white image", "L": "grey image", "LA": "grey image with alpha",
               "P": "palette image", "PA": "palette image with alpha"}


def _described(image: Any) -> str:
    """``image``'s kind in words: ``an RGB image``, ``a palette image with a transparent
    colour (PIL mode P)``."""
    words = _MODE_WORDS.get(image.mode, f"{image.mode} image")
    if image.mode not in ("RGBA", "LA", "PA") and has_transparency(image):
        words += " with a transparent colour"
    if image.mode in _MODE_WORDS:
        words += f" (PIL mode {image.mode})"
    return f"{'an' if words[0] in 'AEIOR' else 'a'} {words}"


def deeper_than_8_bits(image: Any, data: bytes | None) -> str | None:
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


def stored_as_it_is(f: Field, value: Any) -> bytes | None:
    """The bytes of an encoded image that the field keeps as they are; None leaves it to PIL."""
    kept = kept_image(value)
    height, width, channels = f.shape
    if kept is None or (
            channels_of_mode(kept[1].mode) != channels) or (
            height is not None and height != kept[1].height) or (
            width is not None and width != kept[1].width):
        return None
    return kept[0]


def _load_pixels(image: Any, field: str, row: int | None) -> None:
    """Read a given PIL image's pixels: one opened from a cut or damaged file (PIL reads
    its pixels only now) is refused naming the row, field and file, as its bytes are."""
    try:
        image.load()
    except Exception as err:  # noqa: BLE001 - PIL's errors of a damaged file, reported
        name = getattr(image, "filename", "")
        raise RecordMismatchError(
            f"{located(field, row)}: undecodable image" + (f" (file {name})" if name else "")
            + f" ({error_text(err)}).", field=field, row=row) from err


def image_payload(f: Field, value: Any, row: int | None) -> bytes:
    kept = stored_as_it_is(f, value)
    if kept is not None:
        return kept
    encoded = read_encoded_image(f.name, value, row)
    if encoded is not None:
        data, image = encoded
        keep = image_format(data) is not None and channels_of(image) == f.shape[2] and (
            image.mode in ("L", "RGB", "RGBA")) and "transparency" not in image.info
    else:
        image = pil_image(value)
        if image is not None:
            _load_pixels(image, f.name, row)
        else:
            Image = pil_image_module()
            array = None if is_text_scalar(value) else np.asarray(value)
            if array is None or array.dtype != np.uint8 or array.ndim not in (2, 3):
                raise RecordMismatchError(
                    f"{located(f.name, row)}: expected an image (PNG/JPEG bytes, a PIL image or a "
                    f"uint8 array), got {type(value).__name__}.", field=f.name, row=row, mismatch=True)
            if array.ndim == 3 and array.shape[2] == 1:
                array = array[:, :, 0]
            image = Image.fromarray(array)
        keep = False
    deep = deeper_than_8_bits(image, data if encoded is not None else None)
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
            f"{located(f.name, row)}: {_described(image)}, the features say {f.shape[2]} "
            f"channel(s); storing it so would lose its {lost}. Declare the field with "
            f"{channels_of(image)} channels (features=), or convert such images first (PIL: "
            f"image.convert('{IMAGE_MODES[f.shape[2]]}')"
            + (", the pixels torchvision's loader reads" if f.shape[2] == 3 else "")
            + "; the field's channels are those of the first image).",
            field=f.name, row=row, mismatch=True)
    image = converted
    buffer = io.BytesIO()
    if f.encoding == "png" or encoded is not None:  # an encoded image: JPEG again would
        image.save(buffer, format="PNG")             # change its pixels a second time
    else:
        image.save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()
