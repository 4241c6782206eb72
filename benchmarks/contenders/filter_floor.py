"""The numpy floor of W10: shuffle, keep the records whose label is even, /255, flip.

What a hand-written loop does with no framework: one permutation, the kept indices
chosen up front, then per batch a gather, a float conversion and a horizontal flip of
the chosen rows, one channel at a time (the fast way to reverse a strided axis).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


def filter_epoch(images: np.ndarray, labels: np.ndarray, batch_size: int,
                 seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The kept records of one shuffled epoch, as (float images, labels) batches."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(images.shape[0])
    kept = order[labels[order] % 2 == 0]
    flips = rng.random(kept.shape[0]) < 0.5
    for lo in range(0, kept.shape[0], batch_size):
        rows = kept[lo:lo + batch_size]
        out = images[rows].astype(np.float32)
        out *= np.float32(1 / 255)
        w = np.flatnonzero(flips[lo:lo + batch_size])
        src = out[w]
        for c in range(out.shape[-1]):
            out[w, :, :, c] = src[:, :, ::-1, c]
        yield out, labels[rows]
