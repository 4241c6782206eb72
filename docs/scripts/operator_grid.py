"""Draw what each datarax operator does: ``python docs/scripts/operator_grid.py``.

Writes ``docs/images/operators.png``: one row per operator, the input image on the
left and four records' outputs (four per-record keys) to its right. The input is a
synthetic picture (colour gradients, a disc, stripes), so no data is downloaded.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from PIL import Image, ImageDraw

from datarax.core.keys import record_keys
from datarax.operators import BatchMixOperator
from datarax.operators import image as I

SAMPLES = 4
LABEL_WIDTH = 150


def sample_image(size: int, variant: int = 0) -> np.ndarray:
    """A colourful synthetic ``(size, size, 3)`` uint8 picture."""
    y, x = np.mgrid[0:size, 0:size] / max(size - 1, 1)
    r, g, b = x, y, 1.0 - x * y
    if variant:
        r, g, b = 1.0 - y, x * 0.5 + 0.25, y
    disc = (x - 0.6) ** 2 + (y - 0.4) ** 2 < 0.06
    stripes = (np.floor(x * 8) % 2 == 0) & (y > 0.75)
    img = np.stack([r, g, b], -1)
    img[disc] = [1.0, 0.85, 0.1] if not variant else [0.1, 0.3, 0.9]
    img[stripes] = 0.05
    return (img * 255).round().astype(np.uint8)


def operators(size: int) -> list[tuple[str, object]]:
    """``(label, operator)`` for every row of the grid."""
    half = max(size // 2, 1)
    return [
        ("RandomResizedCrop", I.RandomResizedCrop(size)),
        ("RandomCrop(1/2)", I.RandomCrop(half)),
        ("HorizontalFlip(0.5)", I.HorizontalFlip(0.5)),
        ("VerticalFlip(0.5)", I.VerticalFlip(0.5)),
        ("Rotate(-30..30)", I.Rotate((-30.0, 30.0))),
        ("Translate(-1/4..+1/4)", I.Translate((-size / 4, size / 4), (-size / 4, size / 4))),
        ("Brightness(-.3..+.3)", I.Brightness((-0.3, 0.3))),
        ("Contrast(.4..1.6)", I.Contrast((0.4, 1.6))),
        ("Saturation(0..2)", I.Saturation((0.0, 2.0))),
        ("Hue(-.5..+.5)", I.Hue((-0.5, 0.5))),
        ("Grayscale", I.Grayscale()),
        ("GaussianBlur(.5..3)", I.GaussianBlur((0.5, 3.0), kernel_size=9)),
        ("GaussianNoise(.1)", I.GaussianNoise(0.1)),
        ("SaltPepper(.1)", I.SaltPepperNoise(0.1)),
        ("Cutout(1/3)", I.Cutout(max(size // 3, 1))),
        ("PatchDropout", I.PatchDropout(max(size // 6, 1), 0.3)),
        ("RandAugment(2, 12)", I.RandAugment(2, 12.0)),
        ("Mixup", BatchMixOperator(mode="mixup", alpha=1.0, num_classes=2)),
        ("Cutmix", BatchMixOperator(mode="cutmix", alpha=1.0, num_classes=2)),
    ]


def row_outputs(op: object, image: np.ndarray, other: np.ndarray, size: int) -> list[np.ndarray]:
    keys = record_keys(jax.random.key(7), 0, jnp.arange(SAMPLES))
    if isinstance(op, BatchMixOperator):  # each record mixed with the other picture
        outs = []
        for i in range(SAMPLES):
            pair = {"image": jnp.stack([image, other]).astype(jnp.float32) / 255,
                    "label": jnp.array([0, 1])}
            mixed = op.apply_batch(pair, keys[jnp.array([i, (i + 1) % SAMPLES])])
            outs.append(np.asarray(mixed["image"][0] * 255).clip(0, 255).astype(np.uint8))
        return outs
    batch = jnp.asarray(np.repeat(image[None], SAMPLES, axis=0))
    apply = jax.jit(lambda b, k: op.apply_batch({"image": b}, k)["image"])  # one compile per row
    out = np.asarray(apply(batch, keys if op.stochastic else None))
    tiles = []
    for tile in out:
        if tile.shape[:2] != (size, size):
            tile = np.asarray(Image.fromarray(tile).resize((size, size), Image.NEAREST))
        tiles.append(tile)
    return tiles


def render_grid(path: str | Path, tile: int = 96) -> tuple[int, int]:
    """Draw the grid at ``tile`` pixels per image into ``path``; returns (width, height)."""
    image, other = sample_image(tile), sample_image(tile, variant=1)
    rows = operators(tile)
    pad = 4
    width = LABEL_WIDTH + (SAMPLES + 1) * (tile + pad) + pad
    height = len(rows) * (tile + pad) + pad
    canvas = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(canvas)
    for r, (label, op) in enumerate(rows):
        top = pad + r * (tile + pad)
        draw.text((pad, top + tile // 2 - 6), label, fill="black")
        tiles = [image, *row_outputs(op, image, other, tile)]
        for c, t in enumerate(tiles):
            canvas.paste(Image.fromarray(np.asarray(t, np.uint8)), (LABEL_WIDTH + c * (tile + pad), top))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    canvas.save(path, format="PNG")
    return width, height


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "images" / "operators.png"))
    parser.add_argument("--tile", type=int, default=96)
    args = parser.parse_args(argv)
    print("wrote", args.out, render_grid(args.out, args.tile))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
