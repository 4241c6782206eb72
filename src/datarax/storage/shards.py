"""``RemoteShards``: remote files made local through a :class:`ShardCache`, read ahead in
the order an epoch will use them.

Readers call :meth:`RemoteShards.open` (or :meth:`RemoteShards.local_path`) for the file
a record lives in: at once when cached, else after its one download. After
:meth:`RemoteShards.plan`, the next ``ahead`` files in the epoch's order
(:class:`~datarax.storage.file_order.FileOrder`) are downloaded ``threads`` at a time;
each process plans only its own positions, so it fetches only its share.

Files in use are held in the cache (shared locks); files read ahead are not: a reader
needing the room evicts them. The cache must hold the ``behind`` largest files together;
read-ahead leaves room for one more file and stands back while a reader waits;
:class:`~datarax.storage.errors.CacheFullError` only when nothing can make room.
A file deleted or changed mid-epoch raises :class:`~datarax.storage.errors.RemoteObjectError`
every time it is asked for (so ``on_error="skip"`` skips it without fetching it again).

Example:
    >>> import fsspec, tempfile
    >>> from datarax.storage.cache import ShardCache
    >>> fs = fsspec.filesystem("memory")
    >>> for i in range(3):
    ...     fs.pipe(f"/shards-doc/{i}.bin", bytes([i]) * 4)
    >>> objects = list_objects("memory://shards-doc/*.bin")
    >>> shards = RemoteShards(objects, cache=ShardCache(tempfile.mkdtemp(), max_bytes=100))
    >>> shards.plan(lambda a, b: np.arange(a, b), 0, 3, ends=[1, 2, 3])
    >>> open(shards.local_path(2), "rb").read()
    b'\\x02\\x02\\x02\\x02'
    >>> with shards.open(1, lambda p: open(p, "rb")) as f:
    ...     f.read(2)
    b'\\x01\\x01'
    >>> _ = shards.local_path(0)  # read ahead by now, or fetched here: one download each
    >>> shards.stats()["fetched"]
    3
    >>> shards.close()
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from datarax.errors import ConfigError
from datarax.host.counts import check_count, count_words
from datarax.storage.cache import CacheEntry, ShardCache, given_cache
from datarax.storage.errors import CacheFullError, RemoteObjectError
from datarax.storage.fetch import Fetcher
from datarax.storage.file_order import FileOrder
from datarax.storage.handles import Closer, OpenHandles, close_all
from datarax.storage.read_ahead_hold import ReadAheadHold
from datarax.storage.retry import RetryPolicy, StorageStats
from datarax.storage.shard_damage import ShardDamage
from datarax.storage.shard_room import OPEN, ShardRoom
from datarax.storage.urls import RemoteObject, list_objects

__all__ = ["RemoteShards"]

_ROOM_WAIT_S = 300.0  # a reader waits at most this long for other readers to free room


class _NoRoom(CacheFullError):
    """A read-ahead stood back (a reader needs the room); the reader fetches the file."""


class _HitNoted:
    """The counters of a source, but for ``cache_hits``: noted (``hit``), not counted."""

    def __init__(self, stats: StorageStats) -> None:
        self.stats = stats
        self.hit = False

    def add(self, field: str, amount: float = 1) -> None:
        if field == "cache_hits":
            self.hit = True
        else:
            self.stats.add(field, amount)


class RemoteShards(ShardRoom, ShardDamage, ReadAheadHold):
    """Remote files, fetched into a local cache ahead of the readers; see the module docstring.

    Args:
        objects: the files, in record-numbering order.
        cache: the :class:`ShardCache` (default: ``DATARAX_CACHE_DIR``, ``DATARAX_CACHE_BYTES``).
        storage_options: passed to the fsspec filesystem.
        threads: parallel downloads.
        ahead: files fetched ahead of the reader, in the order the epoch uses them.
        behind: the files a reader uses at once (a window of ``W`` files: ``W``; a global
            shuffle: all of them; 0: records read by range, no room asked when built).
        handles: open handles kept at most (default: all when the files fit in the cache,
            else ``threads + ahead``).
        retry: the :class:`~datarax.storage.retry.RetryPolicy` of each request.
        parallel: range requests of one file in flight at once (:class:`Fetcher`).
        stats: the :class:`~datarax.storage.retry.StorageStats` to count in (default: new).

    Raises:
        CacheFullError: the cache's limit is smaller than the ``behind`` largest files.
    """

    def __init__(self, objects: Sequence[RemoteObject], *, cache: ShardCache | None = None,
                 storage_options: Mapping[str, Any] | None = None, threads: int = 4,
                 ahead: int = 8, behind: int = 1, handles: int | None = None,
                 retry: RetryPolicy | None = None, parallel: int = 2,
                 stats: StorageStats | None = None) -> None:
        if not objects:
            raise ConfigError("RemoteShards needs at least one file.")
        threads, ahead, behind, parallel, handles = (  # NumPy ints as the same ints
            v if v is None else check_count(v, f"RemoteShards {k}", int(k != "behind"))
            for k, v in (("threads", threads), ("ahead", ahead), ("behind", behind),
                         ("parallel", parallel), ("handles", handles)))
        self.objects = tuple(objects)
        self.cache = given_cache(cache, "RemoteShards")
        self.storage_options = dict(storage_options or {})
        self.threads = threads
        self.ahead = ahead
        self.behind = min(behind, len(self.objects))
        self.retry = retry or RetryPolicy()
        self._check_room()
        self.cache.ensure()  # an unusable folder is named now
        self._stats = stats if stats is not None else StorageStats()
        self.parallel = parallel
        self.fetcher = Fetcher(self.storage_options, retry=self.retry, stats=self._stats,
                               parallel=parallel, cancelled=lambda: self._stopped)
        fits = sum(o.size for o in self.objects) <= self.cache.max_bytes
        self._largest = max(o.size for o in self.objects)
        self.handle_limit = handles if handles is not None else (
            len(self.objects) if fits else threads + ahead)
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)  # a file released, fetched or unpinned
        self._generation = 0  # counts those changes (a reader refused room retries after one)
        self._entries: dict[int, CacheEntry] = {}  # held (shared lock)
        self._ahead: dict[int, str] = {}  # read ahead, not held: others may evict them
        self._inflight: dict[int, concurrent.futures.Future[str]] = {}
        self._prefetching: set[int] = set()  # of those, the read-ahead downloads
        self._failed: dict[int, RemoteObjectError] = {}
        self._taken: set[int] = set()  # files this pass (plan) used or read ahead
        self._pins: collections.Counter[int] = collections.Counter()  # readers on a file
        self._handles = OpenHandles(self.handle_limit)
        self._rechecked: set[int] = set()  # files whose cached copy a failed read checked
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = self._stopped = False
        self._full_at = -2  # progress at which the cache was found full (read-ahead waits)
        self._wanting_room = 0  # readers waiting for room: read-ahead stands back
        self._order = FileOrder(len(self.objects))  # no plan yet
        OPEN.add(self)

    def __reduce__(self) -> tuple[Any, ...]:
        # a worker process gets its own downloads into the same cache (shared safely)
        return (functools.partial(
            RemoteShards, self.objects, cache=self.cache, storage_options=self.storage_options,
            threads=self.threads, ahead=self.ahead, behind=self.behind,
            handles=self.handle_limit, retry=self.retry, parallel=self.parallel), ())

    def __len__(self) -> int:
        return len(self.objects)

    # ------------------------------------------------------------------ plan
    def plan(self, indices: Callable[[int, int], np.ndarray], start: int, stop: int,
             ends: Sequence[int]) -> None:
        """Read ahead for positions ``[start, stop)`` (``indices(a, b)``: the records they
        serve; ``ends[i]``: records in files ``0..i``)."""
        if len(ends) != len(self.objects):
            raise ConfigError(f"RemoteShards.plan: {count_words(len(ends), 'record end')} for "
                              f"{count_words(len(self.objects), 'file')}.")
        with self._lock:
            self._order = FileOrder(len(self.objects), indices, start, stop, ends)
            self._taken.clear()  # a new pass: its files' first takes count again
            self._full_at = -2
            self._order.extend(self.ahead)
            idle = self._release_passed()  # files of the last plan this one does not start with
            self._schedule()
        close_all(idle)

    def upcoming(self) -> list[int]:
        """The files the plan reads next, in order (what read-ahead fetches and keeps)."""
        with self._lock:
            return self._order.upcoming(self.ahead)

    def _held_bytes(self) -> int:
        files = set(self._entries) | set(self._inflight) | set(self._ahead)
        return sum(self.objects[i].size for i in files)

    def _may_read_ahead(self, extra: int) -> bool:
        """Whether ``extra`` more bytes fit beside the files held and one more file."""
        return (not self._closed and not self._wanting_room and not self._read_ahead_held()
                and self._order.progress > self._full_at
                and self._held_bytes() + extra <= self.cache.max_bytes - self._largest)

    def _schedule(self) -> None:
        if not self._may_read_ahead(0):
            return
        running = sum(1 for f in self._inflight.values() if not f.done())
        extra = 0
        upcoming = self.upcoming()
        if self._order.progress < self.behind:  # the start of a plan: its first files come first
            head = self._order.head(self.behind)  # all, also those the reader passed (it reads
            if any(i not in self._entries and i not in self._ahead and i not in self._failed
                   for i in head):  # them in file order, the plan's not: else it waits on each)
                upcoming = head
        for i in upcoming:
            if running >= self.threads:
                break
            if i in self._entries or i in self._ahead or i in self._inflight or i in self._failed:
                continue
            extra += self.objects[i].size
            if not self._may_read_ahead(extra):
                break
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    self.threads, thread_name_prefix="datarax-fetch")
            future: concurrent.futures.Future[str] = concurrent.futures.Future()
            self._inflight[i] = future
            self._prefetching.add(i)
            self._pool.submit(self._prefetch, i, future)
            running += 1

    def _used(self, i: int, *, hit: bool) -> None:
        """Note a use of file ``i`` (with the lock held); ``hit``: served by the cache, no
        download. A hit counts once a pass (plan), and not after the pass downloaded it
        (the reader taking what its read-ahead took, or taking a file again, is none)."""
        if hit and i not in self._taken:
            self._stats.add("cache_hits")
        self._taken.add(i)

    def _notify(self) -> None:
        """Wake the readers waiting for room (called with the lock held)."""
        self._generation += 1
        self._changed.notify_all()

    def _busy(self) -> set[int]:
        """Files a reader is using or waiting for (never released)."""
        return {i for i, n in self._pins.items() if n > 0}

    def _keep(self, *, asked: bool = False) -> set[int]:
        """Files to hold: the ``behind`` last reached, the next ``ahead``, those in use; before
        any plan every file fetched, unless ``asked`` (:meth:`release_unused`)."""
        if not self._order.planned:
            held = set() if asked else set(self._entries)
            return held | self._handles.files() | self._busy()
        return self._order.window(self.behind, self.ahead) | self._busy()

    def _drop(self, i: int, *, detached: bool = True) -> list[tuple[Closer, Any]]:
        """Release file ``i``; returns its idle handle, to close outside the lock (unless
        not ``detached`` and it reads a copy of its own: kept for later reads)."""
        idle = self._handles.pop(i) if detached else self._handles.pop_attached(i)
        self._ahead.pop(i, None)
        entry = self._entries.pop(i, None)
        if entry is not None:
            entry.release()
        self._notify()
        return idle

    def _release_passed(self, *, asked: bool = False) -> list[tuple[Closer, Any]]:
        """Release the files outside :meth:`_keep`; returns their idle handles."""
        keep = self._keep(asked=asked)
        idle = []
        for i in [i for i in self._handles.files() | set(self._entries) | set(self._ahead)
                  if i not in keep]:
            idle += self._drop(i, detached=False)
        if self._order.planned:
            hold = self._order.window(self.behind, 0) | self._busy()
            for i in [i for i in self._entries if i not in hold]:
                path = self._entries[i].path
                idle += self._drop(i, detached=False)
                self._ahead[i] = path
        return idle

    def release_unused(self) -> None:
        """Let the cache evict the files held outside the read-ahead window and not in use."""
        with self._lock:
            idle = self._release_passed(asked=True)
        close_all(idle)

    def touch(self, i: int) -> None:
        """Note that a reader reached file ``i``: read-ahead moves on past it."""
        idle = []
        with self._lock:
            if self._order.reach(i, within=self.ahead + self.behind):
                idle = self._release_passed()
                self._schedule()
        close_all(idle)

    # ----------------------------------------------------------------- fetch
    def _prefetch(self, i: int, future: concurrent.futures.Future[str]) -> None:
        try:
            with self._lock:  # the room may have gone to a reader since it was queued
                if not self._may_read_ahead(0) or i not in self._keep():
                    raise _NoRoom(f"read-ahead of '{self.objects[i].url}' stood back")
            future.set_result(self._acquire(i, ahead=True))
        except _NoRoom as err:
            future.set_exception(err)
        except CacheFullError as err:
            with self._lock:
                self._full_at = max(self._full_at, self._order.progress)  # until the reader moves on
            future.set_exception(err)
        except BaseException as err:  # noqa: BLE001 - the reader re-raises it
            future.set_exception(err)
        finally:
            with self._lock:
                if self._inflight.get(i) is future:
                    del self._inflight[i]
                self._prefetching.discard(i)
                self._notify()
                if not future.exception():
                    self._schedule()

    def _acquire(self, i: int, *, ahead: bool = False) -> str:
        """File ``i`` from the cache: held, or (``ahead``) noted in ``_ahead``."""
        obj = self.objects[i]
        with self._lock:
            self._ahead.pop(i, None)
        counts = _HitNoted(self._stats)
        try:
            entry = self.cache.acquire(obj, functools.partial(self.fetcher.download, obj),
                                       stats=counts, spare=self._ahead_paths if ahead else None,
                                       last=None if ahead else self._ahead_ranked)
        except RemoteObjectError as err:
            with self._lock:
                self._failed[i] = err
            raise
        with self._lock:
            self._used(i, hit=counts.hit)
            old = self._entries.get(i)
            if self._closed or old is not None or ahead:
                entry.release()
                if ahead and not self._closed and old is None:
                    self._ahead[i] = entry.path
                return entry.path if old is None else old.path
            self._entries[i] = entry
        return entry.path

    @contextlib.contextmanager
    def hold(self, i: int) -> Iterator[str]:
        """The local path of file ``i`` (:meth:`local_path`), never released inside the
        block, whatever other readers need."""
        if not 0 <= i < len(self.objects):
            raise IndexError(f"RemoteShards has {count_words(len(self.objects), 'file')}, asked "
                             f"for {i}.")
        with self._lock:
            self._pins[i] += 1
        try:
            yield self._claim(i)
        finally:
            self._unpin(i)

    def ready(self, i: int) -> bool:
        """Whether reading file ``i`` now waits for no download (cached, or known failed)."""
        with self._lock:
            if i in self._entries or i in self._failed:
                return True
        return self.cache.path_of(self.objects[i]) is not None

    def local_path(self, i: int) -> str:
        """The local path of file ``i``, downloaded first if needed; held while in the
        read-ahead window or open (use :meth:`hold` or :meth:`open` to keep it).

        Raises:
            RemoteObjectError: the file was deleted or changed, or cannot be read.
            RemoteStoreError: the store still fails after every retry, or refuses access.
            CacheFullError: nothing held here can make room for it, or the disk is full.
        """
        with self.hold(i) as path:
            return path

    def _unpin(self, i: int) -> None:
        idle = []
        with self._lock:
            self._pins[i] -= 1
            if self._pins[i] <= 0:
                del self._pins[i]
                if self._order.planned and i not in self._keep():
                    idle = self._drop(i, detached=False)  # passed: not kept
            self._notify()
        close_all(idle)

    def _claim(self, i: int) -> str:
        """:meth:`local_path` of a file the caller has pinned."""
        began = time.perf_counter()
        deadline = time.monotonic() + _ROOM_WAIT_S
        seen: object = None  # the folder when the cache last refused, waiting on others
        try:
            while True:
                with self._lock:
                    if self._closed:
                        raise RuntimeError("RemoteShards is closed.")
                    if i in self._failed:
                        raise self._failed[i]
                    entry = self._entries.get(i)
                    if entry is not None:
                        self._used(i, hit=True)
                        return entry.path
                    future = self._inflight.get(i)
                    mine = future is None
                    if mine:
                        future = concurrent.futures.Future()
                        self._inflight[i] = future
                    generation = self._generation
                assert future is not None
                if not mine:
                    try:
                        future.result()
                    except CacheFullError:
                        pass  # no room for a read-ahead (or it stood back): fetch it here
                    continue
                try:
                    path = self._acquire(i)
                    future.set_result(path)
                    return path
                except CacheFullError as err:
                    future.set_exception(err)
                    full = err
                except BaseException as err:
                    future.set_exception(err)
                    raise
                finally:
                    with self._lock:
                        if self._inflight.get(i) is future:
                            del self._inflight[i]
                        self._changed.notify_all()  # waiters on this file fetch it themselves
                seen = self._make_room(i, full, deadline, generation, seen)
        finally:
            self._stats.add("wait_s", time.perf_counter() - began)

    # --------------------------------------------------------------- handles
    @contextlib.contextmanager
    def open(self, i: int, opener: Callable[[str], Any],
             closer: Callable[[Any], None] | None = None) -> Iterator[Any]:
        """A handle on file ``i`` (``opener(local_path)``), kept open for later calls and
        closed (``closer(handle)``, default ``handle.close()``) when idle and over the
        handle limit, or at :meth:`close`. The file stays in the cache while it is open."""
        if not 0 <= i < len(self.objects):
            raise IndexError(f"RemoteShards has {count_words(len(self.objects), 'file')}, asked "
                             f"for {i}.")
        with self._lock:
            self._pins[i] += 1
            record = self._handles.take(i)
            if record is not None:
                self._used(i, hit=True)
        try:
            if record is None:
                handle = opener(self._claim(i))
                with self._lock:
                    record, extra = self._handles.add(i, handle, closer)
                close_all(extra)  # another thread opened it meanwhile
            self.touch(i)
            yield record.value
        finally:
            idle: list[tuple[Closer, Any]] = []
            with self._lock:
                if record is not None:
                    self._handles.done(record)
                    idle = self._handles.trim()
                    if idle:
                        idle += self._release_passed()
            self._unpin(i)
            close_all(idle)

    # ----------------------------------------------------------------- state
    def failed(self) -> dict[str, str]:
        """URL -> reason of each file found deleted or changed."""
        with self._lock:
            return {self.objects[i].url: str(err) for i, err in self._failed.items()}

    def stats(self) -> dict[str, Any]:
        """:class:`~datarax.storage.retry.StorageStats` counters (``cache_hits``: files a
        pass used that the cache already held, each once a pass), plus ``held`` (files
        this source holds in the cache now) and ``cache_dir``."""
        out = self._stats.snapshot()
        with self._lock:
            out["held"] = len(self._entries)
        out["cache_dir"] = self.cache.directory
        return out

    def stop(self) -> None:
        """Stop every download (readers' own too) at its next request or retry."""
        self._stopped = True

    def close(self) -> None:
        """Stop read-ahead and downloads, close the handles and release the cached files
        (they stay in the cache for the next run)."""
        self._end_hold()
        with self._lock:
            self._closed = self._stopped = True
            pool, self._pool = self._pool, None
            handles = self._handles.close()
            self._notify()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        close_all(handles)
        with self._lock:
            entries, self._entries = list(self._entries.values()), {}
            self._ahead.clear()
        for entry in entries:
            entry.release()

