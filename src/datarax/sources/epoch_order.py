"""``EpochOrder``: which stable record each epoch position serves, in O(1) memory.

Positions of this process's shard map to stable record indices: in order, by the
Feistel permutation keyed by ``seed + epoch`` (:mod:`datarax.samplers.index_shuffle`,
bit-identical to ``grain.experimental.index_shuffle``), or by the window shuffle of
:mod:`datarax.samplers.shard_window`. Nothing of size ``length`` is ever built.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from datarax.samplers.index_shuffle import index_shuffle_np, small_permutation, uses_small_table
from datarax.samplers.shard_window import shard_windows

__all__ = ["EpochOrder", "WINDOW", "shuffle_window"]


@dataclasses.dataclass(frozen=True)
class EpochOrder:
    """Which stable record each epoch position serves, in O(1) memory.

    Args:
        length: records in the whole data set (one unsharded epoch).
        seed: ``None`` for file order; else the base seed, epoch ``e`` shuffled with
            ``(seed + e) % 2**32``.
        epoch: the pass number.
        lo, hi: this shard's block ``[lo, hi)`` of the epoch's (shuffled) order
            (``hi=None``: ``length``).
        runs: instead of one block, these runs ``((lo, hi), ...)`` of epoch positions,
            in order (a re-split :class:`~datarax.core.share.Share`'s).
        shard_window: ``(counts, W)``: shuffle within windows of ``W`` files of
            ``counts`` records each instead of over the whole data set (needs a seed);
            ``counts`` may be of blocks of files (:mod:`datarax.storage.blocks`).
        block_bytes: the size the blocks of ``shard_window`` were cut at (None: a block
            per file); part of :meth:`describe`, so a state is restored into the same cut.

    Example:
        >>> EpochOrder(length=5, seed=None, epoch=3, lo=1, hi=4).indices(0, 3).tolist()
        [1, 2, 3]
        >>> EpochOrder(length=6, seed=None, epoch=0, runs=((0, 2), (4, 6))).indices(1, 4).tolist()
        [1, 4, 5]
        >>> EpochOrder(length=5, seed=7, epoch=1).describe()
        {'seed': 7, 'epoch': 1, 'n': 5}
        >>> EpochOrder(length=4, seed=7, epoch=0, shard_window=((2, 2), 1)).indices(0, 4).tolist()
        [3, 2, 0, 1]
    """

    length: int
    seed: int | None
    epoch: int
    lo: int = 0
    hi: int | None = None
    runs: tuple[tuple[int, int], ...] | None = None
    shard_window: tuple[tuple[int, ...], int] | None = None
    block_bytes: int | None = None

    @property
    def size(self) -> int:
        """Positions in this shard's part of the epoch."""
        if self.runs is not None:
            return sum(hi - lo for lo, hi in self.runs)
        hi = self.length if self.hi is None else self.hi
        return hi - self.lo

    def _epoch_positions(self, start: int, stop: int) -> np.ndarray:
        """Epoch positions of this share's positions ``[start, stop)``."""
        if self.runs is None:
            return np.arange(self.lo + start, self.lo + stop, dtype=np.int64)
        lows = np.asarray([lo for lo, _ in self.runs], np.int64)
        sizes = np.asarray([hi - lo for lo, hi in self.runs], np.int64)
        firsts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        local = np.arange(start, stop, dtype=np.int64)
        run = np.searchsorted(firsts, local, side="right") - 1
        return lows[run] + (local - firsts[run])

    def indices(self, start: int, stop: int) -> np.ndarray:
        """Stable record indices served at positions ``[start, stop)`` (int64)."""
        positions = self._epoch_positions(start, stop)
        if len(positions) and positions[-1] >= self.length > 0 and self.runs is None:
            # a padded share's slots past the epoch's end (``set_shard(padded=True)``):
            # they repeat records in file order and are handed out as padding rows
            inside = positions[positions < self.length]
            whole = dataclasses.replace(self, lo=0, hi=None, runs=None)
            within = whole.indices(
                int(inside[0]), int(inside[-1]) + 1) if len(inside) else inside
            return np.concatenate([within, positions[len(inside):] % self.length])
        if self.seed is None or self.length <= 1:
            return positions
        seed = (int(self.seed) + int(self.epoch)) % 2**32
        if self.shard_window is not None:
            counts, window = self.shard_window
            return shard_windows(counts, window, seed).indices(positions)
        if uses_small_table(self.length - 1):
            return small_permutation(self.length, seed)[positions]
        if self.runs is not None:  # not one contiguous block: no window sharing
            return index_shuffle_np(positions, self.length - 1, seed)
        if len(positions) == 0 or len(positions) > 4 * WINDOW:
            return index_shuffle_np(positions, self.length - 1, seed)
        first, last = int(positions[0]), int(positions[-1])
        windows = [shuffle_window(self.length, seed, w) for w in range(first // WINDOW, last // WINDOW + 1)]
        joined = windows[0].copy() if len(windows) == 1 else np.concatenate(windows)
        offset = (first // WINDOW) * WINDOW
        return joined[first - offset : last - offset + 1]

    def describe(self) -> dict[str, Any] | None:
        """A compact, JSON-able description that regenerates the order (None: unshuffled)."""
        if self.seed is None:
            return None
        out = {"seed": int(self.seed), "epoch": int(self.epoch), "n": int(self.length)}
        if self.shard_window is not None:
            out["window"] = int(self.shard_window[1])
            if self.block_bytes is not None:
                out["block"] = int(self.block_bytes)
        return out


WINDOW = 4096  # positions shuffled per vectorised call (amortises numpy overhead)


@functools.lru_cache(maxsize=16)
def shuffle_window(length: int, seed: int, window: int) -> np.ndarray:
    """Stable indices of positions ``[window * WINDOW, (window + 1) * WINDOW)`` (clipped).

    One vectorised Feistel call per 4,096 positions costs about as much as one per
    256, so readers share these small cached windows (32 KiB each, 16 at most).
    """
    start = window * WINDOW
    stop = min(start + WINDOW, length)
    out = index_shuffle_np(np.arange(start, stop, dtype=np.int64), length - 1, seed)
    out.setflags(write=False)
    return out
