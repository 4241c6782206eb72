"""``ResizedRows``: the rows of another reader with every encoded image resized.

What ``datarax convert --resize`` writes: an ``int`` resizes each image's shorter side to
it (torchvision's ``Resize(int)``; the field keeps ``None`` dimensions); ``(height,
width)`` resizes to exactly that. An image keeps its format (JPEG at quality 95, PNG
losslessly) and its channels. Values that are not encoded images pass as they are.

Example:
    >>> import io
    >>> from PIL import Image
    >>> out = io.BytesIO(); Image.new("RGB", (500, 375)).save(out, "PNG")
    >>> from datarax.dataset.rows import as_rows
    >>> rows = ResizedRows(as_rows([{"image": out.getvalue(), "label": 3}]), 256)
    >>> row = next(rows.iter_rows(0, 1))
    >>> Image.open(io.BytesIO(row["image"])).size, row["label"]
    ((341, 256), 3)
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from datarax.dataset.image_decode import image_size, resize_and_crop, resized_size
from datarax.dataset.image_open import image_named, open_pil, pil_image_module
from datarax.dataset.image_payload import deeper_than_8_bits
from datarax.dataset.images import IMAGE_MODES, channels_of, encoded_image_bytes, image_format
from datarax.dataset.rows import Rows
from datarax.errors import ConfigError

__all__ = ["ResizedRows", "parse_resize", "resize_encoded"]


def parse_resize(value: Any) -> int | tuple[int, int]:
    """``256`` (the shorter side) or ``(height, width)`` from an int, a pair or the text
    ``"256"`` / ``"224x224"``.

    Example:
        >>> parse_resize("256"), parse_resize("32x48"), parse_resize((8, 8))
        (256, (32, 48), (8, 8))
    """
    try:
        if isinstance(value, str):
            parts = [int(p) for p in value.lower().split("x")]
            value = parts[0] if len(parts) == 1 else tuple(parts)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
        h, w = value
        if all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (h, w)):
            return int(h), int(w)
    except (TypeError, ValueError):
        pass
    raise ConfigError(f"resize must be a size >= 1 for the shorter side (256) or a height and "
                      f"width (224x224), got {value!r}.")


def resize_encoded(data: bytes, resize: int | tuple[int, int]) -> bytes:
    """The encoded image ``data`` resized (bilinear, antialiased) and encoded again in
    its own format (JPEG at quality 95; anything else as PNG), keeping its channels."""
    Image = pil_image_module()
    height, width = image_size(data)
    size = resized_size(height, width, resize) if isinstance(resize, int) else resize
    if size == (height, width):
        return data
    with open_pil(data) as opened:
        mode = IMAGE_MODES[channels_of(opened)]
        if deeper_than_8_bits(opened, data):  # left as it is: the writer names and refuses it
            raise ValueError("an image of more than 8 bits per channel")
    if mode == "RGB":  # as decode_images resizes it: DCT-scaled where that leaves enough
        image = Image.fromarray(resize_and_crop(data, resize=size))
    else:  # grey or with alpha: as stored
        image = _resized_as_stored(open_pil(data).convert(mode), size)
    out = io.BytesIO()
    if image_format(data) == "jpeg" and mode != "RGBA":
        image.save(out, format="JPEG", quality=95)
    else:
        image.save(out, format="PNG")
    return out.getvalue()


def _resized_as_stored(image: Any, size: tuple[int, int]) -> Any:
    """The grey or RGBA ``image`` resized to ``size`` (bilinear), its colour bands apart
    from its alpha: Pillow's resize of RGBA weighs colour by alpha, which turns the colour
    under transparent pixels (a white background, say) black, while ``decode_images``,
    as torchvision's loader, drops alpha and shows that colour."""
    Image = pil_image_module()
    box = (size[1], size[0])
    if image.mode != "RGBA":
        return image.resize(box, Image.Resampling.BILINEAR)
    colour = image.convert("RGB").resize(box, Image.Resampling.BILINEAR)
    colour.putalpha(image.getchannel("A").resize(box, Image.Resampling.BILINEAR))
    return colour


class ResizedRows(Rows):
    """``rows`` with each encoded image value resized to ``resize``."""

    def __init__(self, rows: Rows, resize: int | tuple[int, int]) -> None:
        self.rows = rows
        self.resize = parse_resize(resize)
        self.length = rows.length
        way = (f"the shorter side {self.resize}" if isinstance(self.resize, int)
               else f"{self.resize[0]}x{self.resize[1]}")
        # (a conversion resumed with another resize is refused: the description differs)
        self.description = f"{rows.description} (images resized to {way})"
        self.random_access = rows.random_access

    def hints(self) -> dict[str, dict[str, Any]]:
        """The rows' hints, an image's size ``None`` where the shorter side is resized
        (the other side varies with the aspect ratio) and left out for a fixed size."""
        out = {}
        for name, hint in self.rows.hints().items():
            hint = dict(hint)
            if "image_size" in hint or hint.get("image"):
                hint.pop("image_size", None)
                if isinstance(self.resize, int):
                    hint["image_size"] = (None, None)
            out[name] = hint
        return out

    def row_name(self, row: int) -> str:
        return self.rows.row_name(row)

    def check_images(self) -> None:
        """Refuse rows whose first row holds no encoded image: nothing would be resized."""
        first = next(iter(self.rows.iter_rows(0, 1)), None)
        if first is None or any(_is_image(v) for v in first.values()):
            return
        fields = ", ".join(f"{name}: {_kind(value)}" for name, value in first.items())
        raise ConfigError(
            f"resize= (--resize) resizes encoded images (PNG / JPEG / ... files, image columns), "
            f"and the first record of {self.rows.description} holds none ({fields}); leave "
            "out resize, or resize arrays of pixels before converting them.")

    def name_classes(self, class_names: Mapping[str, Sequence[str]]) -> None:
        self.rows.name_classes(class_names)

    def iter_rows(self, start: int, stop: int | None) -> Iterator[Mapping[str, Any]]:
        for row in self.rows.iter_rows(start, stop):
            yield {name: self._resized(value) for name, value in row.items()}

    def _resized(self, value: Any) -> Any:
        try:
            data = encoded_image_bytes(value)
        except OSError:
            return value  # the writer names the missing file
        if data is None:
            return value
        path = value.get("path") if isinstance(value, Mapping) else None
        try:
            with image_named(f"image file {path}" if path else "an image of the rows"):
                return resize_encoded(data, self.resize)
        except (OSError, ValueError, SyntaxError):
            return value  # undecodable: the writer names its row and field


def _is_image(value: Any) -> bool:
    """Whether ``value`` is an encoded image or an image dict naming its file."""
    if isinstance(value, Mapping) and set(value) <= {"bytes", "path"}:
        return True
    try:
        return encoded_image_bytes(value) is not None
    except OSError:
        return True


def _kind(value: Any) -> str:
    """How a value is named where no image was found: its dtype and shape, or its type."""
    shape = getattr(value, "shape", None)
    return f"{value.dtype} array {tuple(shape)}" if shape is not None else type(value).__name__
