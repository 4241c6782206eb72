"""The worker processes of ``write_dataset(workers=n)``: started first, then given work.

:class:`WorkerPool` spawns ``n - 1`` processes early (``convert`` even before it opens the
input: :meth:`WorkerPool.send_rows`), so their start overlaps the main process's; the main
process is the first of the ``n`` and works too. Workers probe parts of the rows
(:meth:`Rows.probe <datarax.dataset.rows.Rows.probe>`), then write their shards: shard
``todo[i]`` by process ``i % n``, which never changes its bytes. A worker ends with its
main process, and one that dies or fails ends the write with its error.
"""

from __future__ import annotations

import bisect
import importlib
import multiprocessing
import os
import pickle
import queue
from collections.abc import Callable
from typing import Any

from datarax.dataset.rows import Rows
from datarax.dataset.write_outcome import ConversionError
from datarax.host.threads import end_with_parent

__all__ = ["WorkerPool"]

_PROBE_ROWS = 1024  # rows a probe part reads


def _probe_parts(rows: Rows, taken: Any, parts: int, owned: list[list[int]], me: int,
                 put: Callable[[int, Any], None]) -> None:
    """Probe part after part of ``rows``: first those of process ``me``'s own rows
    (``owned[me]``), then the others' not taken yet (``taken[q]``: how many of ``owned[q]``)."""
    for q in [me, *(q for q in range(len(owned)) if q != me)]:
        while True:
            with taken.get_lock():
                k = taken[q]
                taken[q] = k + 1
            if k >= len(owned[q]):
                break
            part = owned[q][k]
            put(part, rows.probe(*_part(rows.length or 0, parts, part)))


def _part(count: int, parts: int, part: int) -> tuple[int, int]:
    return part * count // parts, (part + 1) * count // parts


def _serve(tasks: Any, messages: Any, counter: Any, parent: int,
           preload: tuple[str, ...] = ()) -> None:
    """A worker process: import ``preload``, take its rows from ``tasks``, then run the
    tasks that follow until None, reporting through ``messages``."""
    end_with_parent(parent)  # killed: nobody would finish the dataset, and a resumed
    # run must not find it still writing a shard
    try:
        for name in preload:
            try:
                importlib.import_module(name)
            except ImportError:  # (the write names what is missing, as in one process)
                pass
        state = tasks.get()
        if state is None:  # ended before any rows were sent: nothing to do
            return
        rows = pickle.loads(state)
        while (task := tasks.get()) is not None:
            kind, payload = task
            if kind == "probe":
                _probe_parts(rows, counter, *payload,
                             lambda part, value: messages.put(("probed", (part, value))))
                messages.put(("idle", None))
            else:
                write, job, shards = payload
                write(job, rows, shards, lambda k, v: messages.put((k, v)))
                messages.put(("idle", None))
    except BaseException as err:  # noqa: BLE001 - reported to the parent
        # a bad record's error reads as with one process; anything else names its type
        text = str(err) if isinstance(err, ConversionError) else f"{type(err).__name__}: {err}"
        messages.put(("error", text))
        raise SystemExit(1) from None


def _died(exit_code: int) -> str:
    """What a worker that ended with ``exit_code`` and no error message says."""
    text = f"write_dataset: a worker process died (exit code {exit_code})"
    if exit_code == 1:  # _serve reports its own errors: this one ended before it ran
        text += (" before it ran: a worker first imports the script that started it, so a "
                 "script calling write_dataset / convert with workers= needs that call under "
                 "`if __name__ == '__main__':` (the worker's own error is printed above)")
    return text


class WorkerPool:
    """``workers - 1`` spawned processes holding a copy of ``rows`` (given here, or later
    to :meth:`send_rows`), this process the first; a context manager (its processes end
    with the block). Each imports ``preload`` while it waits for its rows."""

    def __init__(self, workers: int, rows: Rows | None = None,
                 preload: tuple[str, ...] = ()) -> None:
        ctx = multiprocessing.get_context("spawn")
        state = None if rows is None else self._state(rows)  # rows that do not pickle: now
        self.workers = workers
        self.messages = ctx.Queue()
        self.tasks = [ctx.Queue() for _ in range(workers - 1)]
        self.counter = ctx.Array("q", workers)  # probe parts taken, of each one's own
        self.procs = [ctx.Process(target=_serve, daemon=True,
                                  args=(t, self.messages, self.counter, os.getpid(),
                                        preload))
                      for t in self.tasks]
        self.has_rows = False
        #: what a failure's message tells the user to do (the writer replacing a dataset
        #: says its own)
        self.after_failure = ("Finished shards are kept: after fixing the cause, run it "
                              "again with resume=True (--resume).")
        for p in self.procs:
            p.start()  # small arguments: a start does not wait for the process to read them
        if state is not None:
            self._send(state)

    @staticmethod
    def _state(rows: Rows) -> bytes:
        return pickle.dumps(rows, pickle.HIGHEST_PROTOCOL)

    def _send(self, state: bytes) -> None:
        for t in self.tasks:
            t.put(state)  # sent by the queue's thread, while this process goes on
        self.has_rows = True

    def send_rows(self, rows: Rows) -> None:
        """Give the workers of a pool started without rows their copy of ``rows``."""
        if self.has_rows:
            raise RuntimeError("WorkerPool.send_rows: the workers hold their rows already.")
        self._send(self._state(rows))

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, kind: Any, *exc: Any) -> None:
        for t, p in zip(self.tasks, self.procs):
            if kind is not None or not self.has_rows:  # failed, or never used: no task wanted
                p.terminate()
            elif p.is_alive():
                t.put(None)
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
                p.join()

    def stop(self) -> None:
        """End the worker processes now (a write that failed, whose folder goes next)."""
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.join()

    def probe(self, rows: Rows, shards: int = 1, rows_per_part: int = _PROBE_ROWS) -> list[Any]:
        """``rows.probe`` over consecutive parts of ``rows``, in order; each process first
        takes the parts of the rows it will write (it may keep what it read), then helps
        with the others'."""
        count = rows.length or 0
        parts = max(1, -(-count // rows_per_part))
        owned: list[list[int]] = [[] for _ in range(self.workers)]
        starts = [s * count // shards for s in range(shards)]  # of the contiguous shards
        for part in range(parts):  # a part goes with the shard holding its first row
            shard = bisect.bisect_right(starts, _part(count, parts, part)[0]) - 1
            owned[shard % self.workers if count else 0].append(part)
        with self.counter.get_lock():
            self.counter[:] = [0] * self.workers
        for w, t in enumerate(self.tasks, 1):
            t.put(("probe", (parts, owned, w)))
        found: dict[int, Any] = {}
        _probe_parts(rows, self.counter, parts, owned, 0, found.__setitem__)
        idle: list[None] = []

        def take(kind: str, value: Any) -> None:
            found[value[0]] = value[1]

        self._collect(lambda: len(idle) == len(self.procs),
                      {"probed": take, "idle": lambda k, v: idle.append(v)})
        return [found[part] for part in range(parts)]

    def write(self, write: Callable[..., None], job: Any, rows: Rows, todo: list[int],
              report: Callable[[str, Any], None]) -> None:
        """The shards ``todo``, shard ``todo[i]`` by process ``i % workers`` (0: this one):
        ``write(job, rows, shards, report)`` in each (a module-level function)."""
        n = self.workers
        busy = [w for w in range(1, n) if todo[w::n]]
        for w in busy:
            self.tasks[w - 1].put(("write", (write, job, todo[w::n])))
        idle: list[None] = []
        handlers = {"rows": report, "done": report, "idle": lambda k, v: idle.append(v)}

        def report_here(kind: str, value: Any) -> None:
            report(kind, value)
            self._collect(lambda: False, handlers, wait=False)

        write(job, rows, todo[0::n], report_here)
        self._collect(lambda: len(idle) == len(busy), handlers)

    def _collect(self, finished: Callable[[], bool],
                 handlers: dict[str, Callable[[str, Any], None]], *, wait: bool = True) -> None:
        """Hand the workers' messages to ``handlers`` until ``finished()``; a worker's error
        or death ends the others and raises ConversionError."""
        while not finished():
            try:
                kind, value = self.messages.get(timeout=0.2) if wait else self.messages.get_nowait()
            except queue.Empty:
                # a killed worker may hold the queue's lock: the others would hang
                killed = [p.exitcode for p in self.procs if p.exitcode not in (0, None)]
                if killed:
                    self._fail(self._drain(handlers) or _died(killed[0]))
                if not wait:
                    return
                continue
            if kind == "error":
                self._fail(value)
            handlers[kind](kind, value)

    def _fail(self, error: str) -> None:
        """End the workers and raise ``error`` (a ConversionError)."""
        for p in self.procs:
            p.terminate()
        raise ConversionError(f"{error.rstrip('.')}. ({self.after_failure})")

    def _drain(self, handlers: dict[str, Callable[[str, Any], None]]) -> str | None:
        error = None
        while True:
            try:
                kind, value = self.messages.get(timeout=0.05)
            except queue.Empty:
                return error
            if kind == "error":
                error = error or value
            elif kind in handlers:
                handlers[kind](kind, value)
