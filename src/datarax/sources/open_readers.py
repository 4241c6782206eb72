"""``OpenReaders``: at most ``limit`` files open at once, the least recently used closed.

A source over thousands of shards read in a shuffled order touches every shard within
a few batches; keeping a reader open per shard would hold a file descriptor each and
end in ``Too many open files`` past the process's limit (``ulimit -n``, often 1024).
``OpenReaders`` keeps the most recently used readers open, up to ``limit``, and closes
the least recently used one that no thread is reading when another must open; a reader
in use is never closed under its reader. :func:`default_limit` is a quarter of the
process's open-file limit (at most 4096), so a few sources fit side by side.

Example:
    >>> opened = []
    >>> readers = OpenReaders(lambda key: opened.append(key) or key.upper(),
    ...                       close=lambda reader: None, limit=2)
    >>> [readers.read(key, lambda reader: reader) for key in "abca"]
    ['A', 'B', 'C', 'A']
    >>> opened, readers.open_count  # 'a' was closed to open 'c', then opened again
    (['a', 'b', 'c', 'a'], 2)
"""

from __future__ import annotations

import errno
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

__all__ = ["OpenReaders", "TooManyOpenFiles", "default_limit"]

T = TypeVar("T")

#: the most readers a source keeps open when the process's open-file limit is larger
MOST_OPEN = 4096


def default_limit() -> int:
    """Readers one source keeps open: a quarter of the process's soft open-file limit
    (``ulimit -n``), between 16 and :data:`MOST_OPEN`."""
    try:
        import resource
    except ImportError:  # not a Unix: no limit to read
        return 256
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return MOST_OPEN
    return max(16, min(MOST_OPEN, soft // 4))


class TooManyOpenFiles(OSError):
    """A file that could not be opened because the process has as many files open as its
    limit allows: not a bad record, so never skipped (``on_error="skip"``) but raised."""

    def __init__(self, path: str, cause: str) -> None:
        super().__init__(
            errno.EMFILE,
            f"cannot open '{path}': {cause}. The file is fine: this process has as many "
            f"files open as its limit allows (ulimit -n: {_soft_limit()}); raise the limit "
            "(e.g. ulimit -n 8192 in the shell that starts the program) or close the "
            "sources you are done with (each keeps at most a quarter of the limit open).")


def _soft_limit() -> str:
    try:
        import resource
    except ImportError:
        return "unknown"
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return "unlimited" if soft == resource.RLIM_INFINITY else str(soft)


class OpenReaders:
    """Readers opened on first use by ``open(key)``, at most ``limit`` kept open.

    Thread-safe: readers open outside the lock (a large file's index takes a while to
    read), a reader in use by a thread is never closed, and when every open reader is in
    use, more than ``limit`` stay open until they are released.
    """

    def __init__(self, open: Callable[[Hashable], Any], close: Callable[[Any], None],
                 limit: int) -> None:
        self._open_fn, self._close_fn, self.limit = open, close, max(1, int(limit))
        self._open: OrderedDict[Hashable, Any] = OrderedDict()  # least recently used first
        self._users: dict[Hashable, int] = {}
        self._lock = threading.Lock()

    @property
    def open_count(self) -> int:
        """Readers open now."""
        with self._lock:  # not mid-open, one over the limit for an instant
            return len(self._open)

    def read(self, key: Hashable, fn: Callable[[Any], T]) -> T:
        """``fn(reader)`` on ``key``'s reader, opened if it is not open."""
        reader = self._acquire(key)
        try:
            return fn(reader)
        finally:
            with self._lock:
                self._users[key] -= 1
                if not self._users[key]:
                    del self._users[key]
                victims = self._evict()
            self._close_all(victims)

    def close(self) -> None:
        """Close every open reader (the source is done with its files)."""
        with self._lock:
            readers, self._open = list(self._open.values()), OrderedDict()
        self._close_all(readers)

    def _acquire(self, key: Hashable) -> Any:
        with self._lock:
            reader = self._open.get(key)
            if reader is not None:
                self._open.move_to_end(key)
                self._users[key] = self._users.get(key, 0) + 1
                return reader
        fresh = self._open_fn(key)  # raises for a file that cannot be opened
        with self._lock:
            reader = self._open.setdefault(key, fresh)  # another thread's, if it was first
            self._open.move_to_end(key)
            self._users[key] = self._users.get(key, 0) + 1
            victims = [fresh] if reader is not fresh else self._evict()
        self._close_all(victims)
        return reader

    def _evict(self) -> list[Any]:
        """Readers over the limit, least recently used first, that no thread is reading
        (taken out of the open ones; closed by the caller outside the lock)."""
        excess = len(self._open) - self.limit
        idle = []
        for key in self._open:  # from the least recently used; none when under the limit
            if excess <= len(idle):
                break
            if key not in self._users:
                idle.append(key)
        return [self._open.pop(key) for key in idle]

    def _close_all(self, readers: list[Any]) -> None:
        for reader in readers:
            try:
                self._close_fn(reader)
            except Exception:  # noqa: BLE001, S110 - closing a reader of a file since damaged
                pass
