"""``HostReader``: the one threaded reader every random-access host source reuses.

It turns a ``data`` object (``len``, ``data[i]``, ideally the batched
``data.__getitems__(indices)``) and a ``decode(raw) -> dict`` into batches of numpy
arrays: ``num_threads`` threads read chunks of an
:class:`~datarax.sources.epoch_order.EpochOrder` (:mod:`~datarax.sources.chunk_reads`),
at most ``read_ahead`` chunks ahead, and go on with the next epoch's
(:func:`following_order`) once an epoch's reads are done; :meth:`HostReader.next_batch`
(peek, then commit) hands out exactly ``batch_size`` records as a :class:`ReadBatch`.
The position is what was handed out, never what was read ahead, and skips are
committed only as it passes them (:mod:`~datarax.sources.skip_ledger`), so
``start(order, position, skipped)`` resumes exactly. The engine (sessions, threads,
ordered chunks) is :mod:`datarax.sources.read_ahead`; docs/architecture.md, "The host
path", tells the whole.

Example:
    >>> import numpy as np
    >>> data = [np.int32(i).tobytes() for i in range(10)]
    >>> reader = HostReader(data, lambda b: {"x": np.frombuffer(b, np.int32)[0]})
    >>> reader.start(EpochOrder(length=10, seed=None, epoch=0))
    >>> b = reader.next_batch(4); b.columns["x"].tolist(), b.indices.tolist(), b.end
    ([0, 1, 2, 3], [0, 1, 2, 3], 4)
    >>> reader.start(EpochOrder(length=10, seed=None, epoch=0), position=b.end)
    >>> reader.next_batch(100).columns["x"].tolist()
    [4, 5, 6, 7, 8, 9]
    >>> reader.next_batch(100) is None
    True
    >>> reader.close()
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Callable, Mapping
from typing import Any

from datarax.core.config import check_count
from datarax.core.errors import ConfigError, RecordError
from datarax.sources.chunk_reads import Chunk, ChunkReads, chunk_positions
from datarax.sources.decode_processes import DecodeProcesses, portable
from datarax.sources.decoded_records import DecodedRecords, describe_cause
from datarax.sources.epoch_order import EpochOrder
from datarax.sources.read_ahead import Chunks, ReadBatch, Sessions, Workers
from datarax.sources.skip_ledger import (
    SKIP_ADVICE, ErrorPolicy, LedgerReads, SkipLedger, SkippedRecord, bad_record_error,
    out_of_files, record_place)

Decode = Callable[[Any], Mapping[str, Any]]
Locate = Callable[[int], tuple[str | None, int]]


__all__ = ["EpochOrder", "ErrorPolicy", "HostReader", "ReadBatch", "following_order"]


def following_order(order: EpochOrder) -> EpochOrder | None:
    """The order of the epoch after ``order`` as a source serves it: the same shard (and
    windows), ``epoch + 1``; None after a re-split share's pass (its next is a block).

    >>> following_order(EpochOrder(length=8, seed=3, epoch=1, lo=2, hi=6))
    EpochOrder(length=8, seed=3, epoch=2, lo=2, hi=6, runs=None, shard_window=None, block_bytes=None)
    """
    if order.runs is not None:
        return None
    return dataclasses.replace(order, epoch=order.epoch + 1)


@dataclasses.dataclass
class _NextEpoch:
    """The reads of the epoch after the open session's: submitted once the open one's are
    all done, so its chunks are the last ``chunks`` of the workers' queue."""

    order: EpochOrder
    read: int = 0  # first position not yet submitted
    chunks: int = 0  # its chunks in the workers' queue


# ------------------------------------------------------------------------ reader
class HostReader(LedgerReads):
    """Reads, decodes and batches records of a random-access object on host threads.

    Args:
        data: ``len(data)``, ``data[i]`` and ideally ``data.__getitems__(indices)``.
        decode: raw record -> dict of arrays (numbers / numpy arrays / strings).
        locate: stable index -> ``(path, index_in_file)`` for error messages
            (default: ``(None, index)``).
        num_threads: reader threads (>= 1).
        read_ahead: batches read and decoded ahead of the consumer (>= 1; default
            ``2 * num_threads``), and at least one chunk per thread.
        chunk_size: positions per batched read (default: whole batches of the first
            requested ``batch_size``, see
            :func:`~datarax.sources.chunk_reads.chunk_positions`).
        max_chunk: the default ``chunk_size`` at most this many positions (whole batches,
            at least one; :func:`~datarax.sources.array_record_remote.window_chunk`).
        policy: the :class:`ErrorPolicy` for bad records.
        name: how errors name the source (e.g. ``"ArrayRecordSourceModule"``).
        cast_float64: decoded ``float64`` values are cast to ``float32`` (else refused
            while x64 is off; :mod:`datarax.core.dtypes`).
        decode_batch: raw records of a chunk -> dict of stacked arrays (optional).
        decode_processes: worker processes that decode the chunks the threads fetch
            (0: the threads decode; see :mod:`datarax.sources.decode_processes`).
        read_next_epoch: once an epoch's reads are all done, read the next
            epoch's first chunks (:func:`following_order`) within ``read_ahead``; False: a
            source whose reads follow a plan made at each epoch's start (remote files).
        learn_in_first_read: the structure learned from record 0 read in a session's first
            read (no round trip of its own), not at :meth:`start`, without processes.
        skip_advice: how bad-record messages say to skip such records (a source whose
            config has no ``on_error``: :func:`~datarax.sources.skip_ledger.add_on_error_advice`).
    """

    def __init__(
        self,
        data: Any,
        decode: Decode,
        *,
        locate: Locate | None = None,
        num_threads: int = 4,
        read_ahead: int | None = None,
        chunk_size: int | None = None,
        max_chunk: int | None = None,
        policy: ErrorPolicy | None = None,
        name: str = "source",
        cast_float64: bool = False,
        decode_batch: Callable[[list[Any]], Mapping[str, Any]] | None = None,
        decode_processes: int = 0,
        read_next_epoch: bool = True,
        learn_in_first_read: bool = False,
        skip_advice: str = SKIP_ADVICE,
    ) -> None:
        num_threads = check_count(num_threads, f"{name} num_threads", 1)  # NumPy ints too
        read_ahead, chunk_size, max_chunk = (
            None if v is None else check_count(v, f"{name} {k}", 1) for k, v in (
                ("read_ahead", read_ahead), ("chunk_size", chunk_size), ("max_chunk", max_chunk)))
        decode_processes = check_count(decode_processes, f"{name} decode_processes", 0,
                                       " (0: the reader threads decode)")
        if not callable(decode):
            raise ConfigError(f"{name} decode must be callable (bytes -> dict), got {decode!r}.")
        self.data = data
        self._locate = locate
        self.read_ahead = read_ahead if read_ahead is not None else 2 * num_threads
        self.chunk_size = chunk_size
        self.max_chunk = max_chunk
        self._batch = 0  # the batch size chunk_size was chosen for (0: given)
        self.policy = policy or ErrorPolicy()
        self.name = name
        self.skip_advice = skip_advice  # how bad-record messages say to skip them
        if decode_batch is not None and not callable(decode_batch):
            raise ConfigError(f"{name} decode_batch must be callable (list of raw records -> dict "
                              f"of arrays with one row per record), got {decode_batch!r}.")
        processes = None
        if decode_processes != 0:
            processes = DecodeProcesses(decode_processes, name)  # checks the count
            portable(name, data=data, decode=decode, decode_batch=decode_batch)
            num_threads = max(num_threads, decode_processes)  # one to feed each
        self.num_threads = num_threads
        self._records = DecodedRecords(decode, cast_float64=cast_float64)
        self._reads = ChunkReads(data, self._records, decode_batch, self.policy, processes)
        self._lock = threading.Lock()  # the ledger: both threads touch it
        self.sessions = Sessions(name)  # a peek, start and stop: one at a time
        self._workers = Workers(num_threads, name)
        self._chunks = Chunks()
        self.ledger = SkipLedger(self.policy, name)  # bad records: pulled, then committed
        self._order: EpochOrder | None = None
        self.read_next_epoch = bool(read_next_epoch)
        self.learn_in_first_read = bool(learn_in_first_read) and processes is None
        # the next epoch's reads: while a session is open, those after it; while none is,
        # those a session handed out to its end left running (for start() at its position 0)
        self._next: _NextEpoch | None = None
        self._closed = False
        self.position = 0  # epoch positions consumed (handed out or skipped)
        self.cursor = 0  # epoch positions assembled into batches (>= position)
        self._next_read = 0  # first position not yet submitted for reading
        self._session_start = 0  # the position the open session started (or resumed) at

    # ------------------------------------------------------------ description
    def __len__(self) -> int:
        return len(self.data)

    def locate(self, index: int) -> tuple[str | None, int]:
        """``(path, index_in_file)`` of stable record ``index``."""
        if self._locate is None:
            return None, int(index)
        return self._locate(int(index))

    def where(self, index: int) -> str:
        """Human-readable location of stable record ``index``."""
        return record_place(*self.locate(index))

    def record_error(self, index: int, cause: BaseException, *, epoch: int | None = None) -> RecordError:
        """The :class:`RecordError` for stable record ``index`` failing with ``cause``."""
        return bad_record_error(self.name, self.locate(index), cause, skipping=self.policy.skips,
                                epoch=epoch, skip_advice=self.skip_advice)

    def element_spec(self) -> dict[str, Any]:
        """Per-record spec from decoding the first readable record (cached)."""
        if self._records.spec is None:
            self._reads.learn_first(self.name, self.where, self.record_error)
        return dict(self._records.spec)

    def known_spec(self) -> dict[str, Any] | None:
        """The per-record spec if a record was decoded already, else None (reads nothing)."""
        spec = self._records.spec
        return None if spec is None else dict(spec)

    def check_decoded(self, record: Mapping[str, Any]) -> Mapping[str, Any]:
        """Check a decoded record against the structure a pass serves (the first readable
        record's, learned here if not yet): a record a pass would refuse raises."""
        self.element_spec()
        return self._records.check_decoded(record)

    # ------------------------------------------------------------- sessions
    def start(self, order: EpochOrder, position: int = 0, skipped: int = 0) -> None:
        """Begin (or resume) handing out ``order`` at epoch ``position``, ``skipped``
        records skipped before it this epoch (from a saved state)."""
        if self._closed:
            raise RuntimeError(f"{self.name} is closed; build a new source to read again.")
        with self.sessions.lock:
            kept = self._next if self._order is None and position == 0 else None
            if kept is None or kept.order != order:
                kept = None
                self.stop()  # the next epoch's reads too: they are not this start's
            if not 0 <= position <= order.size:
                raise ValueError(f"position {position} outside the epoch's [0, {order.size}]")
            if not self.learn_in_first_read:
                self.element_spec()
            self.sessions.begin()
            self._order = order
            self.position = self.cursor = int(position)
            self.ledger.begin(order.epoch, skipped)
            self._next_read = self._session_start = int(position)
            if kept is not None:  # its chunks, queued or read, are this session's first
                self._next_read = kept.read
            following = following_order(order) if self.read_next_epoch else None
            self._next = None if following is None else _NextEpoch(following)

    @property
    def session(self) -> int:
        """The open reading session (changes at every :meth:`start` and :meth:`stop`)."""
        return self.sessions.current

    @property
    def active(self) -> bool:
        """True while an epoch session is open (between :meth:`start` and its end)."""
        return self._order is not None

    @property
    def epoch(self) -> int | None:
        """Epoch of the open session (None when none is open)."""
        return None if self._order is None else self._order.epoch

    def read_ahead_records(self) -> int:
        """Epoch positions read ahead of :attr:`position` and not handed out: decoded records
        in finished chunks, plus those assembled into batches (:attr:`cursor`) not taken."""
        ready = self._chunks.held + sum(len(c.indices) for c in self._finished()
                                        if isinstance(c, Chunk))
        return ready + max(self.cursor - self.position, 0)

    def ready(self, batch_size: int) -> bool:
        """Whether :meth:`peek_batch` of ``batch_size`` would return without waiting for
        a read: that many records after :attr:`cursor` are read and decoded (or a read
        failed, which it raises at once). False where no session is open."""
        if self._order is None:
            return False
        have = self._chunks.held
        if have >= batch_size or self._chunks.failure is not None:
            return True
        for chunk in self._finished():
            if not isinstance(chunk, Chunk):  # a read that failed: raised at once
                return True
            have += len(chunk.indices)
            if have >= batch_size:
                return True
        return False

    def _queued(self) -> int:
        """The open session's chunks in the workers' queue (the next epoch's after them)."""
        return len(self._workers) - (self._next.chunks if self._next is not None else 0)

    def _finished(self) -> Any:
        """The open session's finished chunks at the head of the queue, in order."""
        return itertools.islice(self._workers.finished(), max(self._queued(), 0))

    def _submit(self) -> None:
        order = self._order
        assert order is not None
        if self._records.fields is None:  # the first read learns it (learn_in_first_read)
            at, size = self._next_read, self.chunk_size or self._batch or 64
            if at == self._session_start < order.size:
                self._next_read = min(at + size, order.size)
                self._workers.submit(self._reads.read_learning, order, at, self._next_read,
                                     self.name, self.where, self.record_error)
            return
        if self.chunk_size is None and self._batch:  # the first batch's size, the structure
            self.chunk_size = chunk_positions(self._batch, self._records.spec, self.max_chunk)
        size = self.chunk_size or 64
        # read_ahead counts chunks of one batch; a chunk of several batches counts for
        # them (memory stays bounded), but every thread keeps one chunk in flight
        batches = max(size // self._batch, 1) if self._batch else 1
        in_flight = max(min(self.num_threads, self.read_ahead), -(-self.read_ahead // batches))
        following = self._next
        while len(self._workers) < in_flight:
            if self._next_read >= order.size:  # this epoch's reads all done: the next's
                if (following is None or following.read >= following.order.size
                        or sum(1 for _ in self._finished()) < self._queued()):
                    break  # (none, or after this epoch's: a cache they fill serves it)
                stop = min(following.read + size, following.order.size)
                self._workers.submit(self._reads.read, following.order, following.read, stop)
                following.read = stop
                following.chunks += 1
                continue
            # a session's first batch (a restore's next) is read alone, then chunks grow
            done = self._next_read - self._session_start  # (1, 2, 4... batches to full size)
            first = self._batch and done == 0
            step = min(size, max(self._batch, done)) if self._batch else size
            stop = min(self._next_read + step, order.size)
            self._workers.submit(self._reads.read, order, self._next_read, stop)
            self._next_read = stop
            if first:
                break  # the rest once it is read (_pull)

    def _pull(self) -> bool:
        """Move the next chunk from the readers into the buffer; False at epoch end."""
        self._submit()
        if self._queued() <= 0:
            return False
        try:
            chunk: Chunk = self._workers.take()
        except BaseException:  # a read's error, or its Ctrl-C (raised again at every take)
            self.stop()  # its failed read stays queued: the next read starts at the position
            raise
        self._submit()
        order = self._order
        assert order is not None
        error: RecordError | None = None
        with self._lock:
            for failure in chunk.failures:
                # the chunk stops before its bad record; out of file descriptors is the
                # process's fault, never the record's: raised there, not skipped
                if not self.policy.skips or out_of_files(failure.cause):
                    error = self.record_error(failure.index, failure.cause, epoch=order.epoch)
                    chunk = chunk.before(failure.position)
                    break
                path, in_file = self.locate(failure.index)
                record = SkippedRecord(order.epoch, failure.position, failure.index, path,
                                       in_file, describe_cause(failure.cause))
                try:
                    self.ledger.pull(record, epoch_size=order.size)
                except RecordError as err:  # the skip that broke the budget
                    error, chunk = err, chunk.before(failure.position)
                    break
        # Records before a bad one are still handed out; the batch that would pass it
        # raises (not the read ahead of the loop).
        self._chunks.append(chunk.columns, chunk.indices, chunk.positions)
        if error is not None:
            self._chunks.fail(error)
        return error is None

    def commit(self, position: int | None) -> None:
        """The consumer has received every position below ``position`` (at most
        :attr:`cursor`): the bad records there count as skipped. None: the epoch's end
        (:meth:`finish`)."""
        if position is None:
            self.finish()
            return
        with self._lock:
            self.ledger.commit(position)
            self.position = int(position)

    def next_batch(self, batch_size: int) -> ReadBatch | None:
        """The ``batch_size`` records after :attr:`position` (fewer at the epoch's end),
        or None when done: :meth:`peek_batch` and :meth:`commit` in one step under the
        sessions' lock, in a new session (a pipeline's read-ahead session ends: its next
        peek raises ``SessionEnded``)."""
        with self.sessions.lock:  # no peek of another thread between the check and the read
            if self._order is None:
                raise RuntimeError(f"{self.name}: call start(order) before next_batch().")
            if self.cursor != self.position:  # batches were peeked and not handed out
                self.start(self._order, self.position, self.skipped)
            else:
                self.sessions.begin()  # the chunks read ahead stand at the position
            read = self.peek_batch(batch_size)
            if read is None:
                self.finish()
                return None
            self.commit(read.end)
            return read

    def finish(self) -> None:
        """The consumer reached the end of the epoch: commit it and end the session; the
        next epoch's reads go on, for :meth:`start` of it at position 0 (:meth:`stop` or
        another start drops them)."""
        if self._order is not None:
            self.commit(self._order.size)
        self.sessions.end(None, self._hand_over)

    def _hand_over(self) -> None:
        following = self._next
        if following is None or following.chunks == 0 or self._queued() != 0:
            self._release()  # nothing of the next epoch under way (or this one's left)
            return
        with self._lock:
            self._chunks.clear()
            self.ledger.drop_pending()
        self._order = None
        self.cursor = self.position

    def peek_batch(self, batch_size: int, session: int | None = None) -> ReadBatch | None:
        """The ``batch_size`` records after the last ones assembled (fewer at the epoch's
        end), or None at the end; moves :attr:`cursor`, not :attr:`position`.
        ``session``: raise :class:`SessionEnded` unless it is still the open one."""
        with self.sessions.lock:
            self.sessions.check(session)
            if self._order is None:
                raise RuntimeError(f"{self.name}: call start(order) before next_batch().")
            if self.chunk_size is None and not self._batch:
                self._batch = int(batch_size)  # chunks of it, once the structure is known
            return self._assemble(int(batch_size))

    def _assemble(self, batch_size: int) -> ReadBatch | None:
        order = self._order
        assert order is not None
        chunks = self._chunks
        while chunks.held < batch_size and chunks.failure is None and self._pull():
            pass
        read = chunks.take(batch_size)
        self.cursor = order.size if read is None else read.end
        return read

    # -------------------------------------------------------------- closing
    def stop(self, session: int | None = None) -> None:
        """End the epoch session (``session``: only while it is the open one): cancel
        read-ahead (the next epoch's too), join the reader threads (after a peek in
        progress on another thread)."""
        self.sessions.end(session, self._release)

    def moved_to(self, epoch: int, position: int) -> None:
        """The consumer's position was set from outside to ``position`` of pass ``epoch``:
        end the open session (its read-ahead belongs to the old position) — unless none
        is open and the next epoch's reads left running are that pass's start, which
        :meth:`start` then takes over."""
        with self.sessions.lock:
            kept = self._next if self._order is None else None
            if kept is None or position != 0 or kept.order.epoch != epoch:
                self.stop()

    def _release(self) -> None:
        self._workers.stop()
        with self._lock:
            self._chunks.clear()
            self.ledger.drop_pending()
        self._order = None
        self._next = None
        self.cursor = self.position

    def close(self) -> None:
        """Stop, end the decode processes (if any) and refuse further reads."""
        self.stop()
        self._reads.close()
        self._closed = True

    def __enter__(self) -> HostReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
