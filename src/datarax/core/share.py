"""``Share``: which positions of an epoch one process serves, as runs of positions.

A source of ``length`` records served by ``count`` processes splits each epoch's order
into ``count`` contiguous blocks of epoch positions, one per process (``index``).

* Plain shares are ``length // count`` positions each (every process takes the same
  number of steps); the last ``length % count`` positions are in no share.
* Padded shares are ``ceil(length / count)`` positions each, every record in exactly one;
  positions past the epoch's end are padding slots (:meth:`Share.records`).
* Re-split shares (``history``): a run restarted on another process count continues
  epoch ``epoch`` from what is left: the old shares' rests (:func:`remaining`), cut into
  ``count`` equal consecutive shares (:func:`split_equal`), each a few runs of positions.
  Restarts within one epoch chain as ``(count, position)`` steps of ``history``.

Example:
    >>> shares = [Share(i, 3) for i in range(3)]
    >>> [s.bounds(10) for s in shares]  # disjoint, equally long; record 9 is left out
    [(0, 3), (3, 6), (6, 9)]
    >>> padded = [Share(i, 3, padded=True) for i in range(3)]
    >>> [s.bounds(10) for s in padded], [s.records(10) for s in padded]
    ([(0, 4), (4, 8), (8, 12)], [4, 4, 2])
    >>> sum(s.records(10) for s in padded)  # every record once
    10
    >>> remaining(block_shares(12, 2), 3)  # 2 processes stood at position 3 of 6
    [(3, 6), (9, 12)]
    >>> [Share(j, 3, epoch=0, history=((2, 3),)).runs(12) for j in range(3)]
    [((3, 5),), ((5, 6), (9, 10)), ((10, 12),)]
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

Run = tuple[int, int]  # [lo, hi) epoch positions


@dataclasses.dataclass(frozen=True)
class Share:
    """Share ``index`` of ``count`` of every epoch (``padded``: rounded up); with
    ``history``, the re-split runs of epoch ``epoch``.

    Example:
        >>> Share(1, 4).bounds(10), Share(1, 4).size(10), Share(1, 4).runs(10)
        ((2, 4), 2, ((2, 4),))
        >>> Share(0, 1).bounds(7)
        (0, 7)
        >>> Share(2, 3, epoch=0, history=((2, 3),)).take(12, 1, 1)
        [(11, 12)]
        >>> Share(2, 2)
        Traceback (most recent call last):
        ...
        ValueError: shard index must satisfy 0 <= index < count, got index=2, count=2.
    """

    index: int = 0
    count: int = 1
    padded: bool = False
    epoch: int | None = None
    history: tuple[Run, ...] = ()

    def __post_init__(self) -> None:
        index, count = self.index, self.count
        if not _ints(index, count) or not 0 <= index < count:
            raise ValueError(
                f"shard index must satisfy 0 <= index < count, got index={index!r}, "
                f"count={count!r}."
            )
        if not isinstance(self.padded, bool):
            raise ValueError(f"padded must be a bool, got {self.padded!r}.")
        if self.history and not (
            _ints(self.epoch) and self.epoch >= 0 and not self.padded
            and all(len(step) == 2 and _ints(*step) and step[0] >= 1 and step[1] >= 0
                    for step in self.history)
        ):
            raise ValueError(
                "a re-split share needs epoch >= 0, no padding and a history of "
                f"(count >= 1, position >= 0) steps, got epoch={self.epoch!r}, "
                f"history={self.history!r}."
            )

    def bounds(self, length: int) -> tuple[int, int]:
        """``[lo, hi)`` epoch positions of this share's block of a ``length``-record epoch."""
        if self.count == 1:
            return 0, length
        size = -(-length // self.count) if self.padded else length // self.count
        return self.index * size, (self.index + 1) * size

    def runs(self, length: int) -> tuple[Run, ...]:
        """The runs of epoch positions this share serves, in order: its block, or the
        re-split runs of :attr:`epoch`."""
        if not self.history:
            return (self.bounds(length),)
        return _resplit(length, self.history, self.count, self.index)

    def size(self, length: int) -> int:
        """Positions in this share (records and, when padded, padding slots)."""
        return runs_size(self.runs(length))

    def records(self, length: int) -> int:
        """Positions of this share that are records (not padding)."""
        lo, hi = self.bounds(length)
        return max(min(hi, length) - lo, 0)

    def take(self, length: int, start: int, count: int) -> list[Run]:
        """Epoch positions of this share's positions ``[start, start + count)``, as runs."""
        return take(self.runs(length), start, count)


def _ints(*values: object) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


# ------------------------------------------------------------------ run algebra
def runs_size(runs: Sequence[Run]) -> int:
    """Positions ``runs`` hold."""
    return sum(hi - lo for lo, hi in runs)


def block_shares(length: int, count: int) -> list[list[Run]]:
    """The plain layout: ``count`` consecutive blocks of ``length // count`` positions."""
    size = length // count
    return [[(i * size, (i + 1) * size)] if size else [] for i in range(count)]


def skip(runs: Sequence[Run], count: int) -> list[Run]:
    """``runs`` after their first ``count`` positions."""
    out: list[Run] = []
    for lo, hi in runs:
        if count >= hi - lo:
            count -= hi - lo
            continue
        out.append((lo + count, hi))
        count = 0
    return out


def take(runs: Sequence[Run], start: int, count: int) -> list[Run]:
    """Positions ``[start, start + count)`` of ``runs`` (as runs)."""
    out: list[Run] = []
    for lo, hi in skip(runs, start):
        if count <= 0:
            break
        piece = min(count, hi - lo)
        out.append((lo, lo + piece))
        count -= piece
    return out


def remaining(shares: Sequence[Sequence[Run]], position: int) -> list[Run]:
    """The shares' rests after their first ``position`` positions, adjacent runs merged."""
    out: list[Run] = []
    for share in shares:
        for lo, hi in skip(share, position):
            if out and out[-1][1] == lo:
                out[-1] = (out[-1][0], hi)
            else:
                out.append((lo, hi))
    return out


def split_equal(runs: Sequence[Run], count: int) -> list[list[Run]]:
    """``runs`` cut into ``count`` consecutive shares of ``size // count`` positions."""
    each = runs_size(runs) // count
    return [take(runs, i * each, each) for i in range(count)]


@functools.lru_cache(maxsize=64)
def _resplit(length: int, history: tuple[Run, ...], count: int, index: int) -> tuple[Run, ...]:
    """Share ``index`` of ``count`` of a ``length``-position epoch restarted after
    ``history`` (the first run used :func:`block_shares`)."""
    shares = block_shares(length, history[0][0])
    for step, (_, position) in enumerate(history):
        after = history[step + 1][0] if step + 1 < len(history) else count
        shares = split_equal(remaining(shares, position), after)
    return tuple(shares[index])
