"""The in-memory vision workload (W1/W6): its data, its per-batch digest and its check.

Every contender gets the same arrays: ``n`` random 32x32x3 uint8 images and int32
labels that are the record ids (``labels[i] == i``), so the check can tell which
record each output row is. The contender must serve every record once per epoch in a
shuffled order, as ``image / 255`` in float32, flipped horizontally with p=0.5.

While the clock runs the consumer only does :func:`digest` per batch (one reduction
over the image rows, the same for every contender). After the clock stops,
:func:`verify` checks every record arrived exactly once, that each row equals its
source image /255 either as is or flipped, and that about half were flipped, and
returns a checksum that is the same for every honest contender (it does not depend
on the order or on which records were flipped).

Example:
    >>> images, labels = make_data(8, seed=0)
    >>> batch = images[::-1].astype("float32") / 255
    >>> result = verify(images, [(digest(batch), labels[::-1])], check_flips=False)
    >>> result["ok"], result["records"]
    (True, 8)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

HEIGHT, WIDTH, CHANNELS = 32, 32, 3


@dataclass(frozen=True)
class VisionSpec:
    """One in-memory vision run: records, batch size and the seed of data and shuffle."""

    records: int = 50_000
    batch_size: int = 256
    seed: int = 0


def make_data(records: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random uint8 images ``(records, 32, 32, 3)`` and int32 labels ``0..records-1``."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(records, HEIGHT, WIDTH, CHANNELS), dtype=np.uint8)
    labels = np.arange(records, dtype=np.int32)
    return images, labels


def digest(images: np.ndarray) -> np.ndarray:
    """Per-record column sums over the image rows: ``(batch, 32, 3)`` float32.

    A horizontal flip reverses the column axis of this summary, so it tells a
    flipped record from an unflipped one, and its channel-weighted total does not
    change under a flip.
    """
    return np.asarray(images, dtype=np.float32).sum(axis=1)


def _moments(columns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(flip-invariant total, column moment as served, column moment if flipped)."""
    columns = np.asarray(columns, dtype=np.float64)
    c_weight = np.arange(1, CHANNELS + 1, dtype=np.float64)
    w_weight = np.arange(1, WIDTH + 1, dtype=np.float64)
    per_column = columns @ c_weight  # (n, W)
    total = per_column.sum(axis=1)
    moment = per_column @ w_weight
    flipped = per_column @ w_weight[::-1]
    return total, moment, flipped


def verify(
    images: np.ndarray,
    digests: list[tuple[np.ndarray, np.ndarray]],
    *,
    check_flips: bool = True,
) -> dict[str, Any]:
    """Check one epoch of ``(digest, labels)`` pairs against the source ``images``.

    Returns ``records`` (rows seen), ``ok`` (all checks passed), ``problems`` (what
    failed), ``flip_fraction`` and ``checksum`` (order- and flip-independent).
    """
    n = images.shape[0]
    problems: list[str] = []
    if digests:
        columns = np.concatenate([np.asarray(d, np.float64) for d, _ in digests])
        ids = np.concatenate([np.asarray(l).astype(np.int64).reshape(-1) for _, l in digests])
    else:
        columns = np.zeros((0, WIDTH, CHANNELS))
        ids = np.zeros((0,), np.int64)
    if ids.size != n:
        problems.append(f"served {ids.size} records, expected {n}")
    if ids.size and (ids.min() < 0 or ids.max() >= n):
        problems.append("labels outside 0..n-1 (labels were altered)")
        ids = np.clip(ids, 0, n - 1)
    counts = np.bincount(ids, minlength=n)
    if ids.size and (counts != 1).any():
        problems.append(
            f"{int((counts == 0).sum())} records missing, {int((counts > 1).sum())} repeated"
        )
    expected_cols = images[ids].sum(axis=1, dtype=np.int64).astype(np.float64) / 255.0
    total, moment, _ = _moments(columns)
    exp_total, exp_plain, exp_flipped = _moments(expected_cols)
    scale = np.maximum(np.abs(exp_total), 1.0)
    if ids.size and (np.abs(total - exp_total) / scale > 1e-4).any():
        bad = int((np.abs(total - exp_total) / scale > 1e-4).sum())
        problems.append(f"{bad} records do not hold image/255 of their source record")
    flipped = np.abs(moment - exp_flipped) < np.abs(moment - exp_plain)
    nearest = np.minimum(np.abs(moment - exp_flipped), np.abs(moment - exp_plain))
    if ids.size and (nearest / (scale * WIDTH) > 1e-4).any():
        problems.append("some records are neither the image nor its horizontal flip")
    flip_fraction = float(flipped.mean()) if ids.size else 0.0
    if check_flips and ids.size >= 1000 and not 0.45 <= flip_fraction <= 0.55:
        problems.append(f"flip fraction {flip_fraction:.3f} is not about 0.5")
    checksum = float(np.sum((ids + 1.0) * total))
    return {
        "records": int(ids.size),
        "ok": not problems,
        "problems": problems,
        "flip_fraction": round(flip_fraction, 4),
        "checksum": checksum,
    }


def expected_checksum(images: np.ndarray) -> float:
    """The checksum :func:`verify` reports for a complete, correct epoch."""
    cols = images.sum(axis=1, dtype=np.int64).astype(np.float64) / 255.0
    total, _, _ = _moments(cols)
    return float(np.sum((np.arange(images.shape[0]) + 1.0) * total))
