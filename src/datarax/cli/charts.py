"""PNG pictures the command line writes: an image grid, a histogram, a bench chart.

The grid's size is exact (:func:`grid_size`, :func:`tile_size`); the charts are Matplotlib
figures of ``FIGSIZE`` inches at ``DPI``. Pillow and Matplotlib (the ``cli`` extra) are
imported only when a picture is asked for.

Example:
    >>> grid_size(n=10, height=8, width=8)
    (200, 266)
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from datarax.core.extras import require

PAD = 2
MIN_TILE = 64
MAX_TILE = 256
CAPTION_HEIGHT = 12
FIGSIZE = (6.4, 4.0)
DPI = 100


def tile_size(height: int, width: int) -> tuple[int, int]:
    """``(height, width)`` of an image's tile: upscaled by a whole factor to at least
    ``MIN_TILE`` pixels on its longer side, or shrunk to ``MAX_TILE`` there.

    Example:
        >>> tile_size(8, 8), tile_size(100, 50), tile_size(3000, 4000)
        ((64, 64), (100, 50), (192, 256))
    """
    longer = max(height, width)
    if longer > MAX_TILE:
        return max(1, round(height * MAX_TILE / longer)), max(1, round(width * MAX_TILE / longer))
    scale = max(1, math.ceil(MIN_TILE / longer))
    return height * scale, width * scale


def shrunk(image: np.ndarray, factor: float) -> np.ndarray:
    """``image`` (``H x W [x C]`` uint8) shrunk by ``factor`` <= 1 (PIL's bilinear)."""
    if factor >= 1.0:
        return image
    image_module = require("PIL.Image", extra="cli", user="datarax inspect --grid")
    size = (max(1, round(image.shape[1] * factor)), max(1, round(image.shape[0] * factor)))
    flat = image[..., 0] if image.ndim == 3 and image.shape[2] == 1 else image
    out = np.asarray(image_module.fromarray(np.ascontiguousarray(flat)).resize(
        size, image_module.Resampling.BILINEAR))
    return out.reshape(*out.shape[:2], *image.shape[2:])


def grid_size(n: int, height: int, width: int, caption_height: int = 0) -> tuple[int, int]:
    """``(pixel_height, pixel_width)`` of the grid of ``n`` images of ``height x width``."""
    cols = math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    tile_h, tile_w = tile_size(height, width)
    return (rows * (tile_h + caption_height) + (rows + 1) * PAD,
            cols * tile_w + (cols + 1) * PAD)


def is_image_field(shape: Sequence[int], dtype: np.dtype) -> bool:
    """A per-record shape ``(H, W)``, ``(H, W, 1)``, ``(H, W, 3)`` or ``(H, W, 4)`` of numbers."""
    if np.dtype(dtype).kind not in "uif" or len(shape) not in (2, 3):
        return False
    return min(shape[:2]) >= 2 and (len(shape) == 2 or shape[2] in (1, 3, 4))


def _to_uint8(images: np.ndarray) -> np.ndarray:
    """uint8 images as they are; other dtypes scaled by the batch's min and max to 0..255."""
    if images.dtype == np.uint8:
        return images
    values = images.astype(np.float64)
    lo, hi = float(values.min()), float(values.max())
    span = hi - lo if hi > lo else 1.0
    return np.round((values - lo) / span * 255.0).astype(np.uint8)


def write_image_grid(images: np.ndarray, path: str, captions: Sequence[str] | None = None
                     ) -> tuple[int, int]:
    """Write ``images`` (``N x H x W [x C]``) as one PNG grid, optionally captioned;
    returns its ``(height, width)``."""
    image_module = require("PIL.Image", extra="cli", user="datarax inspect --grid")
    pixels = _to_uint8(np.asarray(images))
    if pixels.ndim == 3:
        pixels = pixels[..., None]
    if pixels.shape[-1] == 1:
        pixels = np.repeat(pixels, 3, axis=-1)
    if captions is not None:
        pixels = pixels[..., :3]
    n, height, width, channels = pixels.shape
    cols = math.ceil(math.sqrt(n))
    tile_h, tile_w = tile_size(height, width)
    scale = tile_h // height if tile_h >= height else 0  # 0: shrunk
    caption_h = CAPTION_HEIGHT if captions is not None else 0
    mode = "RGBA" if channels == 4 else "RGB"
    grid_h, grid_w = grid_size(n, height, width, caption_h)
    canvas = image_module.new(mode, (grid_w, grid_h), "white")
    image_draw = require("PIL.ImageDraw", extra="cli", user="datarax inspect --grid")
    draw = image_draw.Draw(canvas) if captions is not None else None
    chars = max(3, tile_w // 6)
    for i in range(n):
        row, col = divmod(i, cols)
        left, top = PAD + col * (tile_w + PAD), PAD + row * (tile_h + caption_h + PAD)
        if scale:
            tile = image_module.fromarray(np.ascontiguousarray(
                pixels[i].repeat(scale, axis=0).repeat(scale, axis=1)), mode)
        else:
            tile = image_module.fromarray(np.ascontiguousarray(pixels[i]), mode).resize(
                (tile_w, tile_h), image_module.Resampling.BILINEAR)
        canvas.paste(tile, (left, top))
        if draw is not None:
            text = captions[i] if len(captions[i]) <= chars else captions[i][: chars - 1] + "~"
            draw.text((left + 1, top + tile_h), text, fill="black")
    canvas.save(path, format="PNG")
    return grid_h, grid_w


@contextlib.contextmanager
def _figure(path: str, *grid: int) -> Iterator[Any]:
    """A Matplotlib figure's axes (``plt.subplots(*grid)``), saved as a PNG at ``path``."""
    require("matplotlib", extra="cli", user="datarax (PNG charts)")
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(*grid, figsize=FIGSIZE, dpi=DPI)
    yield axes
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=DPI)
    plt.close(fig)


def write_histogram(values: np.ndarray, field: str, path: str, bins: int = 30) -> None:
    """Histogram of every value of a numeric field (all records, all elements)."""
    flat = np.asarray(values).astype(np.float64).ravel()
    with _figure(path) as ax:
        ax.hist(flat, bins=bins, color="#4c72b0")
        ax.set_title(f"{field}: {flat.size} values, min {flat.min():g}, max {flat.max():g}")
        ax.set_xlabel(field)
        ax.set_ylabel("count")


def write_bench_chart(
    ms_per_batch: Mapping[str, float], rates: Mapping[str, float], path: str
) -> None:
    """Two panels: per-stage milliseconds per batch, and records/s of each measured pass."""
    stages = [k for k, v in ms_per_batch.items() if v > 0] or list(ms_per_batch)
    with _figure(path, 1, 2) as (left, right):
        left.barh(stages, [ms_per_batch[k] for k in stages], color="#4c72b0")
        left.set_xlabel("ms per batch")
        left.set_title("pipeline.stats()")
        right.bar(list(rates), list(rates.values()), color="#55a868")
        right.set_ylabel("records/s")
        right.set_title("throughput")
