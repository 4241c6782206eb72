"""``FileOrder``: the files an epoch reads, in the order their first record comes up, and
how far the reader has got (bookkeeping for :class:`~datarax.storage.shards.RemoteShards`,
found lazily a block of positions at a time).

Example:
    >>> import numpy as np
    >>> order = FileOrder(3, lambda a, b: np.arange(a, b)[::-1], 0, 6, ends=[2, 4, 6])
    >>> order.upcoming(2)  # positions 0..5 serve records 5..0: file 2 first
    [2, 1]
    >>> order.reach(1), order.progress, order.upcoming(2)
    (True, 1, [0])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["FileOrder"]

_SCAN_BLOCK = 1 << 16  # positions scanned at a time


class FileOrder:
    """Files ``0 .. files-1`` in the order positions ``[start, stop)`` first use them.

    ``indices(a, b)`` gives the records served at positions ``[a, b)`` (None: no plan);
    ``ends[i]`` is the number of records in files ``0..i``.
    """

    def __init__(self, files: int, indices: Callable[[int, int], np.ndarray] | None = None,
                 start: int = 0, stop: int = 0, ends: Sequence[int] | None = None) -> None:
        self.files = files
        self._indices = indices
        self._scan, self._stop = int(start), int(stop)
        self._ends = np.asarray(ends, np.int64) if ends is not None else None
        self._seq: list[int] = []  # files in the order found so far
        self._seq_pos: dict[int, int] = {}  # file -> its place in _seq
        self.progress = -1  # the place of the furthest file a reader reached

    @property
    def planned(self) -> bool:
        """Whether there is a plan (else every method answers from nothing known)."""
        return self._indices is not None

    def extend(self, want: int) -> None:
        """Scan the plan until ``want`` files are known (or the positions end)."""
        while len(self._seq) < want and self._indices is not None and self._scan < self._stop:
            end = min(self._stop, self._scan + _SCAN_BLOCK)
            records = np.asarray(self._indices(self._scan, end), np.int64)
            self._scan = end
            found = np.searchsorted(self._ends, records, side="right")
            uniq, first = np.unique(found, return_index=True)
            for f in uniq[np.argsort(first)].tolist():
                if f not in self._seq_pos and 0 <= f < self.files:
                    self._seq_pos[f] = len(self._seq)
                    self._seq.append(f)

    def upcoming(self, ahead: int) -> list[int]:
        """The next ``ahead`` files after the reader's place, in order."""
        lo = self.progress + 1
        self.extend(lo + ahead)
        return self._seq[lo:lo + ahead]

    def head(self, count: int) -> list[int]:
        """The first ``count`` files of the order (as far as it is known)."""
        return self._seq[:count]

    def window(self, behind: int, ahead: int) -> set[int]:
        """The ``behind`` files last reached and the ``ahead`` known to come next."""
        lo = max(0, self.progress + 1 - behind)
        return set(self._seq[lo:self.progress + 1 + ahead])

    def place(self, i: int) -> int | None:
        """Where file ``i`` is in the order found so far (None: not found yet)."""
        return self._seq_pos.get(i)

    def reach(self, i: int, within: int | None = None) -> bool:
        """A reader reached file ``i``: True when that moves the place on (with ``within``,
        only to a place at most that far ahead: a stray read far ahead leaves it alone)."""
        pos = self._seq_pos.get(i)
        if pos is not None and pos > self.progress and (
                within is None or pos <= self.progress + within):
            self.progress = pos
            return True
        return False
