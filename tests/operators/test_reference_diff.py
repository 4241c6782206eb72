"""Every image operator against an outside reference (PIL, SciPy, colorsys, NumPy;
torchvision where installed), on odd sizes, uint8 and float32, 1 and 3 channels.

Each case names its reference and its tolerance: float32 results within ``FLOAT_TOL``
of the float64 reference unless the case says otherwise, uint8 results within one
level (rounding). The default run checks the deterministic operators on one small size
(uint8, 3 channels; the stochastic ones compile slowly, several seconds together); the
full matrix, every operator, runs with ``-m slow``.
``python tests/operators/test_reference_diff.py`` prints the measured differences
(the table in docs/operators.md).
"""

from __future__ import annotations

import colorsys
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

sys.path.insert(0, str(Path(__file__).resolve().parent))

from datarax.operators import image as I  # noqa: E402

FLOAT_TOL = 1e-5
N = 3  # records per batch
KEYS = jax.random.split(jax.random.key(11), N)
MEAN, STD = (0.4, 0.5, 0.6), (0.2, 0.25, 0.3)


@dataclass(frozen=True)
class Case:
    """One operator, its reference, and what the comparison allows."""

    name: str
    make: Callable[[int], Any]  # channels -> operator
    reference: str  # the library the result is compared with
    expect: Callable[..., Any] | None = None  # (x01, op, channels) -> expected in [0, 1] units
    check: Callable[..., float] | None = None  # (x01, out01, op) -> measured difference
    float_tol: float = FLOAT_TOL
    uint8_tol: float = 1.0  # in uint8 levels
    rgb_only: bool = False
    keeps_unit: bool = True  # output in the input's units (False: Normalize's float output)


# -- references (NumPy / PIL / SciPy / colorsys), in float64 on values in [0, 1] -----------
def pil_resize(image: np.ndarray, size: tuple[int, int], box: tuple[int, int, int, int] | None = None):
    if box is not None:
        y, x, h, w = box
        image = image[y:y + h, x:x + w]
    return np.stack([np.asarray(Image.fromarray(image[..., c].astype(np.float32), mode="F")
                                .resize(size[::-1], Image.BILINEAR), np.float64)
                     for c in range(image.shape[-1])], -1)


def affine(image: np.ndarray, sy: np.ndarray, sx: np.ndarray) -> np.ndarray:
    """SciPy's bilinear read at ``(sy, sx)``; taps outside the image read 0 (blend)."""
    return np.stack([ndimage.map_coordinates(image[..., c], [sy, sx], order=1,
                                             mode="grid-constant", cval=0.0)
                     for c in range(image.shape[-1])], -1)


def rotation(image: np.ndarray, degrees: float) -> np.ndarray:
    h, w = image.shape[:2]
    t = math.radians(degrees)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    dy, dx = yy - (h - 1) / 2, xx - (w - 1) / 2
    return affine(image, (h - 1) / 2 + math.cos(t) * dy + math.sin(t) * dx,
                  (w - 1) / 2 - math.sin(t) * dy + math.cos(t) * dx)


def shear(image: np.ndarray, amount: float, axis: int) -> np.ndarray:
    h, w = image.shape[:2]
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    if axis == 1:
        return affine(image, yy, xx + amount * (yy - (h - 1) / 2))
    return affine(image, yy + amount * (xx - (w - 1) / 2), xx)


def rot90_on_canvas(image: np.ndarray, k: int) -> np.ndarray:
    r = np.rot90(image, k)
    out = np.zeros_like(image)
    (h, w), (rh, rw) = image.shape[:2], r.shape[:2]
    oy, ox = (h - rh) // 2, (w - rw) // 2
    out[max(oy, 0):max(oy, 0) + min(h, rh), max(ox, 0):max(ox, 0) + min(w, rw)] = \
        r[max(-oy, 0):max(-oy, 0) + min(h, rh), max(-ox, 0):max(-ox, 0) + min(w, rw)]
    return out


def hsv_map(image: np.ndarray, change: Callable[..., tuple[float, float, float]]) -> np.ndarray:
    flat = [colorsys.hsv_to_rgb(*change(*colorsys.rgb_to_hsv(*px))) for px in image.reshape(-1, 3)]
    return np.array(flat).reshape(image.shape)


def contrast(image: np.ndarray, factor: float) -> np.ndarray:
    mean = image.mean(axis=(0, 1), keepdims=True)
    return (image - mean) * factor + mean


def translate(image: np.ndarray, dy: int, dx: int) -> np.ndarray:
    out = np.zeros_like(image)
    h, w = image.shape[:2]
    out[max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)] = \
        image[max(-dy, 0):h + min(-dy, 0), max(-dx, 0):w + min(-dx, 0)]
    return out


def blur(image: np.ndarray, sigma: float, size: int) -> np.ndarray:
    taps = np.exp(-0.5 * (np.arange(size) - size // 2) ** 2 / sigma**2)
    taps /= taps.sum()
    r = size // 2
    padded = np.pad(image, ((r, r), (r, r), (0, 0)))
    h, w = image.shape[:2]
    rows = sum(taps[i] * padded[i:i + h] for i in range(size))
    return sum(taps[j] * rows[:, j:j + w] for j in range(size))


def luma(image: np.ndarray) -> np.ndarray:
    if image.shape[-1] == 1:
        return image
    return np.repeat(image @ np.array([0.299, 0.587, 0.114]), 3).reshape(image.shape)


def autocontrast(image: np.ndarray) -> np.ndarray:
    lo, hi = image.min(axis=(0, 1), keepdims=True), image.max(axis=(0, 1), keepdims=True)
    return np.where(hi > lo, (image - lo) / np.where(hi > lo, hi - lo, 1.0), image)


def rand_augment_candidates(image: np.ndarray, m: float) -> list[np.ndarray]:
    """Every result one RandAugment operation at strength ``m`` can give (both signs)."""
    h, w = image.shape[:2]
    out = [image, np.where(image < 1.0 - m, image, 1.0 - image), autocontrast(image)]
    levels = 2.0 ** (8 - round(4 * m)) - 1
    out.append(np.floor(np.clip(image, 0, 1) * levels + 0.5) / levels)
    for s in (1.0, -1.0):
        out += [image + s * 0.4 * m, contrast(image, 1 + s * 0.9 * m), rotation(image, s * 30 * m),
                translate(image, 0, int(np.round(s * 0.45 * m * w))),
                translate(image, int(np.round(s * 0.45 * m * h)), 0),
                shear(image, s * 0.3 * m, 1), shear(image, s * 0.3 * m, 0)]
        if image.shape[-1] == 3:
            out.append(hsv_map(image, lambda hh, ss, v: (hh, min(ss * (1 + s * 0.9 * m), 1.0), v)))
    return out


# -- checks for operators whose result has no one-to-one reference --------------------------
def window_check(x, out, op):
    """Distance of each record to the nearest same-size window of its input."""
    h, w = out.shape[1:3]
    worst = 0.0
    for xi, oi in zip(x, out):
        worst = max(worst, min(np.abs(xi[y:y + h, x0:x0 + w] - oi).max()
                               for y in range(xi.shape[0] - h + 1)
                               for x0 in range(xi.shape[1] - w + 1)))
    return worst


def kept_or_filled(x, out, mask_of: Callable[[np.ndarray], np.ndarray]):
    """Largest difference outside the filled pixels (pixels equal to 0 or 1 everywhere)."""
    return max(np.abs(np.where(mask_of(oi), 0.0, oi - xi)).max() for xi, oi in zip(x, out))


def salt_pepper_check(x, out, op):
    return kept_or_filled(x, out, lambda o: (o == o[..., :1]).all(-1, keepdims=True)
                          & ((o[..., :1] == 0) | (o[..., :1] == 1)))


def patch_check(x, out, op):
    ph, pw = op.param("patch_size")
    worst = 0.0
    for xi, oi in zip(x, out):
        for y in range(0, xi.shape[0], ph):
            for x0 in range(0, xi.shape[1], pw):
                o, r = oi[y:y + ph, x0:x0 + pw], xi[y:y + ph, x0:x0 + pw]
                worst = max(worst, 0.0 if (o == 0).all() else np.abs(o - r).max())
    return worst


def noise_check(x, out, op):
    """How far the noise's mean and standard deviation are from 0 and ``std`` (unclipped
    values only)."""
    middle = (x > 0.25) & (x < 0.75)
    noise = (out - x)[middle]
    return max(abs(noise.mean()), abs(noise.std() - op.param("std")))


def rand_augment_check(x, out, op):
    m = op.param("magnitude") / 30.0
    return max(min(np.abs(c - oi).max() for c in rand_augment_candidates(xi, m))
               for xi, oi in zip(x, out))


def per_record(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    return lambda x, op, channels: np.stack([fn(xi, op) for xi in x])


CASES = [
    Case("Resize", lambda c: I.Resize((4, 5)), "PIL bilinear (mode F)",
         per_record(lambda xi, op: pil_resize(xi, (4, 5)))),
    Case("ResizedCrop", lambda c: I.ResizedCrop((4, 6), box=(1, 2, 5, 6)), "PIL crop + bilinear",
         per_record(lambda xi, op: pil_resize(xi, (4, 6), (1, 2, 5, 6)))),
    Case("RandomResizedCrop", lambda c: I.RandomResizedCrop(5), "PIL crop + bilinear",
         lambda x, op, c: np.stack([pil_resize(xi, (5, 5), box) for xi, box in zip(x, np.asarray(
             jax.jit(jax.vmap(op.box, in_axes=(0, None, None)), static_argnums=(1, 2))(
                 KEYS, x.shape[1], x.shape[2])).T.tolist())])),
    Case("Crop", lambda c: I.Crop((4, 4), offset="center"), "NumPy slice, margins // 2",
         per_record(lambda xi, op: xi[(xi.shape[0] - 4) // 2:][:4, (xi.shape[1] - 4) // 2:][:, :4]),
         float_tol=0.0, uint8_tol=0.0),
    Case("RandomCrop", lambda c: I.RandomCrop(4), "NumPy windows", check=window_check,
         float_tol=0.0, uint8_tol=0.0),
    Case("HorizontalFlip", lambda c: I.HorizontalFlip(1.0), "NumPy flip",
         per_record(lambda xi, op: xi[:, ::-1]), float_tol=0.0, uint8_tol=0.0),
    Case("VerticalFlip", lambda c: I.VerticalFlip(1.0), "NumPy flip",
         per_record(lambda xi, op: xi[::-1]), float_tol=0.0, uint8_tol=0.0),
    Case("Rotate90", lambda c: I.Rotate(90.0), "np.rot90 (centred)",
         per_record(lambda xi, op: rot90_on_canvas(xi, 1)), float_tol=0.0, uint8_tol=0.0),
    Case("Rotate", lambda c: I.Rotate(30.0), "SciPy map_coordinates (order 1, grid-constant)",
         per_record(lambda xi, op: rotation(xi, 30.0))),
    Case("Translate", lambda c: I.Translate(dy=2, dx=-3), "NumPy shift",
         per_record(lambda xi, op: translate(xi, 2, -3)), float_tol=0.0, uint8_tol=0.0),
    Case("Brightness", lambda c: I.Brightness(0.1), "NumPy x + delta",
         per_record(lambda xi, op: xi + 0.1)),
    Case("Contrast", lambda c: I.Contrast(1.5), "NumPy per-channel mean",
         per_record(lambda xi, op: contrast(xi, 1.5))),
    Case("Saturation", lambda c: I.Saturation(0.5), "colorsys HSV",
         per_record(lambda xi, op: hsv_map(xi, lambda h, s, v: (h, min(s * 0.5, 1.0), v))),
         rgb_only=True),
    Case("Hue", lambda c: I.Hue(0.2), "colorsys HSV",
         per_record(lambda xi, op: hsv_map(xi, lambda h, s, v: ((h + 0.2) % 1.0, s, v))),
         rgb_only=True),
    Case("Grayscale", lambda c: I.Grayscale(), "Rec.601 luma (NumPy)",
         per_record(lambda xi, op: luma(xi)), float_tol=1e-3),
    Case("GaussianBlur", lambda c: I.GaussianBlur(1.0, kernel_size=5), "NumPy, zero padding",
         per_record(lambda xi, op: blur(xi, 1.0, 5))),
    Case("Normalize", lambda c: I.Normalize(mean=MEAN[:c], std=STD[:c]), "NumPy",
         lambda x, op, c: (x - np.array(MEAN[:c])) / np.array(STD[:c]), keeps_unit=False),
    Case("Cutout", lambda c: I.Cutout(3, offset=(1, 2)), "NumPy fill",
         per_record(lambda xi, op: np.where(
             (np.arange(xi.shape[0])[:, None, None] >= 1) & (np.arange(xi.shape[0])[:, None, None] < 4)
             & (np.arange(xi.shape[1])[None, :, None] >= 2) & (np.arange(xi.shape[1])[None, :, None] < 5),
             0.0, xi)), float_tol=0.0, uint8_tol=0.0),
    Case("PatchDropout", lambda c: I.PatchDropout((2, 3), rate=0.5), "NumPy patches",
         check=patch_check, float_tol=0.0, uint8_tol=0.0),
    Case("SaltPepperNoise", lambda c: I.SaltPepperNoise(0.3), "NumPy (kept, 0 or max)",
         check=salt_pepper_check, float_tol=0.0, uint8_tol=0.0),
    Case("GaussianNoise", lambda c: I.GaussianNoise(0.1), "NumPy statistics (mean, std)",
         check=noise_check, float_tol=0.03, uint8_tol=0.03 * 255),
    Case("RandAugment", lambda c: I.RandAugment(num_ops=1, magnitude=9.0),
         "NumPy/SciPy/colorsys, nearest of its 12 operations", check=rand_augment_check,
         float_tol=1e-5),
]


def images(shape: tuple[int, int, int], dtype: Any) -> np.ndarray:
    rng = np.random.default_rng(sum(shape) + (dtype == np.uint8))
    if dtype == np.uint8:
        return rng.integers(0, 256, (N, *shape), dtype=np.uint8)
    return rng.random((N, *shape)).astype(np.float32)


STOCHASTIC = {"RandomResizedCrop", "RandomCrop", "PatchDropout", "SaltPepperNoise", "GaussianNoise",
              "RandAugment"}


def cases_for(channels: int, stochastic: bool = True) -> list[Case]:
    return [c for c in CASES if (channels == 3 or not c.rgb_only)
            and (stochastic or c.name not in STOCHASTIC)]


def outputs(shape: tuple[int, int, int], dtype: Any, stochastic: bool = True
            ) -> tuple[np.ndarray, dict[str, np.ndarray], dict]:
    """Every operator's result on one batch (each compiled on its own: one program of
    them all compiles slower than the parts)."""
    x = images(shape, dtype)
    ops = {c.name: c.make(shape[-1]) for c in cases_for(shape[-1], stochastic)}
    outs = {}
    for name, op in ops.items():
        keys = KEYS if op.stochastic else None
        outs[name] = np.asarray(jax.jit(op.apply_batch)({"image": jnp.asarray(x)}, keys)["image"])
    return x, outs, ops


def difference(case: Case, x: np.ndarray, out: np.ndarray, op: Any) -> float:
    """The case's measured difference, in the units of its tolerance (uint8: levels)."""
    scale = 255.0 if x.dtype == np.uint8 else 1.0
    x01 = x.astype(np.float64) / scale
    got = out.astype(np.float64) / (scale if case.keeps_unit else 1.0)
    if case.check is not None:
        return case.check(x01, got, op) * scale
    want = case.expect(x01, op, x.shape[-1])
    if case.keeps_unit and x.dtype == np.uint8:
        want = np.clip(np.round(want * 255.0), 0, 255) / 255.0
    return float(np.abs(got - want).max()) * (scale if case.keeps_unit else 1.0)


def check_setting(shape: tuple[int, int, int], dtype: Any, stochastic: bool = True) -> None:
    x, outs, ops = outputs(shape, dtype, stochastic)
    failures = []
    for case in cases_for(shape[-1], stochastic):
        out = outs[case.name]
        if case.keeps_unit and out.dtype != x.dtype:
            failures.append(f"{case.name}: dtype {out.dtype}, expected {x.dtype}")
            continue
        tol = case.uint8_tol if dtype == np.uint8 and case.keeps_unit else case.float_tol
        diff = difference(case, x, out, ops[case.name])
        if not diff <= tol + 1e-6:
            failures.append(f"{case.name} vs {case.reference}: {diff:.3g} > {tol:.3g}")
    assert not failures, f"{shape} {np.dtype(dtype).name}: " + "; ".join(failures)


def test_every_deterministic_image_operator_matches_its_reference():
    check_setting((7, 9, 3), np.uint8, stochastic=False)


@pytest.mark.slow
@pytest.mark.parametrize("size", [(17, 23), (16, 16), (11, 9)])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("channels", [1, 3])
def test_every_image_operator_matches_its_reference_full(size, dtype, channels):
    check_setting((*size, channels), dtype)


def test_torchvision_where_installed():
    """Geometric operators against torchvision.transforms.v2.functional (if installed)."""
    import importlib.util
    import sys
    import types

    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("torchvision is not installed")
    # The index's torchvision wheel is a CUDA build; beside the CPU torch its import
    # fails registering shapes for its compiled ops, which these transforms never use.
    # An empty module in that name's place (as benchmarks/w7_contenders.py does) skips it.
    name = "torchvision._meta_registrations"
    if "torchvision" not in sys.modules:
        sys.modules.setdefault(name, types.ModuleType(name))
    import torch
    from torchvision.transforms.v2 import functional as F
    x = images((9, 9, 3), np.float32)
    chw = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
    pairs = [
        (I.HorizontalFlip(1.0), F.horizontal_flip(chw)),
        (I.VerticalFlip(1.0), F.vertical_flip(chw)),
        (I.Rotate(90.0), F.rotate(chw, 90.0)),
        (I.Crop(4, offset="center"), F.center_crop(chw, [4, 4])),  # margin 5: same offset
        (I.Resize(5), F.resize(chw, [5, 5], antialias=True)),
    ]
    for op, ref in pairs:
        out = np.asarray(op.apply_batch({"image": jnp.asarray(x)}, None)["image"])
        np.testing.assert_allclose(out, ref.numpy().transpose(0, 2, 3, 1), atol=1e-5,
                                   err_msg=type(op).__name__)


def measure() -> None:
    """Print each case's largest difference over the full matrix (docs/operators.md)."""
    worst: dict[tuple[str, str], float] = {}
    for size in [(17, 23), (16, 16)]:
        for dtype in (np.uint8, np.float32):
            for channels in (1, 3):
                x, outs, ops = outputs((*size, channels), dtype)
                for case in cases_for(channels):
                    key = (case.name, np.dtype(dtype).name)
                    d = difference(case, x, outs[case.name], ops[case.name])
                    worst[key] = max(worst.get(key, 0.0), d)
    for case in CASES:
        print(f"| {case.name} | {case.reference} | {worst[(case.name, 'uint8')]:.3g} | "
              f"{worst[(case.name, 'float32')]:.3g} |")


if __name__ == "__main__":
    measure()
