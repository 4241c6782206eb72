"""The floor: plain NumPy doing the vision work on one thread, no framework."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


def versions() -> dict[str, str]:
    return {"numpy": np.__version__}


def vision_epoch(images: np.ndarray, labels: np.ndarray, spec) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Shuffle, gather, flip half the records (on uint8), then /255 to float32."""
    rng = np.random.default_rng(spec.seed)
    n = images.shape[0]
    order = rng.permutation(n)
    scale = np.float32(255)
    for start in range(0, n, spec.batch_size):
        idx = order[start : start + spec.batch_size]
        raw = images[idx]
        flip = rng.random(idx.size) < 0.5
        raw[flip] = raw[flip, :, ::-1]
        out = raw.astype(np.float32)
        out /= scale
        yield out, labels[idx]
