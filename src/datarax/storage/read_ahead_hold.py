"""Holding a :class:`~datarax.storage.shards.RemoteShards`' read-ahead back while the first
batch of a pass is read by range.

Downloads and a :class:`~datarax.storage.head_start.HeadStart`'s ranged requests share the
store's connections: started together, a first batch's small requests wait behind the
downloads. The head start lets read-ahead go once its first read is served or declined;
an unreleased hold ends after ``seconds``. A mixin of ``RemoteShards``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["HOLD_S", "ReadAheadHold"]

HOLD_S = 10.0  # a hold ends by itself after this long (nobody released it)


class ReadAheadHold:
    """:meth:`hold_read_ahead` and :meth:`release_read_ahead` of
    :class:`~datarax.storage.shards.RemoteShards`."""

    _lock: Any
    _schedule: Callable[[], None]  # RemoteShards': starts the read-ahead downloads
    _hold_timer: threading.Timer | None = None  # set while read-ahead is held back

    def _read_ahead_held(self) -> bool:
        """Whether read-ahead waits for :meth:`release_read_ahead` (called with the lock)."""
        return self._hold_timer is not None

    def hold_read_ahead(self, seconds: float = HOLD_S) -> None:
        """Start no read-ahead download until :meth:`release_read_ahead`, or ``seconds``."""
        timer = threading.Timer(seconds, self.release_read_ahead)
        timer.daemon = True
        with self._lock:
            old, self._hold_timer = self._hold_timer, timer
        if old is not None:
            old.cancel()
        timer.start()

    def release_read_ahead(self) -> None:
        """End the hold (if any): read-ahead starts where the plan stands."""
        self._drop_hold(schedule=True)

    def _end_hold(self) -> None:
        """End the hold without starting read-ahead (the reader closes)."""
        self._drop_hold(schedule=False)

    def _drop_hold(self, schedule: bool) -> None:
        with self._lock:
            timer, self._hold_timer = self._hold_timer, None
            if timer is not None and schedule:
                self._schedule()
        if timer is not None:
            timer.cancel()
