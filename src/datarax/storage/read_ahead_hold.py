"""Holding a :class:`~datarax.storage.shards.RemoteShards`' read-ahead back while the first
batch of a pass is read by range.

Whole-file (or block) downloads and the ranged requests of a
:class:`~datarax.storage.head_start.HeadStart` share the store, the client's connections
and its event loop: started together, the few hundred small requests of a first batch wait
behind the downloads (a global shuffle's first batch took 7-8.5 s on the benchmark's S3
server with its 64 files downloading, 2-4 s without them). An epoch start (or a restore)
holds read-ahead back; the head start lets it go as soon as its first read is served, or
is declined (then the reader needs the downloads at once). A hold that nobody releases
ends by itself after ``seconds``. A mixin of
``RemoteShards``: it works on that class's lock and schedule.
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
        """Start no read-ahead download (downloads in progress go on; a reader still
        fetches the file it needs) until :meth:`release_read_ahead`, or ``seconds``."""
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
