"""``RemoteShards``: remote files made local through a :class:`ShardCache`, read ahead in
the order an epoch will use them.

A source holds one ``RemoteShards`` for its files. Readers call :meth:`RemoteShards.open`
(or :meth:`RemoteShards.local_path`) for the file a record lives in: it returns at once when
the file is cached, else waits for the download (one per file, whichever thread or process
asked first). :meth:`RemoteShards.plan` tells it which records an epoch serves, from where:
it works out the files in the order their first record comes up and downloads the next
``ahead`` of them in parallel (``threads`` at a time), so the reader rarely waits. In a
multi-host run each process plans only its own positions, so it fetches only its share.

Files in use or coming up are held in the cache (shared locks): eviction removes files
already passed, least recently used first. Open handles (e.g. array_record readers) are
kept for at most ``handles`` files; the rest are closed when idle.

A file that is deleted or changed while the epoch runs raises
:class:`~datarax.storage.errors.RemoteObjectError` naming it, every time it is asked for
(so a source's ``on_error="skip"`` skips its records without fetching it again).

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
from datarax.storage.cache import CacheEntry, ShardCache
from datarax.storage.errors import CacheFullError, RemoteObjectError
from datarax.storage.fetch import Fetcher
from datarax.storage.retry import RetryPolicy, StorageStats
from datarax.storage.urls import RemoteObject, list_objects

__all__ = ["RemoteShards"]

_SCAN_BLOCK = 1 << 16


class RemoteShards:
    """Remote files, fetched into a local cache ahead of the readers; see the module docstring.

    Args:
        objects: the files, in record-numbering order (from
            :func:`~datarax.storage.urls.list_objects`, or a dataset's metadata).
        cache: the :class:`ShardCache` (default: one at ``DATARAX_CACHE_DIR`` limited by
            ``DATARAX_CACHE_BYTES``).
        storage_options: passed to the fsspec filesystem.
        threads: parallel downloads.
        ahead: files fetched ahead of the reader, in the order the epoch uses them.
        behind: the files last reached that stay held (a window shuffle of ``W`` files
            reads ``W`` files at once: pass ``W``).
        handles: open handles kept at most (default: all when the files fit in the cache,
            else ``threads + ahead``).
        retry: the :class:`~datarax.storage.retry.RetryPolicy` of each request.
    """

    def __init__(self, objects: Sequence[RemoteObject], *, cache: ShardCache | None = None,
                 storage_options: Mapping[str, Any] | None = None, threads: int = 4,
                 ahead: int = 8, behind: int = 1, handles: int | None = None,
                 retry: RetryPolicy | None = None) -> None:
        if not objects:
            raise ConfigError("RemoteShards needs at least one file.")
        for name, value in (("threads", threads), ("ahead", ahead), ("behind", behind)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"RemoteShards {name} must be an int >= 1, got {value!r}.")
        self.objects = tuple(objects)
        self.cache = cache if cache is not None else ShardCache()
        self.storage_options = dict(storage_options or {})
        self.threads = threads
        self.ahead = ahead
        self.behind = behind
        self.retry = retry or RetryPolicy()
        self._stats = StorageStats()
        self.fetcher = Fetcher(self.storage_options, retry=self.retry, stats=self._stats)
        fits = sum(o.size for o in self.objects) <= self.cache.max_bytes
        self._largest = max(o.size for o in self.objects)
        self.handle_limit = handles if handles is not None else (
            len(self.objects) if fits else threads + ahead)
        self._lock = threading.RLock()
        self._entries: dict[int, CacheEntry] = {}
        self._inflight: dict[int, concurrent.futures.Future[str]] = {}
        self._failed: dict[int, RemoteObjectError] = {}
        self._handles: collections.OrderedDict[int, list[Any]] = collections.OrderedDict()
        self._closers: dict[int, Callable[[Any], None]] = {}
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False
        self._full_at = -2  # progress at which a read-ahead found the cache full
        self._reset_plan(None, 0, 0, None)

    def __reduce__(self) -> tuple[Any, ...]:
        # a worker process gets its own downloads into the same cache (shared safely)
        return (_rebuild, (self.objects, self.cache, self.storage_options, self.threads,
                           self.ahead, self.behind, self.handle_limit, self.retry))

    def __len__(self) -> int:
        return len(self.objects)

    # ------------------------------------------------------------------ plan
    def _reset_plan(self, indices: Callable[[int, int], np.ndarray] | None, start: int,
                    stop: int, ends: Sequence[int] | None) -> None:
        self._indices = indices
        self._scan, self._stop = int(start), int(stop)
        self._ends = np.asarray(ends, np.int64) if ends is not None else None
        self._seq: list[int] = []
        self._seq_pos: dict[int, int] = {}
        self._progress = -1

    def plan(self, indices: Callable[[int, int], np.ndarray], start: int, stop: int,
             ends: Sequence[int]) -> None:
        """Read ahead for positions ``[start, stop)``: ``indices(a, b)`` gives the record
        numbers served at positions ``[a, b)``; ``ends[i]`` is the number of records in
        files ``0..i`` (file ``i`` holds records ``ends[i-1] .. ends[i]-1``)."""
        if len(ends) != len(self.objects):
            raise ConfigError(f"RemoteShards.plan: {len(ends)} record ends for "
                              f"{len(self.objects)} files.")
        with self._lock:
            self._reset_plan(indices, start, stop, ends)
            self._full_at = -2
            self._schedule()

    def _extend(self, want: int) -> None:
        """Scan the plan until ``want`` files are known (or the positions end)."""
        while len(self._seq) < want and self._indices is not None and self._scan < self._stop:
            end = min(self._stop, self._scan + _SCAN_BLOCK)
            records = np.asarray(self._indices(self._scan, end), np.int64)
            self._scan = end
            files = np.searchsorted(self._ends, records, side="right")
            uniq, first = np.unique(files, return_index=True)
            for f in uniq[np.argsort(first)].tolist():
                if f not in self._seq_pos and 0 <= f < len(self.objects):
                    self._seq_pos[f] = len(self._seq)
                    self._seq.append(f)

    def upcoming(self) -> list[int]:
        """The files the plan reads next, in order (what read-ahead fetches and keeps)."""
        with self._lock:
            lo = self._progress + 1
            self._extend(lo + self.ahead)
            return self._seq[lo:lo + self.ahead]

    def _schedule(self) -> None:
        if self._closed or self._progress <= self._full_at:
            return
        running = sum(1 for f in self._inflight.values() if not f.done())
        # read ahead within the limit, leaving room for one file a reader asks for
        used = sum(self.objects[i].size for i in set(self._entries) | set(self._inflight))
        budget = self.cache.max_bytes - self._largest
        for i in self.upcoming():
            if running >= self.threads:
                break
            if i in self._entries or i in self._inflight or i in self._failed:
                continue
            used += self.objects[i].size
            if used > budget:
                break
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    self.threads, thread_name_prefix="datarax-fetch")
            future: concurrent.futures.Future[str] = concurrent.futures.Future()
            self._inflight[i] = future
            self._pool.submit(self._prefetch, i, future)
            running += 1

    def _keep(self) -> set[int]:
        """Files to hold: the ``behind`` last reached, the next ``ahead``, and those a
        reader is using."""
        busy = {i for i, (_, users) in self._handles.items() if users}
        if self._indices is None:
            return set(self._handles) | busy
        lo = max(0, self._progress + 1 - self.behind)
        return set(self._seq[lo:self._progress + 1 + self.ahead]) | busy

    def _release_passed(self) -> list[tuple[Callable[[Any], None], Any]]:
        """Release the files outside :meth:`_keep` (their idle handles are returned, to be
        closed outside the lock)."""
        keep = self._keep()
        idle = [(self._closers.pop(i), self._handles.pop(i)[0])
                for i in [i for i in self._handles if i not in keep]]
        for i in [i for i in self._entries if i not in keep]:
            self._entries.pop(i).release()
        return idle

    def release_unused(self) -> None:
        """Let the cache evict the files held outside the read-ahead window and not in use."""
        with self._lock:
            idle = self._release_passed()
        _close_all(idle)

    def touch(self, i: int) -> None:
        """Note that a reader reached file ``i``: read-ahead moves on past it."""
        idle = []
        with self._lock:
            pos = self._seq_pos.get(i)
            if pos is not None and pos > self._progress:
                self._progress = pos
                idle = self._release_passed()
                self._schedule()
        _close_all(idle)

    # ----------------------------------------------------------------- fetch
    def _prefetch(self, i: int, future: concurrent.futures.Future[str]) -> None:
        try:
            future.set_result(self._acquire(i))
        except CacheFullError as err:
            with self._lock:
                self._full_at = self._progress  # wait for the reader to move on
            future.set_exception(err)
        except BaseException as err:  # noqa: BLE001 - the reader re-raises it
            future.set_exception(err)
        finally:
            with self._lock:
                if self._inflight.get(i) is future:
                    del self._inflight[i]
                if not future.exception():
                    self._schedule()

    def _acquire(self, i: int) -> str:
        obj = self.objects[i]
        try:
            entry = self.cache.acquire(obj, functools.partial(self.fetcher.download, obj),
                                       stats=self._stats)
        except RemoteObjectError as err:
            with self._lock:
                self._failed[i] = err
            raise
        with self._lock:
            if self._closed:
                entry.release()
                return entry.path
            old = self._entries.get(i)
            if old is not None:
                entry.release()
                return old.path
            self._entries[i] = entry
        return entry.path

    def local_path(self, i: int) -> str:
        """The local path of file ``i``, downloaded first if needed (held in the cache
        while it is in the read-ahead window or open).

        Raises:
            RemoteObjectError: the file was deleted or changed, or cannot be read.
            CacheFullError: the cache cannot hold it next to the files in use.
        """
        if not 0 <= i < len(self.objects):
            raise IndexError(f"RemoteShards has {len(self.objects)} files, asked for {i}.")
        for attempt in range(3):
            with self._lock:
                if self._closed:
                    raise RuntimeError("RemoteShards is closed.")
                if i in self._failed:
                    raise self._failed[i]
                entry = self._entries.get(i)
                if entry is not None:
                    return entry.path
                future = self._inflight.get(i)
                mine = future is None
                if mine:
                    future = concurrent.futures.Future()
                    self._inflight[i] = future
            assert future is not None
            if not mine:
                began = time.perf_counter()
                try:
                    return future.result()
                except CacheFullError:
                    continue  # a read-ahead found no room: fetch it ourselves
                finally:
                    self._stats.add("wait_s", time.perf_counter() - began)
            began = time.perf_counter()
            try:
                path = self._acquire(i)
                future.set_result(path)
                return path
            except CacheFullError as err:
                future.set_exception(err)
                if attempt == 2 or not self._drop_furthest(i):
                    raise
            except BaseException as err:
                future.set_exception(err)
                raise
            finally:
                self._stats.add("wait_s", time.perf_counter() - began)
                with self._lock:
                    if self._inflight.get(i) is future:
                        del self._inflight[i]
        raise AssertionError("unreachable")  # pragma: no cover

    def _drop_furthest(self, wanted: int) -> bool:
        """Release held files furthest ahead (no handle open) to make room for ``wanted``."""
        with self._lock:
            idle = self._release_passed()
            order = sorted((i for i in self._entries if i not in self._handles and i != wanted),
                           key=lambda i: -self._seq_pos.get(i, len(self._seq)))
            for i in order[:max(1, len(order) // 2)]:
                self._entries.pop(i).release()
        _close_all(idle)
        return bool(order or idle)

    # --------------------------------------------------------------- handles
    @contextlib.contextmanager
    def open(self, i: int, opener: Callable[[str], Any],
             closer: Callable[[Any], None] | None = None) -> Iterator[Any]:
        """A handle on file ``i`` (``opener(local_path)``), kept open for later calls and
        closed (``closer(handle)``, default ``handle.close()``) when idle and over the
        handle limit, or at :meth:`close`."""
        with self._lock:
            record = self._handles.get(i)
            if record is not None:
                record[1] += 1
                self._handles.move_to_end(i)
        if record is None:
            handle = opener(self.local_path(i))
            with self._lock:
                record = self._handles.get(i)
                if record is None:
                    record = self._handles[i] = [handle, 0]
                    self._closers[i] = closer or _close
                    handle = None
                record[1] += 1
                self._handles.move_to_end(i)
            if handle is not None:
                with contextlib.suppress(Exception):
                    (closer or _close)(handle)
        self.touch(i)
        try:
            yield record[0]
        finally:
            with self._lock:
                record[1] -= 1
                idle = self._trim_handles()
            _close_all(idle)

    def _trim_handles(self) -> list[tuple[Callable[[Any], None], Any]]:
        out = []
        for i in list(self._handles):
            if len(self._handles) <= self.handle_limit:
                break
            handle, users = self._handles[i]
            if users == 0:
                del self._handles[i]
                out.append((self._closers.pop(i), handle))
        if out:
            out += self._release_passed()
        return out

    # ----------------------------------------------------------------- state
    def failed(self) -> dict[str, str]:
        """URL -> reason of each file found deleted or changed."""
        with self._lock:
            return {self.objects[i].url: str(err) for i, err in self._failed.items()}

    def stats(self) -> dict[str, Any]:
        """:class:`~datarax.storage.retry.StorageStats` counters, plus ``held`` (files this
        source holds in the cache now) and ``cache_dir``."""
        out = self._stats.snapshot()
        with self._lock:
            out["held"] = len(self._entries)
        out["cache_dir"] = self.cache.directory
        return out

    def close(self) -> None:
        """Stop read-ahead, close the handles and release the cached files (they stay in
        the cache for the next run)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
            handles = [(self._closers.pop(i), h) for i, (h, _) in self._handles.items()]
            self._handles.clear()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        for close, handle in handles:
            with contextlib.suppress(Exception):
                close(handle)
        with self._lock:
            entries, self._entries = list(self._entries.values()), {}
        for entry in entries:
            entry.release()


def _close(handle: Any) -> None:
    handle.close()


def _close_all(handles: list[tuple[Callable[[Any], None], Any]]) -> None:
    for close, handle in handles:
        with contextlib.suppress(Exception):  # its reads already raised what was wrong
            close(handle)


def _rebuild(objects: Sequence[RemoteObject], cache: ShardCache, storage_options: dict[str, Any],
             threads: int, ahead: int, behind: int, handles: int, retry: RetryPolicy,
             ) -> RemoteShards:
    return RemoteShards(objects, cache=cache, storage_options=storage_options, threads=threads,
                        ahead=ahead, behind=behind, handles=handles, retry=retry)
