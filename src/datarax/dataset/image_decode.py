"""Encoded images to fixed-size RGB arrays: resize, centre crop, random resized crop.

The geometry is torchvision's, on PIL images: :func:`resized_size` is ``Resize(int)``
(the shorter side becomes ``size``, the longer one ``int(size * long / short)``),
:func:`centre_box` is ``CenterCrop``, :func:`random_resized_box` is
``RandomResizedCrop.get_params`` (10 tries of a random area share and aspect ratio,
then the centre fallback), each resize PIL's bilinear one (antialiased when shrinking).

:func:`decode_region` decodes a JPEG with ``simplejpeg`` when installed, else Pillow, at
1/2, 1/4 or 1/8 of its size in the DCT domain where the region keeps at least the
output's pixels (as Pillow's ``Image.draft``). Every image comes out RGB, alpha dropped,
as torchvision's ``ImageFolder`` loader does.

Example:
    >>> import io
    >>> from PIL import Image
    >>> out = io.BytesIO(); Image.new("RGB", (500, 375), (200, 10, 10)).save(out, "JPEG")
    >>> resized_size(375, 500, 256)
    (256, 341)
    >>> image = resize_and_crop(out.getvalue(), resize=256, crop=224)
    >>> image.shape, image.dtype
    ((224, 224, 3), dtype('uint8'))
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from datarax.dataset.image_headers import JPEG_MAGIC, read_image_header
from datarax.dataset.image_open import open_pil, pil_image_module
from datarax.host.crop_boxes import fallback_box

__all__ = ["centre_box", "dct_scale_for", "decode_region", "image_size", "random_resized_box",
           "resize_and_crop", "resized_crop", "resized_size"]

#: the DCT-domain scales a JPEG decoder offers (1/k of each side)
_SCALES = (8, 4, 2, 1)
#: JPEG colour spaces (as ``simplejpeg.decode_jpeg_header`` names them) Pillow decodes
_PILLOW_COLOURSPACES = ("CMYK", "YCCK")


def _simplejpeg() -> Any:
    try:
        import simplejpeg
    except ImportError:  # Pillow decodes instead
        return None
    return simplejpeg


def image_size(data: bytes) -> tuple[int, int]:
    """``(height, width)`` from the image's header, without decoding its pixels."""
    header = read_image_header(data) if isinstance(data, bytes) else None
    if header is not None:
        return header.height, header.width
    with open_pil(data) as image:
        return image.height, image.width


def resized_size(height: int, width: int, size: int) -> tuple[int, int]:
    """``(height, width)`` after torchvision's ``Resize(size)``: the shorter side ``size``."""
    if width <= height:
        return int(size * height / width), size
    return size, int(size * width / height)


def centre_box(height: int, width: int, crop: tuple[int, int]) -> tuple[int, int]:
    """``(top, left)`` of torchvision's ``CenterCrop(crop)`` in an image of that size
    (negative where the image is smaller: padded with zeros, as torchvision pads).

    Example:
        >>> centre_box(300, 7, (224, 10))  # 3 columns of zeros: 1 before, 2 after
        (38, -1)
    """
    def start(size: int, out: int) -> int:
        return int(round((size - out) / 2.0)) if size >= out else -((out - size) // 2)

    return start(height, crop[0]), start(width, crop[1])


def random_resized_box(rng: np.random.Generator, height: int, width: int,
                       scale: tuple[float, float], ratio: tuple[float, float]
                       ) -> tuple[int, int, int, int]:
    """``(top, left, box_height, box_width)`` as torchvision's
    ``RandomResizedCrop.get_params``, drawn from ``rng``.

    Example:
        >>> random_resized_box(np.random.default_rng(0), 375, 500, (0.08, 1.0), (3 / 4, 4 / 3))
        (35, 302, 171, 129)
    """
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            return top, left, h, w
    return fallback_box(height, width, min(ratio), max(ratio))


def dct_scale_for(box: tuple[float, float], out: tuple[int, int]) -> int:
    """The largest DCT scale ``k`` (1, 2, 4 or 8) that leaves a box of ``box`` pixels
    (height, width) at least ``out`` pixels.

    Example:
        >>> dct_scale_for((375, 500), (256, 341)), dct_scale_for((480, 640), (64, 85))
        (1, 4)
    """
    for k in _SCALES:
        if box[0] / k >= out[0] and box[1] / k >= out[1]:
            return k
    return 1


def _scale_of(height: int, width: int, got: tuple[int, int]) -> int:
    """The scale a decoder used: the ``k`` whose ``ceil(side / k)`` gives ``got``."""
    for k in _SCALES:
        if (-(-height // k), -(-width // k)) == got:
            return k
    raise ValueError(f"a {height}x{width} image decoded to {got[0]}x{got[1]}")  # pragma: no cover


def decode_region(data: bytes, height: int, width: int, k: int) -> tuple[Any, int]:
    """The RGB PIL image encoded in ``data`` (``height`` x ``width``), decoded at 1/``k``
    of its size where the decoder can (JPEG), and the scale it has."""
    Image = pil_image_module()
    pixels, k = _decode_pixels(data, height, width, k)
    return (Image.fromarray(pixels) if isinstance(pixels, np.ndarray) else pixels), k


def _decode_pixels(data: bytes, height: int, width: int, k: int) -> tuple[Any, int]:
    """As :func:`decode_region`: ``simplejpeg``'s ``uint8 (h, w, 3)`` array, or a PIL image."""
    sj = _simplejpeg()
    if sj is not None and data[:3] == JPEG_MAGIC:
        try:
            # a CMYK / YCCK JPEG: libjpeg-turbo's RGB of it differs from PIL's (torchvision's
            # loader's) by a level in most pixels, so Pillow decodes it
            if sj.decode_jpeg_header(data)[2] in _PILLOW_COLOURSPACES:
                raise ValueError("decoded by Pillow")
            # RGB, not RGBX: RGBX saves a copy but resizes four bands (slower overall)
            pixels = sj.decode_jpeg(data, colorspace="RGB", min_height=-(-height // k),
                                    min_width=-(-width // k), min_factor=k)
        except ValueError:
            pass  # a JPEG libjpeg-turbo refuses to give as RGB, or CMYK: Pillow's turn
        else:
            return pixels, _scale_of(height, width, pixels.shape[:2])
    image = open_pil(data)
    if k > 1 and image.format == "JPEG":
        image.draft("RGB", (width // k, height // k))
    image = image.convert("RGB")
    return image, _scale_of(height, width, (image.height, image.width))


def _cut(pixels: Any, box: tuple[int, int, int, int]) -> Any:
    """The PIL image of ``pixels``' ``box`` (an array sliced first)."""
    Image = pil_image_module()
    if isinstance(pixels, np.ndarray):
        return Image.fromarray(np.ascontiguousarray(pixels[box[1]:box[3], box[0]:box[2]]))
    return pixels.crop(box)


def _array(image: Any, out: np.ndarray | None = None) -> np.ndarray:
    """The pixels of the RGB ``image`` as ``uint8 (h, w, 3)``, written into ``out`` if given."""
    pixels = np.frombuffer(image.tobytes(), np.uint8).reshape(image.height, image.width, 3)
    if out is None:
        return pixels.copy()
    out[...] = pixels
    return out


def resize_and_crop(data: bytes, *, resize: int | tuple[int, int] | None = None,
                    crop: tuple[int, int] | int | None = None, draft: bool = True,
                    out: np.ndarray | None = None) -> np.ndarray:
    """The image in ``data`` resized (an int: the shorter side, as torchvision's
    ``Resize(int)``; ``(height, width)``: exactly that) and then centre-cropped to
    ``crop`` (padded with zeros where the image is smaller), as ``uint8 (h, w, 3)``,
    written into ``out`` where given (e.g. a batch's row)."""
    Image = pil_image_module()
    height, width = image_size(data)
    if isinstance(resize, int):
        size = resized_size(height, width, resize)
    else:
        size = (height, width) if resize is None else (int(resize[0]), int(resize[1]))
    k = dct_scale_for((height, width), size) if draft and resize is not None else 1
    image, k = decode_region(data, height, width, k)
    if crop is None:
        if size != (image.height, image.width) or k > 1:
            image = image.resize((size[1], size[0]), Image.Resampling.BILINEAR,
                                 box=(0, 0, width / k, height / k))
        return _array(image, out)
    crop = (crop, crop) if isinstance(crop, int) else (int(crop[0]), int(crop[1]))
    top, left = centre_box(size[0], size[1], crop)
    if draft and (size != (image.height, image.width) or k > 1) and top >= 0 and left >= 0:
        # resize only the part the crop keeps: the same filter windows as a whole resize
        # then a crop (PIL rounds between its passes differently: pixels within 1)
        sy, sx = height / k / size[0], width / k / size[1]
        return _array(image.resize((crop[1], crop[0]), Image.Resampling.BILINEAR,
                                   box=(left * sx, top * sy, (left + crop[1]) * sx,
                                        (top + crop[0]) * sy)), out)
    if size != (image.height, image.width) or k > 1:
        image = image.resize((size[1], size[0]), Image.Resampling.BILINEAR,
                             box=(0, 0, width / k, height / k))
    # PIL's crop pads with zeros outside the image, as torchvision's CenterCrop does
    return _array(image.crop((left, top, left + crop[1], top + crop[0])), out)


def resized_crop(data: bytes, box: tuple[int, int, int, int] | None, size: tuple[int, int], *,
                 rng: np.random.Generator | None = None, scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3 / 4, 4 / 3), draft: bool = True,
                 out: np.ndarray | None = None) -> np.ndarray:
    """The ``box`` ``(top, left, height, width)`` of the image in ``data`` cut out and
    resized to ``size`` (as torchvision's ``resized_crop``), written into ``out`` where
    given; ``box=None`` draws it from ``rng`` as ``RandomResizedCrop`` does
    (:func:`random_resized_box`)."""
    Image = pil_image_module()
    height, width = image_size(data)
    if box is None:
        assert rng is not None, "a random box needs rng"
        box = random_resized_box(rng, height, width, scale, ratio)
    top, left, h, w = box
    k = dct_scale_for((h, w), size) if draft else 1
    pixels, k = _decode_pixels(data, height, width, k)
    if k == 1:
        cut = _cut(pixels, (left, top, left + w, top + h))
        return _array(cut.resize((size[1], size[0]), Image.Resampling.BILINEAR), out)
    # the box at 1/k: cut out the whole pixels it touches, resize its exact part
    scaled = pixels.shape[:2] if isinstance(pixels, np.ndarray) else (pixels.height, pixels.width)
    x0, y0, x1, y1 = left / k, top / k, (left + w) / k, (top + h) / k
    fx, fy = math.floor(x0), math.floor(y0)
    cut = _cut(pixels, (fx, fy, min(math.ceil(x1), scaled[1]), min(math.ceil(y1), scaled[0])))
    return _array(cut.resize((size[1], size[0]), Image.Resampling.BILINEAR,
                             box=(x0 - fx, y0 - fy, x1 - fx, y1 - fy)), out)
