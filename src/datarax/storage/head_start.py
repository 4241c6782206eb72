"""``HeadStart``: the first reads of an epoch served by byte range while whole files download.

:meth:`HeadStart.read` serves records of files (or blocks) not yet in the cache from
:class:`~datarax.storage.array_record_ranges.ArrayRecordRanges` while
:class:`~datarax.storage.shards.RemoteShards` keeps downloading them whole; the bytes are
the same either way, so batches do not change. Each :meth:`HeadStart.arm` (epoch start or
restore) allows ``budget`` bytes and ``max_requests`` requests of ranged reads, and a read
goes by range only where the not-cached units it touches hold ``request_bytes`` per request
it needs; after one read declines, reads wait for the downloads until the next arm. A file
ranged reads cannot decode is left to the whole-file path, which reports what is wrong.
Where the requests fit whatever the footers say, each file's chunks are asked for as soon
as its footer is decoded, in the same call to the store.

Example:
    >>> import fsspec, os, tempfile
    >>> from array_record.python.array_record_module import ArrayRecordWriter
    >>> from datarax.storage import ShardCache, list_objects
    >>> from datarax.storage.shards import RemoteShards
    >>> local = os.path.join(tempfile.mkdtemp(), "a.array_record")
    >>> writer = ArrayRecordWriter(local, "group_size:1")
    >>> for i in range(4):
    ...     writer.write(b"r%d" % i)
    >>> writer.close()
    >>> fsspec.filesystem("memory").pipe("/head-doc/a.array_record", open(local, "rb").read())
    >>> shards = RemoteShards(list_objects("memory://head-doc/*.array_record"),
    ...                       cache=ShardCache(tempfile.mkdtemp(), max_bytes="1M"))
    >>> head = HeadStart(shards, request_bytes=0, budget=1 << 20)
    >>> head.read({0: [3, 1]})  # not downloaded: by range
    {0: [b'r3', b'r1']}
    >>> _ = shards.local_path(0)
    >>> head.read({0: [2]})  # in the cache now: left to the local copy
    {}
    >>> head.stats()["ranged_records"]
    2
    >>> shards.close()
"""

from __future__ import annotations

import concurrent.futures
import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from datarax.errors import ConfigError, RecordError
from datarax.storage.array_record_ranges import ArrayRecordRanges, MoreToRead, load_footer
from datarax.storage.blocks import FileBlocks
from datarax.storage.errors import RemoteObjectError
from datarax.storage.fetch import FollowUp
from datarax.storage.shards import RemoteShards
from datarax.storage.urls import RemoteObject

__all__ = ["BUDGET_SHARE", "HOLD_REQUESTS", "REQUEST_BYTES", "UNBOUNDED", "HeadStart"]

_THREADS = 64  # files read by range at once
_BUDGET = 64 << 20  # ranged bytes per epoch start at most, by default
UNBOUNDED = 1 << 62  # a budget (or request count) without end: ranged_reads=True
_REQUESTS = 512  # ranged requests per epoch start at most, by default (two batches of 256)
BUDGET_SHARE = 64  # ranged bytes per epoch start: 1/64 of the files' bytes, by default
# bytes of downloads a ranged request must spare to be worth it: a request costs about as
# much as ~1 MB of download (docs/benchmarks.md, head start)
REQUEST_BYTES = 1 << 20
# read-ahead waits for the first batch's ranged reads where a pass's first files could
# spare this many requests (a batch of 256 records by range)
HOLD_REQUESTS = 256


class HeadStart:
    """Ranged reads of ``shards``' ArrayRecord files (or blocks) until each is in the cache.

    Args:
        shards: the :class:`~datarax.storage.shards.RemoteShards` downloading the files
            (or the blocks of ``blocks``).
        budget: bytes of ranged reads allowed after each :meth:`arm` (default: 1/64 of the
            files' bytes, at most 64 MiB; 0 turns ranged reads off).
        threads: files read by range at once.
        request_bytes: bytes of not-cached files (or blocks) a read must touch per ranged
            request it needs (default :data:`REQUEST_BYTES`; 0: any).
        blocks: with block windows, the blocks ``shards`` downloads (its objects), and
            ``files``: the files they are cut from.
        max_requests: ranged requests allowed after each :meth:`arm` (default 512).
        hold: whether :meth:`arm` may hold ``shards``' read-ahead back until the first
            batch is served or declined (False where the reads run in other processes).
    """

    def __init__(self, shards: RemoteShards, *, budget: int | None = None,
                 threads: int = _THREADS, request_bytes: int | None = None,
                 blocks: FileBlocks | None = None,
                 files: Sequence[RemoteObject] | None = None,
                 max_requests: int | None = None, hold: bool = True) -> None:
        if (blocks is None) != (files is None):
            raise ConfigError("HeadStart: give blocks and the files they are cut from together.")
        self.shards = shards
        self.blocks = blocks
        self.files = tuple(files) if files is not None else shards.objects
        total = sum(o.size for o in self.files)
        self.request_bytes = REQUEST_BYTES if request_bytes is None else int(request_bytes)
        self.budget = min(total // BUDGET_SHARE, _BUDGET) if budget is None else int(budget)
        self.max_requests = _REQUESTS if max_requests is None else int(max_requests)
        self.threads = threads
        self.hold = hold
        self._lock = threading.Lock()
        self._opening_locks: dict[int, threading.Lock] = {}
        self._ranges: dict[int, ArrayRecordRanges | None] = {}  # by file; None: not by range
        self._opened: list[ArrayRecordRanges] = []
        self._spent = 0  # bytes of ranged reads since the last arm
        self._asked = 0  # requests since then
        self._declined = False  # a read since then did not pay: the later, larger ones wait
        self._records = 0
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._footers: concurrent.futures.ThreadPoolExecutor | None = None  # decodes, writes
        self._unwritten: list[Callable[[], None]] = []  # footers to keep beside the cache

    def __reduce__(self) -> tuple[Any, ...]:
        return (functools.partial(
            HeadStart, self.shards, budget=self.budget, threads=self.threads,
            request_bytes=self.request_bytes, blocks=self.blocks,
            files=None if self.blocks is None else self.files, max_requests=self.max_requests,
            hold=self.hold), ())

    def arm(self) -> None:
        """Renew the budget (an epoch starts or a state was restored); with ``hold``, hold
        read-ahead back until the first batch is served or declined where the pass's first
        files are large enough (its requests would wait behind the downloads)."""
        self._write_kept()
        with self._lock:
            self._spent = 0
            self._asked = 0
            self._declined = False
        sizes = sorted((o.size for o in self.shards.objects), reverse=True)
        first = sum(sizes[:self.shards.behind])  # the most a pass's first read can spare
        if self.hold and self.budget > 0 and first >= HOLD_REQUESTS * REQUEST_BYTES:
            self.shards.hold_read_ahead()

    def _file_of(self, unit: int) -> int:
        return unit if self.blocks is None else self.blocks.file_of[unit]

    def _opening(self, files: list[int]) -> list[threading.Lock]:
        """The locks of ``files`` not opened yet, taken in file order; release once opened."""
        with self._lock:
            locks = [self._opening_locks.setdefault(f, threading.Lock()) for f in sorted(files)
                     if f not in self._ranges]
        for lock in locks:
            lock.acquire()
        return locks

    def _known_footer(self, f: int) -> Any:
        cache = self.shards.cache  # a block's file's footer, or one kept beside the cache
        return self.blocks.footers[f] if self.blocks is not None else None if cache is None \
            else load_footer(cache, self.files[f])

    def _open_one(self, f: int, footer: Any, first: bytes | None = None,
                  more: bool = True) -> Any:
        """File ``f``'s ranged reader (None: refused or damaged), or its opening's future."""
        try:
            return ArrayRecordRanges.for_object(self.files[f], fetcher=self.shards.fetcher,
                                                cache=self.shards.cache, footer=footer,
                                                first=first, keep=self._keep, more=more)
        except MoreToRead:
            return self._threads().submit(self._open_one, f, footer, first)
        except (ConfigError, RecordError):
            return None

    def _opened_now(self, f: int, reader: ArrayRecordRanges | None,
                    spent: int = 0) -> ArrayRecordRanges | None:
        """Note (and return) file ``f``'s reader; ``spent``: its open's bytes already taken."""
        with self._lock:
            self._ranges[f] = reader
            if reader is not None:
                self._opened.append(reader)
                self._spent += reader.stats()["bytes"] - spent  # its footer (0 when kept)
        return reader

    def _open_all(self, files: list[int]) -> dict[int, ArrayRecordRanges | None]:
        """The ranged reader of each of ``files`` (None: not by range)."""
        locks = self._opening(files)
        try:
            with self._lock:
                todo = [f for f in sorted(files) if f not in self._ranges]
            known = {f: self._known_footer(f) for f in todo}
            asked = [f for f in todo if known[f] is None]
            opened = dict(zip(asked, self._fetch(
                [self._tail(f) for f in asked],
                lambda k, data: self._open_one(asked[k], None, data, more=False)), strict=True))
            opened = {f: r.result() if isinstance(r, concurrent.futures.Future) else r
                      for f, r in opened.items()}
            rest = [f for f in todo if known[f] is not None]
            opened.update(zip(rest, self._map(lambda f: self._open_one(f, known[f]), rest),
                              strict=True))
            for f in todo:
                self._opened_now(f, opened[f])
        finally:
            for lock in locks:
                lock.release()
        with self._lock:
            return {f: self._ranges[f] for f in files}

    def _tail(self, f: int) -> tuple[RemoteObject, int, int]:
        """The request opening file ``f``: its postscript and the tail before it."""
        start, length = ArrayRecordRanges.open_span(self.files[f].size)
        return self.files[f], start, start + length

    def _fetch(self, asked: list[tuple[RemoteObject, int, int]],
               then: Callable[[int, bytes], Any] | None = None) -> list[Any]:
        """``asked`` read together, ``then`` of each answer run in the footer thread."""
        try:
            return self.shards.fetcher.read_ranges(
                asked, self._map, then, None if then is None else self._decoder().submit)
        except RemoteObjectError as err:
            self._drop_file(err)  # deleted or changed: the error the download gives, once
            raise

    def _drop_file(self, err: RemoteObjectError) -> None:
        """Later reads of the file ``err`` names go to the whole-file path, which raises it."""
        with self._lock:
            for f, obj in enumerate(self.files):
                if obj.url == err.url:
                    self._ranges[f] = None
        self.shards.refuse(err)

    def _decoded(self, units: list[tuple[int, ArrayRecordRanges]],
                 wanted: Mapping[int, Sequence[int]],
                 runs: list[list[tuple[int, int, list[int]]]],
                 fetched: Sequence[bytes]) -> list[list[bytes] | None]:
        """The records ``wanted`` of each unit from its ``runs``' bytes (None: damaged)."""
        out: list[list[bytes] | None] = []
        at = 0
        for (u, reader), unit_runs in zip(units, runs, strict=True):
            mine, at = fetched[at:at + len(unit_runs)], at + len(unit_runs)
            try:
                records: list[bytes] | None = reader.records(wanted[u], mine)
            except (ConfigError, RecordError):  # damaged: the whole-file read reports it
                with self._lock:
                    self._ranges[self._file_of(u)] = None
                records = None
            with self._lock:
                self._records += len(records or ())
            out.append(records)
        return out

    def _totals(self) -> dict[str, int]:
        with self._lock:
            readers = list(self._opened)
        stats = [r.stats() for r in readers]
        return {k: sum(s[k] for s in stats) for k in ("requests", "bytes")}

    def read(self, wanted: Mapping[int, Sequence[int]]) -> dict[int, list[bytes]]:
        """``{unit: records}`` for the units of ``wanted`` (``{file, or block: positions
        in its file}``) not in the cache, read by range while the budget lasts; the others
        are left out (read them from the cache, waiting for their download).

        Raises:
            RemoteObjectError: a file was deleted or changed since it was listed.
            RemoteStoreError: the store still fails after every retry, or refuses access.
        """
        self._write_kept()
        try:
            out = self._read(wanted)
        except BaseException:
            self.shards.release_read_ahead()
            raise
        self.shards.release_read_ahead()  # served or declined: the downloads start now
        return out

    def _spent_all(self) -> bool:
        """Whether the reads until the next :meth:`arm` wait for the downloads."""
        with self._lock:
            return self._declined or self._spent >= self.budget or \
                self._asked >= self.max_requests

    def _read(self, wanted: Mapping[int, Sequence[int]]) -> dict[int, list[bytes]]:
        if self._spent_all():
            return {}
        todo = [u for u in wanted if self._ranges.get(self._file_of(u), 1) is not None
                and not self.shards.ready(u)]
        if not todo or sum(self.shards.objects[u].size for u in todo) < \
                len(todo) * self.request_bytes:
            return {}
        if self._sure(todo, wanted):
            return self._read_pipelined(todo, wanted)
        readers = self._open_all(sorted({self._file_of(u) for u in todo}))
        units = [(u, readers[self._file_of(u)]) for u in todo
                 if readers[self._file_of(u)] is not None]
        # taken from the budget whole: all by range or none (the call waits either way)
        runs = [r.ranges(r.chunks_of(wanted[u])) for u, r in units]
        need = sum(end - start for unit_runs in runs for start, end, _ in unit_runs)
        asked = sum(len(unit_runs) for unit_runs in runs)
        spared = sum(self.shards.objects[u].size for u, _ in units)  # downloads not waited for
        with self._lock:
            if not units or self._spent + need > self.budget or spared < asked * \
                    self.request_bytes or self._asked + asked > self.max_requests:
                # later reads are larger (chunks of many batches): they wait until the next arm
                self._declined = bool(units)
                return {}
            self._spent += need
            self._asked += asked
        results = self._decoded(units, wanted, runs, self._fetch(self._requests_of((units, runs))))
        return {u: records for (u, _), records in zip(units, results, strict=True)
                if records is not None}

    def _sure(self, todo: list[int], wanted: Mapping[int, Sequence[int]]) -> bool:
        """Whether :meth:`_read`'s request checks pass whatever the footers say."""
        most = sum(len(set(np.asarray(wanted[u]).reshape(-1).tolist())) for u in todo)
        with self._lock:
            return self._asked + most <= self.max_requests and most * self.request_bytes <= \
                sum(self.shards.objects[u].size for u in todo)

    def _plan(self, f: int, reader: ArrayRecordRanges | None, units: list[int],
              wanted: Mapping[int, Sequence[int]]) -> Any:
        """``(units, runs)`` of file ``f``, taken from the budget; None: they wait."""
        if reader is None:
            return None
        runs = [reader.ranges(reader.chunks_of(wanted[u])) for u in units]
        need = sum(end - start for unit_runs in runs for start, end, _ in unit_runs)
        with self._lock:
            if self._declined or self._spent + need > self.budget:
                self._declined = True
                return None
            self._spent += need
            self._asked += sum(len(unit_runs) for unit_runs in runs)
        return [(u, reader) for u in units], runs

    def _requests_of(self, plan: Any) -> list[tuple[RemoteObject, int, int]]:
        return [(self.files[self._file_of(u)], start, end)
                for (u, _), unit_runs in zip(*plan, strict=True) for start, end, _ in unit_runs]

    def _read_pipelined(self, todo: list[int],
                        wanted: Mapping[int, Sequence[int]]) -> dict[int, list[bytes]]:
        """:meth:`_read` with each file's chunks asked as its footer comes."""
        files = sorted({self._file_of(u) for u in todo})
        units_of = {f: [u for u in todo if self._file_of(u) == f] for f in files}
        locks = self._opening(files)
        try:
            with self._lock:
                readers = {f: self._ranges[f] for f in files if f in self._ranges}
            for f in files:
                footer = None if f in readers else self._known_footer(f)
                if footer is not None:
                    readers[f] = self._open_one(f, footer)
                    self._opened_now(f, readers[f])
            tails = [f for f in files if f not in readers]
            asked = [self._tail(f) for f in tails]
            with self._lock:  # the tails' bytes, whatever their files' chunks come to
                self._spent += sum(end - start for _, start, end in asked)
            plans = [plan for f in files if f in readers
                     if (plan := self._plan(f, readers[f], units_of[f], wanted)) is not None]
            asked += [r for plan in plans for r in self._requests_of(plan)]

            def opened(i: int, data: bytes) -> Any:  # in the footer thread, as a tail comes
                if i >= len(tails):
                    return data  # a chunk of a file whose footer was known
                f = tails[i]
                reader = self._open_one(f, None, data, more=False)
                if isinstance(reader, concurrent.futures.Future):
                    return reader  # opened in a request thread: its chunks asked after
                self._opened_now(f, reader, len(data))
                plan = self._plan(f, reader, units_of[f], wanted)
                return None if plan is None else FollowUp(self._requests_of(plan),
                                                          lambda got: (plan, got))

            fetched = self._fetch(asked, opened if tails else None)
            rest = iter(fetched[len(tails):])
            done = [r for r in fetched[:len(tails)] if isinstance(r, tuple)] + [
                (plan, [next(rest) for _ in self._requests_of(plan)]) for plan in plans]
            spans = {f: end - start for f, (_, start, end) in zip(tails, asked, strict=False)}
            later = [plan for f, r in zip(tails, fetched, strict=False)  # opened in a thread
                     if isinstance(r, concurrent.futures.Future) and (plan := self._plan(
                         f, self._opened_now(f, r.result(), spans[f]), units_of[f], wanted))]
            rest = iter(self._fetch([r for plan in later for r in self._requests_of(plan)])
                        if later else ())
            done += [(plan, [next(rest) for _ in self._requests_of(plan)]) for plan in later]
            out = {u: records for (units, runs), got in done for (u, _), records in zip(
                units, self._decoded(units, wanted, runs, got), strict=True)}
        finally:
            for lock in locks:
                lock.release()
        return {u: records for u, records in out.items() if records is not None}

    def _keep(self, write: Callable[[], None]) -> None:
        """Write a kept footer once the read that opened it returns."""
        with self._lock:
            self._unwritten.append(write)

    def _write_kept(self) -> None:
        """Start writing the footers kept so far in the footer thread."""
        with self._lock:
            writes, self._unwritten = self._unwritten, []
        if writes:
            decoder = self._decoder()
            for write in writes:
                decoder.submit(write)

    def _decoder(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if self._footers is None:
                self._footers = concurrent.futures.ThreadPoolExecutor(
                    1, thread_name_prefix="datarax-head-start-footers")
            return self._footers

    def _threads(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    self.threads, thread_name_prefix="datarax-head-start")
            return self._pool

    def _map(self, fn: Any, items: list[Any]) -> list[Any]:
        """``fn`` of each item, in the request threads when there are several."""
        if len(items) <= 1:
            return [fn(item) for item in items]
        return list(self._threads().map(fn, items))

    def stats(self) -> dict[str, int | None]:
        """``ranged_requests``, ``ranged_bytes`` and ``ranged_records`` so far (footers
        read included), and ``ranged_budget_left`` (bytes; None: no end, ranged_reads)."""
        totals = self._totals()
        with self._lock:
            left = None if self.budget >= UNBOUNDED else max(0, self.budget - self._spent)
            return {"ranged_requests": totals["requests"], "ranged_bytes": totals["bytes"],
                    "ranged_records": self._records, "ranged_budget_left": left}

    def close(self) -> None:
        """Stop the request threads (once the footers kept are written)."""
        self._write_kept()
        with self._lock:
            pool, self._pool = self._pool, None
            footers, self._footers = self._footers, None
            readers = [r for r in self._ranges.values() if r is not None]
        for threads in (pool, footers):
            if threads is not None:
                threads.shutdown(wait=True)
        for reader in readers:
            reader.close()
