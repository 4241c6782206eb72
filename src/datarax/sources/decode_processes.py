"""``DecodeProcesses``: chunks of records read and decoded in worker processes.

A Python ``decode`` on threads holds the interpreter lock; with ``decode_processes=n``
each reader thread hands its chunk to one of ``n`` ``spawn``-ed workers, which read,
decode, check and stack it as a thread would
(:meth:`~datarax.sources.chunk_reads.ChunkReads.read`). Only the arrays come back: a
column of 1 MiB or more as a file in ``/dev/shm`` read straight into the batch, smaller
ones pickled. At most ``n`` chunks are in the pool, so at exit only those being decoded
finish. Invariant: order, position, read-ahead bound and bad-record decisions stay in
the source's process (a worker reports failures), so resume and skips are those of
threads. A worker imports neither JAX nor Flax; docs/sources/array_record.md says what
travels to it and why a script needs a ``__main__`` guard.

Example:
    >>> import numpy as np
    >>> from datarax.sources.chunk_reads import ChunkReads
    >>> from datarax.sources.decoded_records import DecodedRecords
    >>> from datarax.sources.epoch_order import EpochOrder
    >>> from datarax.sources.error_policy import ErrorPolicy
    >>> records = DecodedRecords(lambda raw: {"x": np.int32(raw) * 2})
    >>> _ = records.learn(0, 0)
    >>> reads = ChunkReads(list(range(10)), records, None, ErrorPolicy(),
    ...                    processes=DecodeProcesses(2, "example"))
    >>> reads.read(EpochOrder(length=10, seed=None, epoch=0), 2, 6).columns["x"].tolist()
    [4, 6, 8, 10]
    >>> reads.close()
"""

from __future__ import annotations

import concurrent.futures
import glob
import itertools
import os
import pickle
import sys
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

# host-side pieces only: a worker process imports this module, and neither JAX nor Flax
from datarax.errors import ConfigError, DataraxError
from datarax.host.arrays import fresh_aligned, seal
from datarax.host.counts import check_count
from datarax.host.dtypes import follow_x64, x64_enabled
from datarax.host.threads import drop_pool, end_with_parent, kept_across_fork

if TYPE_CHECKING:
    from datarax.sources.chunk_reads import Chunk, ChunkReads
    from datarax.sources.epoch_order import EpochOrder

__all__ = ["DecodeProcesses", "SharedColumn", "in_decode_worker", "portable"]

#: where decoded columns come back through shared memory (absent: they are pickled)
SHARED_DIR = "/dev/shm"
#: columns of at least this many bytes come back through shared memory
SHARED_MIN_BYTES = 1 << 20


class SharedColumn(NamedTuple):
    """A decoded column a worker left in the shared-memory file ``path``."""

    path: str
    shape: tuple[int, ...]
    dtype: str


def _to_shared(column: Any, prefix: str) -> Any:
    """``column`` written to a new file ``prefix...`` in shared memory (in a worker), or
    ``column`` itself where it is small or not plain numbers (it is pickled)."""
    if (type(column) is not np.ndarray or column.dtype.hasobject
            or column.nbytes < SHARED_MIN_BYTES):
        return column
    path = f"{prefix}{os.getpid()}-{next(_NAMES)}"
    try:
        with open(path, "xb", buffering=0) as file:
            _write_all(file, np.ascontiguousarray(column))
    except OSError:  # shared memory full or gone: through the pipe instead
        _remove(path)
        return column
    return SharedColumn(path, tuple(column.shape), column.dtype.str)


def _write_all(file: Any, column: np.ndarray) -> None:
    view = memoryview(column.reshape(-1).view(np.uint8))
    while view:
        view = view[file.write(view):]


def _from_shared(shared: SharedColumn) -> np.ndarray:
    """The column in ``shared`` read into a new batch array (the file removed)."""
    out = fresh_aligned(shared.shape, np.dtype(shared.dtype))
    try:
        with open(shared.path, "rb", buffering=0) as file:
            view, done = memoryview(out.reshape(-1).view(np.uint8)), 0
            while done < len(view):
                got = file.readinto(view[done:])
                if not got:
                    raise DataraxError(f"a decode worker's column {shared.path} ended after "
                                       f"{done} of {len(view)} bytes.")
                done += got
    finally:
        _remove(shared.path)
    return seal(out)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


_NAMES = itertools.count()


def portable(name: str, **functions: Callable[..., Any] | None) -> None:
    """Refuse, naming it, a function that cannot travel to a worker process."""
    import cloudpickle  # a core dependency of datarax

    for label, fn in functions.items():
        if fn is None:
            continue
        try:
            cloudpickle.dumps(fn)
        except Exception as err:  # noqa: BLE001 - any pickling failure, reported
            raise ConfigError(
                f"{name}: decode_processes needs {label} to be sent to worker processes, "
                f"but it cannot be pickled ({type(err).__name__}: {err}). Use a function "
                "that does not hold open files, locks or a source, or decode_processes=0 "
                "(decode on reader threads)."
            ) from err


class DecodeProcesses:
    """``count`` (>= 1) worker processes decoding chunks for one :class:`ChunkReads`;
    errors name the source ``name``."""

    def __init__(self, count: int, name: str) -> None:
        self.count = check_count(count, f"{name} decode_processes", 1)
        self.name = name
        self._forget_workers()
        _LIVE.add(self)

    def _forget_workers(self) -> None:
        """No workers yet (also in a child ``os.fork()`` made: the workers, the pool's
        threads and whatever locks they held are the parent's, so the child's first read
        starts workers of its own rather than waiting on the parent's forever)."""
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        # chunks in the pool: no more than workers (at exit the pool finishes all it holds)
        self._slots = threading.BoundedSemaphore(self.count)
        # this source's files in shared memory (a worker that dies mid-chunk leaves one)
        self._shared = (os.path.join(SHARED_DIR, f"datarax-{os.getpid()}-{id(self):x}-")
                        if os.path.isdir(SHARED_DIR) else None)

    def start(self, reads: ChunkReads) -> concurrent.futures.ProcessPoolExecutor:
        """Start the workers (if not running) for ``reads``, whose decoder has learned
        the first record's structure; returns at once, while they start."""
        with self._lock:
            if self._pool is None:
                import multiprocessing  # here: a source that decodes on threads needs none

                import cloudpickle

                reader = cloudpickle.dumps(
                    (reads.data, reads.records, reads.decode_batch, reads.policy))
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    max_workers=self.count, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_install, initargs=(reader, os.getpid(), x64_enabled()),
                )
                for _ in range(self.count):  # the pool starts one worker per task waiting
                    self._pool.submit(_ready)
            return self._pool

    def read(self, reads: ChunkReads, order: EpochOrder, start: int, stop: int) -> Chunk:
        """``reads.read(order, start, stop)``, run by a worker process."""
        from concurrent.futures.process import BrokenProcessPool  # loaded by start()

        pool = self.start(reads)
        indices = order.indices(start, stop)  # the order stays here: workers get indices
        try:
            with self._slots:
                chunk = pool.submit(_read, indices, order.epoch, start, self._shared).result()
        except BrokenProcessPool as err:
            with self._lock:
                if self._pool is pool:
                    self._pool = None  # the next chunk starts new workers
            pool.shutdown(wait=False, cancel_futures=True)
            raise DataraxError(
                f"{self.name}: a decode worker process ended while reading records at "
                f"epoch positions {start}..{stop - 1} ({err}): it was killed (out of "
                "memory?), crashed inside decode, or could not start (its error is printed "
                "above; a script that builds the pipeline at its top level needs "
                "`if __name__ == \"__main__\":`, since worker processes import the script). "
                "Run with decode_processes=0 to decode on threads of this process and see "
                "a failing record's error."
            ) from err
        chunk.columns = {key: _from_shared(value) if isinstance(value, SharedColumn) else value
                         for key, value in chunk.columns.items()}
        for failure in chunk.failures:
            if isinstance(failure.cause, SentError):
                failure.cause = failure.cause.rebuild()
        return chunk

    def close(self) -> None:
        """End the worker processes (after the chunks they are decoding)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if self._shared is not None:  # left by a worker that ended mid-chunk
            for path in glob.glob(glob.escape(self._shared) + "*"):
                _remove(path)

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        drop_pool(getattr(self, "_pool", None))


#: every DecodeProcesses of this process, for a child of os.fork() to forget their workers
_LIVE: weakref.WeakSet[DecodeProcesses] = kept_across_fork("_forget_workers")


# ------------------------------------------------------------ in the worker process
_READS: ChunkReads | None = None


def in_decode_worker() -> bool:
    """Whether this process is a decode worker (its siblings hold the other cores)."""
    return _READS is not None


def _install(reader: bytes, parent: int, x64: bool) -> None:
    """Worker initializer: the source's data, decoder (its structure learned), policy;
    the parent's ``jax_enable_x64`` (``x64``, which the 64-bit policy follows here
    without importing JAX); and a thread that ends this worker once ``parent`` (the
    source's process) is gone."""
    global _READS
    from datarax.sources.chunk_reads import ChunkReads

    follow_x64(x64)
    end_with_parent(parent)

    data, records, decode_batch, policy = pickle.loads(reader)
    _READS = ChunkReads(data, records, decode_batch, policy)


def _ready() -> None:
    """A task that makes the pool start a worker (they start one per task waiting)."""


def _read(indices: np.ndarray, epoch: int, start: int, shared: str | None) -> Chunk:
    assert _READS is not None, "worker not initialized"
    chunk = _READS.read_indices(indices, epoch, start)
    if shared is not None:
        chunk.columns = {key: _to_shared(value, shared) for key, value in chunk.columns.items()}
    for failure in chunk.failures:
        failure.cause = _sendable(failure.cause)
    return chunk


class SentError(NamedTuple):
    """An error of a type named after a module this worker has not loaded (datarax's own
    errors name ``datarax.core.errors``, whose package imports JAX): sent as its type's
    name, args and attributes, and made again in the source's process."""

    module: str
    name: str
    args: tuple[Any, ...]
    state: dict[str, Any]
    text: str

    def rebuild(self) -> BaseException:
        """The error again (a ``RuntimeError`` with its type and message where its type
        cannot be found here)."""
        import importlib

        try:
            kind = getattr(importlib.import_module(self.module), self.name)
            error = kind.__new__(kind)
            error.args = self.args
            error.__dict__.update(self.state)
            return error
        except Exception:  # noqa: BLE001 - the type and message still arrive
            return RuntimeError(f"{self.name}: {self.text}")


def _sendable(cause: BaseException) -> BaseException | SentError:
    """``cause``; a :class:`SentError` where pickling it would import the module its type
    names (JAX, for datarax's own errors); or a ``RuntimeError`` with its type and message
    where it would not pickle back (or not unpickle: an exception whose ``__init__`` wants
    other args)."""
    kind = type(cause)
    if kind.__module__.startswith("datarax.") and kind.__module__ not in sys.modules:
        try:
            sent = SentError(kind.__module__, kind.__qualname__, cause.args, dict(vars(cause)),
                             str(cause))
            pickle.dumps(sent)
            return sent
        except Exception:  # noqa: BLE001 - sent as text below
            return RuntimeError(f"{kind.__name__}: {cause}")
    try:
        pickle.loads(pickle.dumps(cause))
        return cause
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(cause).__name__}: {cause}")
