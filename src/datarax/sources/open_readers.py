"""``OpenReaders``: at most ``limit`` files open at once, the least recently used closed.

A source over thousands of shards read in a shuffled order touches every shard within
a few batches; keeping a reader open per shard would hold a file descriptor each and
end in ``Too many open files`` past the process's limit (``ulimit -n``, often 1024).
``OpenReaders`` keeps the most recently used readers open, up to ``limit``, and closes
the least recently used one that no thread is reading when another must open; a reader
in use is never closed under its reader. :func:`default_limit` is a quarter of the
process's open-file limit (at most 4096), so a few sources fit side by side. A file closed
for room and opened again may have been replaced meanwhile: :class:`FileVersions` refuses
one whose size, modification time, inode or record count is not the one first opened
(:class:`FileChangedError`).

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

import datetime
import errno
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from datarax.errors import RecordError
from datarax.host.counts import count_words

__all__ = ["FileChangedError", "FileVersions", "OpenReaders", "TooManyOpenFiles",
           "default_limit"]

T = TypeVar("T")

#: the most readers a source keeps open when the process's open-file limit is larger
MOST_OPEN = 4096


def _soft_limit() -> float | None:
    """The process's soft open-file limit (``ulimit -n``): ``math.inf`` where unlimited,
    None where there is none to read (not a Unix)."""
    try:
        import resource
    except ImportError:
        return None
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return math.inf if soft == resource.RLIM_INFINITY else soft


def default_limit() -> int:
    """Readers one source keeps open: a quarter of the process's soft open-file limit
    (``ulimit -n``), between 16 and :data:`MOST_OPEN`."""
    soft = _soft_limit()
    if soft is None:  # not a Unix: no limit to read
        return 256
    if soft == math.inf or soft <= 0:
        return MOST_OPEN
    return max(16, min(MOST_OPEN, int(soft) // 4))


class TooManyOpenFiles(OSError):
    """A file that could not be opened because the process has as many files open as its
    limit allows: not a bad record, so never skipped (``on_error="skip"``) but raised."""

    def __init__(self, path: str, cause: str) -> None:
        self.path, self.cause = path, cause
        soft = _soft_limit()
        limit = "unknown" if soft is None else "unlimited" if soft == math.inf else soft
        super().__init__(
            errno.EMFILE,
            f"cannot open '{path}': {cause}. The file is fine: this process has as many "
            f"files open as its limit allows (ulimit -n: {limit}); raise the limit "
            "(e.g. ulimit -n 8192 in the shell that starts the program) or close the "
            "sources you are done with (each keeps at most a quarter of the limit open).")

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:  # from a decode worker, intact
        return type(self), (self.path, self.cause)


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



class FileChangedError(RecordError):
    """A file that changed on disk since the source first opened it (``path``): another
    size, modification time or record count, so its records may not be the ones the source
    counted. A ``RecordError``: ``on_error="skip"`` skips the file's records (counted and
    reported); the source refuses the file until it is rebuilt."""


def changed_error(path: str, detail: str) -> FileChangedError:
    """The error of ``path`` found changed (``detail``: how)."""
    return FileChangedError(
        f"'{path}' changed on disk since the source first opened it ({detail}); it was "
        "rewritten or replaced while being read, and none of its records were read from "
        "the changed file. Let the writes finish, then rebuild the source (it counts the "
        "files again), or read with on_error='skip' to skip this file's records.", path=path)


Version = tuple[int, int, int]  # (inode, size in bytes, modification time in ns)


class FileVersions:
    """Each file as first opened (its inode, size and modification time), checked at
    every later open with the record count the source counted: a file closed for room and
    replaced before it was opened again is refused, not read (:class:`FileChangedError`),
    then refused at once until the source is rebuilt (no reopen per record).

    Example:
        >>> import tempfile
        >>> path = tempfile.mkstemp()[1]
        >>> versions = FileVersions()
        >>> versions.open(path, open, lambda fh: 3, counted=3, close=lambda fh: fh.close()).close()
        >>> with open(path, "w") as fh:
        ...     _ = fh.write("longer now")
        >>> versions.open(path, open, lambda fh: 3, counted=3, close=lambda fh: fh.close())
        Traceback (most recent call last):
        ...
        datarax.sources.open_readers.FileChangedError: '...' changed on disk since the source first opened it (10 bytes now, 0 when first opened); ...
    """

    def __init__(self) -> None:
        self._first: dict[str, Version] = {}
        self._changed: dict[str, str] = {}  # path -> how it changed
        self._lock = threading.Lock()

    def open(self, path: str, open: Callable[[str], T], records: Callable[[T], int],
             counted: int, close: Callable[[T], None]) -> T:
        """``open(path)``, refused (closed) when the file is not the one first opened or
        holds another number of records than ``counted``."""
        with self._lock:
            known = self._changed.get(path)
        if known is not None:
            raise changed_error(path, known)
        before = _version(path)
        reader = open(path)  # raises for a file that cannot be opened
        try:
            detail = self._differs(path, before, _version(path), int(records(reader)), counted)
        except BaseException:
            close(reader)
            raise
        if detail is None:
            return reader
        close(reader)
        with self._lock:
            self._changed.setdefault(path, detail)
        raise changed_error(path, detail)

    def _differs(self, path: str, before: Version | None, after: Version | None,
                 records: int, counted: int) -> str | None:
        if records != counted:
            return (f"it holds {count_words(records, 'record')} now, {counted} when the "
                    "source counted them")
        if before is None or after is None or before != after:
            return "it changed while being opened"
        with self._lock:
            first = self._first.setdefault(path, after)
        if after[1] != first[1]:
            return f"{after[1]} bytes now, {first[1]} when first opened"
        if after[2] != first[2]:
            return f"modified at {_when(after[2])} now, {_when(first[2])} when first opened"
        if after[0] != first[0]:
            return "another file now: it was replaced (same size and modification time)"
        return None


def _version(path: str) -> Version | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_ino, status.st_size, status.st_mtime_ns


def _when(ns: int) -> str:
    return datetime.datetime.fromtimestamp(ns / 1e9, datetime.timezone.utc).isoformat(
        sep=" ", timespec="microseconds")
