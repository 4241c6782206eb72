"""W7 data, the numpy reference of the augmentation chain, and the check of a run.

The chain, per record: uint8 -> float /255 -> random resized crop to 64x64 (area
share U(0.08, 1), log aspect ratio U(log 3/4, log 4/3), ten tries, else the whole
image; bilinear with antialiasing) -> horizontal flip with p=0.5 -> brightness
``+ U(-0.2, 0.2)`` -> contrast ``(x - channel mean) * U(0.8, 1.2) + channel mean`` ->
normalize with MEAN/STD. Labels are record ids, so the check can tell records apart.

torchvision's ``ColorJitter`` defines the two colour steps otherwise, and its contenders
run it as it is (``color="torchvision"`` below): brightness multiplies by a factor
U(0.8, 1.2) (:data:`JITTER_BRIGHTNESS`, 1 + the chain's shift range), contrast blends
each pixel with the image's mean luma (one grey level, not each channel's own mean),
each result is clipped to [0, 1], and the two steps run in a random order per record.

The timed run cannot be compared value by value (each library draws its own random
numbers), so "same work" is checked two ways: every contender pushes
:data:`FIXED` parameters through its own transform code and must match the numpy
reference (:func:`reference_fixed`), and the timed epoch must serve every record once
as finite ``(64, 64, 3)`` float32 images whose de-normalized values stay in range.

Example:
    >>> images, labels = make_data(4, size=12)
    >>> reference_fixed(images, size=8).shape
    (4, 8, 8, 3)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

SIZE, OUT = 96, 64
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)
BRIGHTNESS, CONTRAST = (-0.2, 0.2), (0.8, 1.2)
# The deterministic parameters of the same-work check: box (y, x, h, w) as shares of
# the side, flipped, brightness, contrast.
FIXED = {"box": (1 / 12, 1 / 24, 5 / 6, 11 / 12), "flip": True, "brightness": 0.1, "contrast": 1.2}
# torchvision's brightness factor range and its luma weights (ITU-R 601, as its
# rgb_to_grayscale); with ``color="torchvision"`` a brightness ``b`` means the factor 1 + b.
JITTER_BRIGHTNESS = (1 + BRIGHTNESS[0], 1 + BRIGHTNESS[1])
LUMA = np.array([0.2989, 0.587, 0.114], np.float32)
COLORS = ("chain", "torchvision")


def make_data(records: int, seed: int = 0, size: int = SIZE) -> tuple[np.ndarray, np.ndarray]:
    """Random uint8 images ``(records, size, size, 3)`` and int32 labels ``0..records-1``."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(records, size, size, 3), dtype=np.uint8)
    return images, np.arange(records, dtype=np.int32)


def fixed_box(size: int) -> tuple[int, int, int, int]:
    y, x, h, w = FIXED["box"]
    return round(y * size), round(x * size), round(h * size), round(w * size)


def resize_weights(length: int, out: int) -> np.ndarray:
    """``(out, length)`` bilinear weights (triangle filter widened when shrinking)."""
    scale = out / length
    support = max(1.0, 1.0 / scale)
    centres = (np.arange(out) + 0.5) / scale - 0.5
    taps = np.arange(length)
    w = np.maximum(0.0, 1.0 - np.abs(taps[None, :] - centres[:, None]) / support)
    return (w / w.sum(axis=1, keepdims=True)).astype(np.float32)


def sample_box(rng: np.random.Generator, height: int, width: int) -> tuple[int, int, int, int]:
    """The random resized crop box, as torchvision samples it (whole image as fallback)."""
    area = height * width
    for _ in range(10):
        target = area * rng.uniform(*SCALE)
        ratio = math.exp(rng.uniform(math.log(RATIO[0]), math.log(RATIO[1])))
        w = int(round(math.sqrt(target * ratio)))
        h = int(round(math.sqrt(target / ratio)))
        if 0 < w <= width and 0 < h <= height:
            return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
    return 0, 0, height, width


def transform(image: np.ndarray, box, flip: bool, brightness: float, contrast: float,
              out: int = OUT, color: str = "chain") -> np.ndarray:
    """The chain on one uint8 image with the given parameters (numpy, float32).

    ``color="torchvision"`` takes brightness and contrast as torchvision's ColorJitter
    defines them (brightness ``b`` as the factor ``1 + b``; see the module docstring).
    """
    if color not in COLORS:
        raise ValueError(f"color must be one of {COLORS}, got {color!r}")
    y, x, h, w = box
    crop = image[y:y + h, x:x + w].astype(np.float32) * np.float32(1 / 255)
    wy, wx = resize_weights(h, out), resize_weights(w, out)
    rows = (wy @ crop.reshape(h, w * 3)).reshape(out, w, 3)  # resize the columns
    cols = wx @ rows.transpose(1, 0, 2).reshape(w, out * 3)  # then the rows: (out, out*3)
    resized = cols.reshape(out, out, 3).transpose(1, 0, 2)
    if flip:
        resized = resized[:, ::-1]
    if color == "torchvision":
        resized = np.clip(resized * np.float32(1 + brightness), 0, 1)
        grey = (resized @ LUMA).mean()
        resized = np.clip((resized - grey) * np.float32(contrast) + grey, 0, 1)
    else:
        resized = resized + np.float32(brightness)
        mean = resized.mean(axis=(0, 1), keepdims=True)
        resized = (resized - mean) * np.float32(contrast) + mean
    return ((resized - MEAN) / STD).astype(np.float32)


def reference_fixed(images: np.ndarray, size: int = OUT, color: str = "chain") -> np.ndarray:
    """The chain with :data:`FIXED` parameters over ``images`` (numpy)."""
    box = fixed_box(images.shape[1])
    return np.stack([transform(im, box, FIXED["flip"], FIXED["brightness"], FIXED["contrast"], size,
                               color) for im in images])


def check_fixed(got: np.ndarray, images: np.ndarray, color: str = "chain") -> dict[str, Any]:
    """Compare a contender's fixed-parameter output with the numpy reference."""
    want = reference_fixed(images, color=color)
    got = np.asarray(got, np.float32)
    if got.shape != want.shape:
        return {"ok": False, "problem": f"shape {got.shape}, expected {want.shape}"}
    err = float(np.abs((got - want) * STD).mean())  # in [0, 1] pixel units
    return {"ok": err < 0.01, "mean_abs_error": round(err, 5)}


def verify(batches: list[tuple[np.ndarray, np.ndarray]], records: int) -> dict[str, Any]:
    """Check a timed epoch from ``(per-record channel means, labels)`` pairs."""
    problems: list[str] = []
    means = np.concatenate([m for m, _ in batches]) if batches else np.zeros((0, 3))
    ids = np.concatenate([np.asarray(l).reshape(-1) for _, l in batches]) if batches else np.zeros(0, int)
    if ids.size != records:
        problems.append(f"served {ids.size} records, expected {records}")
    counts = np.bincount(np.clip(ids, 0, records - 1), minlength=records)
    if (counts != 1).any():
        problems.append(f"{int((counts == 0).sum())} missing, {int((counts > 1).sum())} repeated")
    unit = means * STD + MEAN
    if not np.isfinite(means).all() or unit.min() < -0.5 or unit.max() > 1.5:
        problems.append("images out of range after de-normalizing (chain not applied as specified)")
    return {"records": int(ids.size), "ok": not problems, "problems": problems,
            "mean_unit_value": round(float(unit.mean()), 4) if unit.size else None}


def digest(images: Any) -> np.ndarray:
    """Per-record channel means ``(batch, 3)``: the consumer's work per batch.

    One channel at a time, each a contiguous reduction: NumPy's ``mean(axis=(1, 2))``
    over HWC images (3 values per innermost row) took 16 ms per batch of 256 64x64
    images, against 0.8 ms this way — enough to hide any loader faster than that behind
    the consumer. Same values up to float rounding.
    """
    images = np.asarray(images, np.float32)
    rows = images.reshape(images.shape[0], -1, images.shape[-1])
    return np.stack([rows[:, :, c].mean(axis=1) for c in range(rows.shape[-1])], axis=1)
