"""Window shuffle: shards in a random order, records shuffled within windows of ``W``
shards, so a reader needs only one window's shards (data sets larger than the cache).

The order is a pure function of ``(counts, W, seed)`` and names *global* record indices,
so per-record keys and skips are those of a global shuffle.

Example:
    >>> order = ShardWindows(counts=(3, 3, 3, 3), window=2, seed=7)
    >>> order.shard_order.tolist()
    [2, 0, 3, 1]
    >>> order.indices(np.arange(12)).tolist()  # window 0: shards 2, 0; window 1: 3, 1
    [0, 2, 8, 7, 6, 1, 5, 10, 9, 3, 4, 11]
    >>> order.window_shards(0), order.window_bounds.tolist()
    ((2, 0), [0, 6, 12])
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from datarax.host.counts import check_count
from datarax.samplers.index_shuffle import index_shuffle_np, small_permutation, uses_small_table

__all__ = ["ShardWindows", "permute", "shard_windows", "window_seed"]


def permute(positions: np.ndarray, length: int, seed: int) -> np.ndarray:
    """The Feistel permutation of ``[0, length)`` at ``positions`` (int64).

    Example:
        >>> sorted(permute(np.arange(5), 5, seed=3).tolist())
        [0, 1, 2, 3, 4]
    """
    positions = np.asarray(positions, dtype=np.int64)
    if length <= 1:
        return positions.copy()
    if uses_small_table(length - 1):
        return small_permutation(int(length), int(seed))[positions]
    return index_shuffle_np(positions, int(length) - 1, int(seed)).astype(np.int64)


def window_seed(seed: int, window: int) -> int:
    """The 32-bit seed of window ``window``'s record permutation (``SeedSequence((seed, window))``).

    Example:
        >>> window_seed(7, 0) != window_seed(7, 1)
        True
    """
    return int(np.random.SeedSequence((int(seed), int(window))).generate_state(1, np.uint32)[0])


@dataclasses.dataclass(frozen=True)
class ShardWindows:
    """One epoch's window-shuffled order over shards of ``counts`` records.

    Args:
        counts: records per shard, in file order (global index = file order).
        window: shards per window, ``>= 1``.
        seed: the epoch's seed in ``[0, 2**32)`` (a source passes ``seed + epoch``).

    Example:
        >>> ShardWindows(counts=(2, 0, 3), window=1, seed=1).indices(np.arange(5)).tolist()
        [3, 2, 4, 0, 1]
    """

    counts: tuple[int, ...]
    window: int
    seed: int

    def __post_init__(self) -> None:
        check_count(self.window, "window", 1, " (shards per window)")
        if any(int(c) < 0 for c in self.counts):
            raise ValueError(f"shard record counts must be >= 0, got {list(self.counts)!r}.")

    @functools.cached_property
    def length(self) -> int:
        """Records in the epoch (all shards)."""
        return int(sum(int(c) for c in self.counts))

    @functools.cached_property
    def _file_starts(self) -> np.ndarray:
        counts = np.asarray(self.counts, dtype=np.int64)
        return np.cumsum(counts) - counts

    @functools.cached_property
    def shard_order(self) -> np.ndarray:
        """The shards in the order the epoch visits them."""
        out = permute(np.arange(len(self.counts)), len(self.counts), self.seed)
        out.setflags(write=False)
        return out

    @functools.cached_property
    def _laid_out(self) -> np.ndarray:
        """Epoch position where each shard of :attr:`shard_order` starts (plus the end)."""
        counts = np.asarray(self.counts, dtype=np.int64)[self.shard_order]
        return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    @functools.cached_property
    def window_bounds(self) -> np.ndarray:
        """Epoch position where each window starts, then the epoch's length."""
        starts = self._laid_out[:: self.window][: self.num_windows]
        return np.concatenate([starts, [self.length]]).astype(np.int64)

    @property
    def num_windows(self) -> int:
        """Windows in the epoch."""
        return -(-len(self.counts) // self.window)

    def window_shards(self, window: int) -> tuple[int, ...]:
        """The shards window ``window`` draws its records from, in visiting order."""
        return tuple(int(s) for s in self.shard_order[window * self.window : (window + 1) * self.window])

    def window_of(self, positions: np.ndarray) -> np.ndarray:
        """The window serving each epoch position."""
        return np.searchsorted(self.window_bounds, np.asarray(positions, np.int64), side="right") - 1

    def indices(self, positions: np.ndarray) -> np.ndarray:
        """Global record index served at each epoch position (int64)."""
        positions = np.asarray(positions, dtype=np.int64)
        if positions.size and (positions.min() < 0 or positions.max() >= self.length):
            raise IndexError(
                f"epoch positions must lie in [0, {self.length}); got "
                f"{int(positions.min())}..{int(positions.max())}."
            )
        windows = self.window_of(positions)
        laid = np.empty_like(positions)
        for w in np.unique(windows):
            where = windows == w
            lo, hi = int(self.window_bounds[w]), int(self.window_bounds[w + 1])
            local = permute(positions[where] - lo, hi - lo, window_seed(self.seed, int(w)))
            laid[where] = lo + local
        slot = np.searchsorted(self._laid_out, laid, side="right") - 1
        shard = self.shard_order[slot]
        return self._file_starts[shard] + (laid - self._laid_out[slot])


@functools.lru_cache(maxsize=8)
def shard_windows(counts: tuple[int, ...], window: int, seed: int) -> ShardWindows:
    """A cached :class:`ShardWindows` (readers ask for one epoch's order per batch).

    Example:
        >>> shard_windows((2, 2), 1, 5) is shard_windows((2, 2), 1, 5)
        True
    """
    return ShardWindows(tuple(int(c) for c in counts), int(window), int(seed) % 2**32)
