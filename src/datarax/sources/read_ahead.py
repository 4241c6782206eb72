"""The one read-ahead engine of :class:`~datarax.sources.host_reader.HostReader`,
:class:`~datarax.sources.hf.stream_reader.StreamReader` and
:class:`~datarax.text.passes.TextPass`, which keep only how they read, decode, pack and
locate records: :class:`Sessions` (one reading session at a time), :class:`Workers`
(threads, results in submission order), :class:`Chunks` (records in order, batches of
the size asked, a bad record met ahead held back as the error of the batch that would
pass it) and :class:`SessionCursor` (``peek`` moves nothing, ``commit`` moves the
position). A reader's state is the position handed out, never what was read ahead
(docs/architecture.md, "The host path").

Example:
    >>> import numpy as np
    >>> chunks = Chunks()
    >>> chunks.append({"x": np.arange(3)}, np.arange(3), np.arange(3))
    >>> chunks.append({"x": np.arange(3, 5)}, np.arange(3, 5), np.arange(3, 5))
    >>> got = chunks.take(4); got.columns["x"].tolist(), got.end, chunks.held
    ([0, 1, 2, 3], 4, 1)
    >>> chunks.fail(ValueError("record 5 is bad"))
    >>> chunks.take(4)
    Traceback (most recent call last):
    ValueError: record 5 is bad
    >>> chunks.take(1).columns["x"].tolist()  # what came before the bad record
    [4]
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from datarax.core.cursor import SessionEnded
from datarax.core.threads import run_behind_consumer
from datarax.host.threads import kept_across_fork
from datarax.sources.skip_ledger import SkipCounts

__all__ = ["Chunks", "ReadBatch", "SessionCursor", "Sessions", "Workers", "program_ending"]


@dataclasses.dataclass
class ReadBatch:
    """Records handed out together: ``columns`` (field -> numpy array with a leading
    record axis), ``indices`` (the stable index of each record, int64) and ``end`` (the
    reader's position once they are handed out, counting records skipped before the
    last one)."""

    columns: dict[str, Any]
    indices: np.ndarray
    end: int

    def __len__(self) -> int:
        return int(self.indices.shape[0])


class Sessions:
    """The reading sessions of one reader, one open at a time, and the lock that keeps
    one thread reading (a peek, a start, a stop or a direct read) at a time.

    Example:
        >>> sessions = Sessions("Src")
        >>> first = sessions.begin(); sessions.end(first - 1, print)  # an old one: nothing
        >>> sessions.end(first, lambda: print("let go"))
        let go
        >>> sessions.check(first)
        Traceback (most recent call last):
        datarax.core.cursor.SessionEnded: Src: the reading session 1 ended (the source moved).
    """

    def __init__(self, where: str) -> None:
        self.where = where
        self.lock = threading.RLock()
        self.current = 0

    def begin(self) -> int:
        """Open a new session (any other ends); returns it."""
        with self.lock:
            self.current += 1
            return self.current

    def check(self, session: int | None) -> None:
        """Raise :class:`SessionEnded` unless ``session`` is the open one (None: any)."""
        if session is not None and session != self.current:
            raise SessionEnded(f"{self.where}: the reading session {session} ended "
                               "(the source moved).")

    def end(self, session: int | None, release: Callable[[], None]) -> None:
        """End ``session`` (None: whichever is open) and ``release()`` its reading, under
        the lock (after a peek in progress on another thread); a session ended already
        is left alone, without the lock (sessions only grow: a collection may ask
        mid-read)."""
        if session not in (None, self.current):
            return
        with self.lock:
            if session not in (None, self.current):
                return
            self.current += 1
            release()


#: the threads of every :class:`Workers` (they do not hold the interpreter's exit up)
_WORKER_THREADS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
#: seconds an idle worker thread waits between checks that the program is ending
IDLE_CHECK_S = 0.1


def program_ending() -> bool:
    """Whether the interpreter is exiting: its main thread is done (its script ended or
    raised) and no thread but read-ahead workers keeps the process going. A user's own
    non-daemon thread still reading after the main script ended keeps it False.

    Example:
        >>> program_ending()  # the main thread runs
        False
    """
    if threading.main_thread().is_alive():
        return False
    return not any(not thread.daemon and thread.is_alive() and thread not in _WORKER_THREADS
                   for thread in threading.enumerate())


class _Backlog:
    """Work submitted and not started, shared by a :class:`Workers`' threads (they hold
    this, not the :class:`Workers`, so dropping it lets them end)."""

    def __init__(self) -> None:
        self.ready = threading.Condition(threading.Lock())
        self.items: collections.deque[tuple[concurrent.futures.Future[Any], Callable[..., Any],
                                            tuple[Any, ...]]] = collections.deque()
        # started and not yet done (a child of os.fork() runs them again: see Workers)
        self.running: dict[concurrent.futures.Future[Any],
                           tuple[Callable[..., Any], tuple[Any, ...]]] = {}
        self.closed = False

    def close(self) -> None:
        """No more work starts: idle threads end, busy ones after their item."""
        with self.ready:
            self.closed = True
            self.ready.notify_all()

    def serve(self) -> None:
        """A worker thread: run items in submission order until closed, or until the
        program is ending (work not started then is dropped, not run)."""
        run_behind_consumer()
        while True:
            with self.ready:
                while not self.items and not self.closed:
                    if not self.ready.wait(IDLE_CHECK_S) and program_ending():
                        return
                if self.closed or program_ending():
                    return
                future, fn, args = self.items[0]
                self.running[future] = (fn, args)  # (before it leaves items: a fork sees it)
                self.items.popleft()
            try:
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    result = fn(*args)
                except BaseException as err:  # noqa: BLE001 - raised where it is taken
                    future.set_exception(err)
                else:
                    future.set_result(result)
            finally:
                self.running.pop(future, None)
            del future, fn, args


class Workers:
    """Work run on ``threads`` worker threads (named after ``name``), results taken in
    the order it was submitted.

    At interpreter exit (the main script's end, an uncaught exception, Ctrl-C) the
    work being run finishes and the work queued behind it is dropped, not run
    (:func:`program_ending`); a user's non-daemon thread still reading after the main
    script ended is served as ever.

    In a child of ``os.fork()`` (a worker pool of ``multiprocessing``'s ``fork`` start
    method) the threads are gone: the work not done when it forked is run again there,
    on threads of the child's own, so its ``take()`` gets every result rather than
    waiting forever for a thread it does not have.

    Example:
        >>> workers = Workers(2, "Src")
        >>> for n in range(3):
        ...     workers.submit(pow, n, 2)
        >>> len(workers), [workers.take() for _ in range(3)], len(workers)
        (3, [0, 1, 4], 0)
        >>> workers.stop()  # the threads joined
    """

    def __init__(self, threads: int, name: str) -> None:
        self.threads = threads
        self._name = name
        self._backlog = _Backlog()
        self._started: list[threading.Thread] = []
        self._lock = threading.Lock()  # the queue: a consumer's thread may ask how far
        self._pending: collections.deque[concurrent.futures.Future[Any]] = collections.deque()
        _LIVE_WORKERS.add(self)

    def __len__(self) -> int:
        """Work submitted and not taken."""
        return len(self._pending)

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on a worker thread (started on first use, behind the
        consumer's thread when cores are short)."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            self._pending.append(future)
        backlog = self._backlog
        with backlog.ready:
            backlog.items.append((future, fn, args))
            backlog.ready.notify()
        self._start_thread()

    def _start_thread(self) -> None:
        with self._lock:
            if len(self._started) < self.threads:
                thread = threading.Thread(target=self._backlog.serve,
                                          name=f"{self._name}-reader_{len(self._started)}")
                _WORKER_THREADS.add(thread)
                thread.start()
                self._started.append(thread)

    def take(self) -> Any:
        """The oldest work's result, once done (its error raised here)."""
        if not self._started and self._backlog.items:  # forked: the work queued again
            for _ in range(min(self.threads, len(self._backlog.items))):
                self._start_thread()
        result = self._pending[0].result()
        with self._lock:
            self._pending.popleft()
        return result

    def finished(self) -> Iterator[Any]:
        """Results of the done work at the head of the queue, in order, up to the first
        not done; a failed one as its exception."""
        with self._lock:
            pending = list(self._pending)
        for future in pending:
            if not future.done():
                return
            if future.cancelled():
                yield concurrent.futures.CancelledError()
            else:
                yield future.exception() or future.result()

    def stop(self) -> None:
        """Cancel the work not started, wait for the rest, join the threads."""
        for future in self._pending:
            future.cancel()
        backlog, self._backlog = self._backlog, _Backlog()
        started, self._started = self._started, []
        backlog.close()
        for thread in started:
            if thread is not threading.current_thread():
                thread.join()
        with self._lock:
            self._pending.clear()

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        backlog = getattr(self, "_backlog", None)
        if backlog is not None:
            backlog.close()

    def _queue_again_in_child(self) -> None:
        """After ``os.fork()``, in the child: the parent's threads (and any lock they
        held) are not here; the work they had not finished is queued again, in order."""
        old = self._backlog
        work = {future: (fn, args) for future, fn, args in list(old.items)}
        work.update(dict(old.running))
        self._backlog, self._lock, self._started = _Backlog(), threading.Lock(), []
        pending: collections.deque[concurrent.futures.Future[Any]] = collections.deque()
        for future in list(self._pending):
            if future in work and not future.done():
                fn, args = work[future]
                future = concurrent.futures.Future()
                self._backlog.items.append((future, fn, args))
            pending.append(future)
        self._pending = pending


#: every Workers of this process, for a child of os.fork() to queue their work again
_LIVE_WORKERS: weakref.WeakSet[Workers] = kept_across_fork("_queue_again_in_child")


@dataclasses.dataclass
class _Run:
    columns: dict[str, Any]
    indices: np.ndarray
    positions: np.ndarray  # the reader's position of each record
    offset: int = 0  # records already taken

    @property
    def remaining(self) -> int:
        return int(self.indices.shape[0]) - self.offset


class Chunks:
    """Decoded records waiting in order (runs of records with their stable indices and
    positions), taken as batches; the error of a bad record met ahead, held back."""

    def __init__(self) -> None:
        self._runs: collections.deque[_Run] = collections.deque()
        self._lock = threading.Lock()  # a consumer's thread may ask how many are held
        self.failure: BaseException | None = None

    @property
    def held(self) -> int:
        """Records waiting."""
        with self._lock:
            return sum(run.remaining for run in self._runs)

    def append(self, columns: dict[str, Any], indices: np.ndarray, positions: np.ndarray) -> None:
        """Records at reader ``positions`` (ascending), after those held."""
        if len(indices):
            with self._lock:
                self._runs.append(_Run(columns, indices, positions))

    def fail(self, error: BaseException) -> None:
        """No record follows those held: a batch that needs more raises ``error``."""
        self.failure = error

    def take(self, size: int) -> ReadBatch | None:
        """The next ``size`` records held (fewer: all that are left, where nothing
        follows), or None where none is; raises :meth:`fail`'s error rather than hand
        out fewer than ``size``."""
        held = self.held
        if self.failure is not None and held < size:
            raise self.failure
        if held == 0:
            return None
        with self._lock:
            first = self._runs[0]
            if first.offset == 0 and first.remaining == size:  # one whole run: no copy
                self._runs.popleft()
                return ReadBatch(first.columns, first.indices, int(first.positions[-1]) + 1)
            parts: list[tuple[_Run, slice]] = []
            while size > 0 and self._runs:
                run = self._runs[0]
                take = min(size, run.remaining)
                parts.append((run, slice(run.offset, run.offset + take)))
                run.offset += take
                size -= take
                if run.remaining == 0:
                    self._runs.popleft()
        last, cut = parts[-1]
        end = int(last.positions[cut.stop - 1]) + 1
        if len(parts) == 1:
            return ReadBatch({k: v[cut] for k, v in last.columns.items()}, last.indices[cut], end)
        columns = {k: np.concatenate([run.columns[k][cut] for run, cut in parts])
                   for k in parts[0][0].columns}
        return ReadBatch(columns, np.concatenate([run.indices[cut] for run, cut in parts]), end)

    def clear(self) -> None:
        """Drop every record held and the held-back error."""
        with self._lock:
            self._runs.clear()
        self.failure = None


class SessionCursor:
    """Batches of reading session ``session`` of ``reader`` (None: the pass was over when
    the cursor was made) for ``source``, read ahead of its position: a
    :class:`~datarax.core.cursor.ReadAheadCursor`.

    ``reader``: its ``sessions`` (:class:`Sessions`), ``peek_batch(batch_size, session)``
    (a :class:`ReadBatch` or None), ``commit(end)``, ``position`` and ``skipped`` after
    it, ``ready(batch_size)`` and ``stop(session)``.

    ``present``: a peeked batch's columns as the source hands them out; ``guard``: runs
    a peek (``guard(read)``), e.g. to word a bad record's error as the source does. A
    :class:`~datarax.sources.skip_ledger.SkipCounts` source's ``skipped`` follows the
    reader's count at each commit.
    """

    def __init__(
        self,
        source: Any,
        reader: Any,
        session: int | None,
        *,
        present: Callable[[dict[str, Any]], Any] | None = None,
        guard: Callable[[Callable[[], Any]], Any] | None = None,
    ) -> None:
        self._source = source
        self._reader = reader
        self._epoch = source.epoch
        self._session = session
        self._present = present
        self._guard = guard

    @property
    def current(self) -> bool:
        """Whether the reader still serves this cursor's session."""
        return self._session is None or self._session == self._reader.sessions.current

    def peek(self, batch_size: int) -> tuple[Any, np.ndarray, int] | None:
        """``(batch, stable indices, end)`` of the batch after the last one peeked, or
        None at the pass's end (raises as :meth:`~datarax.core.cursor.ReadAheadCursor.peek`
        says)."""
        if self._session is None:
            return None
        session = self._session

        def read() -> ReadBatch | None:
            return self._reader.peek_batch(batch_size, session)

        got = read() if self._guard is None else self._guard(read)
        if got is None:
            return None
        columns = got.columns if self._present is None else self._present(got.columns)
        return columns, got.indices, got.end

    def take(self, batch_size: int) -> tuple[Any, Any]:
        """:meth:`peek` and :meth:`commit` at once, under the reader's lock (a source's
        ``get_batch_with_indices``): ``(batch, stable indices)``, ``(None, None)`` at the end."""
        with self._reader.sessions.lock:
            got = self.peek(batch_size)
            self.commit(None if got is None else got[2])
        return (None, None) if got is None else got[:2]

    def ready(self, batch_size: int) -> bool:
        """Whether :meth:`peek` of ``batch_size`` would return without waiting."""
        return self._session is not None and self.current and self._reader.ready(batch_size)

    def release(self) -> None:
        """End this cursor's session if it is still the reader's open one (read-ahead
        and threads let go, the position kept); a newer one is left alone. Any thread."""
        if self._session is not None:
            self._reader.stop(self._session)

    def commit(self, end: int | None) -> None:
        """Hand out everything before position ``end`` of the pass (None: its end)."""
        source, reader = self._source, self._reader
        if self._session is None:  # nothing was left to read
            source.datarax_position.move(
                self._epoch, (source.epoch_size() or 0) if end is None else int(end))
            return
        if not self.current:  # moved from outside: the position is already set there
            return
        reader.commit(end)
        if isinstance(source, SkipCounts):
            skipped = source.skipped
            if int(skipped.get_raw_value()) != reader.skipped:
                # raw: once per batch on the consumer's thread, outside any trace
                skipped.set_raw_value(np.asarray(reader.skipped, np.int64))
        source.datarax_position.move(self._epoch, reader.position)
