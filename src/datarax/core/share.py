"""``Share``: which part of every epoch one process serves.

A source of ``length`` records served by ``count`` processes splits each epoch's order
into ``count`` contiguous blocks of epoch positions, one per process (``index``).

* Plain shares (``padded=False``) are ``length // count`` positions each: disjoint and
  equally long, so every process takes the same number of steps; the last
  ``length % count`` positions of the epoch are in no share.
* Padded shares (``padded=True``) are ``ceil(length / count)`` positions each, so every
  record is in exactly one share; the positions past the epoch's end are padding slots
  (:meth:`Share.records` says how many of a share's positions are records).

Example:
    >>> shares = [Share(i, 3) for i in range(3)]
    >>> [s.bounds(10) for s in shares]  # disjoint, equally long; record 9 is left out
    [(0, 3), (3, 6), (6, 9)]
    >>> padded = [Share(i, 3, padded=True) for i in range(3)]
    >>> [s.bounds(10) for s in padded], [s.records(10) for s in padded]
    ([(0, 4), (4, 8), (8, 12)], [4, 4, 2])
    >>> sum(s.records(10) for s in padded)  # every record once
    10
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Share:
    """Share ``index`` of ``count`` of every epoch (``padded``: rounded up).

    Example:
        >>> Share(1, 4).bounds(10), Share(1, 4).size(10)
        ((2, 4), 2)
        >>> Share(0, 1).bounds(7)
        (0, 7)
        >>> Share(2, 2)
        Traceback (most recent call last):
        ...
        ValueError: shard index must satisfy 0 <= index < count, got index=2, count=2.
    """

    index: int = 0
    count: int = 1
    padded: bool = False

    def __post_init__(self) -> None:
        index, count = self.index, self.count
        ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (index, count))
        if not ints or not 0 <= index < count:
            raise ValueError(
                f"shard index must satisfy 0 <= index < count, got index={index!r}, "
                f"count={count!r}."
            )
        if not isinstance(self.padded, bool):
            raise ValueError(f"padded must be a bool, got {self.padded!r}.")

    def bounds(self, length: int) -> tuple[int, int]:
        """``[lo, hi)`` epoch positions of this share of a ``length``-record epoch."""
        if self.count == 1:
            return 0, length
        size = -(-length // self.count) if self.padded else length // self.count
        return self.index * size, (self.index + 1) * size

    def size(self, length: int) -> int:
        """Positions in this share (records and, when padded, padding slots)."""
        lo, hi = self.bounds(length)
        return hi - lo

    def records(self, length: int) -> int:
        """Positions of this share that are records (the rest are padding slots at its end)."""
        lo, hi = self.bounds(length)
        return max(min(hi, length) - lo, 0)
