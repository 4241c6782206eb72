"""``HostReader``: the one threaded reader every random-access host source reuses.

A random-access host source (ArrayRecord files, a TFDS ``data_source``, ...) owns an
object ``data`` with ``len(data)`` and ``data[i]`` (and, better, the batched
``data.__getitems__(list_of_indices)``), plus a ``decode(raw) -> dict`` function.
``HostReader`` turns that into batches of numpy arrays:

* **order** — an :class:`~datarax.sources.epoch_order.EpochOrder` maps each epoch
  position of this shard to a stable record index (sequential or Feistel-shuffled by
  ``seed + epoch``) in O(1) memory.
* **reading ahead** — a pool of ``num_threads`` threads reads *chunks* of consecutive
  positions with one batched read each (``__getitems__``), decodes every record, checks
  it against the first record's structure and stacks the fields
  (:class:`~datarax.sources.chunk_reads.ChunkReads`; with ``decode_processes`` a worker
  process does, :mod:`datarax.sources.decode_processes`); at most ``read_ahead`` chunks
  are queued or ready (bounded memory), a session's first batch read first and alone.
* **handing out** — :meth:`HostReader.next_batch` assembles exactly ``batch_size``
  records (fewer only at the end of the epoch) in epoch order and returns a
  :class:`ReadBatch`: ``columns`` (dict of stacked numpy arrays), ``indices`` (the
  stable index of each record, for per-record random keys) and ``end`` (epoch positions
  consumed so far — the only thing a state needs). Restarting with
  ``start(order, position=end, skipped=...)`` continues exactly after the last record
  handed out; read-ahead is discarded, never counted.
* **assembling ahead** — ``next_batch`` is :meth:`~HostReader.peek_batch` (assemble the
  next batch; nothing counted) then :meth:`~HostReader.commit` (the consumer has it: the
  position and skip count move past it). A pipeline's read-ahead thread peeks while the
  consumer's commits, so :attr:`position` stays what was handed out. Every
  :meth:`start` and :meth:`stop` opens a new :attr:`session`; a peek for an ended one
  raises :class:`SessionEnded`; ``stop(session)`` ends only that one (a pass's late
  release never ends the session of the pass that took over).
* **bad records** — :class:`ErrorPolicy`: ``on_error="raise"`` (default) raises
  :class:`~datarax.core.errors.RecordError` naming the file, the record index in that
  file (via the ``locate(stable_index) -> (path, index_in_file)`` callback) and the
  cause; ``on_error="skip"`` drops the record, counts it (``HostReader.skipped`` for
  this epoch, ``skipped_records()`` for the reports) and raises once the per-epoch
  budget (``max_skipped`` and/or ``max_skipped_fraction`` of the epoch) is exceeded.
  Skips are committed only when the handed-out position passes them, so a resumed
  reader (``start(..., skipped=state_count)``) skips exactly the same records and
  counts them once.
* **closing** — :meth:`HostReader.stop` ends the epoch session (pending reads cancelled,
  threads joined); :meth:`HostReader.close` also closes the reader. No thread outlives.

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

import collections
import concurrent.futures
import dataclasses
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from datarax.core.cursor import SessionEnded
from datarax.core.dtypes import NarrowingError
from datarax.core.errors import ConfigError, RecordError
from datarax.core.threads import drop_pool, run_behind_consumer
from datarax.sources.chunk_reads import Chunk, ChunkReads, Failure, chunk_positions
from datarax.sources.decode_processes import DecodeProcesses, portable
from datarax.sources.decoded_records import DecodedRecords, describe_cause, structure_hint
from datarax.sources.epoch_order import EpochOrder
from datarax.sources.skip_ledger import ErrorPolicy, SkipLedger, SkippedRecord, record_place

Decode = Callable[[Any], Mapping[str, Any]]
Locate = Callable[[int], tuple[str | None, int]]


# ------------------------------------------------------------------------ batches
@dataclasses.dataclass
class ReadBatch:
    """Records handed out by :meth:`HostReader.next_batch`: ``columns`` (field -> numpy
    array with a leading record axis), ``indices`` (the stable index of each record,
    int64) and ``end`` (epoch positions consumed after this batch, including skipped
    records before its last record)."""

    columns: dict[str, np.ndarray]
    indices: np.ndarray
    end: int

    def __len__(self) -> int:
        return int(self.indices.shape[0])


# ------------------------------------------------------------------------ reader
class HostReader:
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
        policy: the :class:`ErrorPolicy` for bad records.
        name: how errors name the source (e.g. ``"ArrayRecordSourceModule"``).
        cast_float64: decoded ``float64`` values are cast to ``float32`` (else refused
            while x64 is off). Decoded values follow :mod:`datarax.core.dtypes`: 64-bit
            ints narrowed when they fit, Python ``int``/``float`` as JAX's defaults.
        decode_batch: raw records of a chunk -> dict of stacked arrays (optional).
        decode_processes: worker processes that decode the chunks the threads fetch
            (0: the threads decode; see :mod:`datarax.sources.decode_processes`).
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
        policy: ErrorPolicy | None = None,
        name: str = "source",
        cast_float64: bool = False,
        decode_batch: Callable[[list[Any]], Mapping[str, Any]] | None = None,
        decode_processes: int = 0,
    ) -> None:
        for label, value, low in (("num_threads", num_threads, 1), ("read_ahead", read_ahead, 1),
                                  ("chunk_size", chunk_size, 1),
                                  ("decode_processes", decode_processes, 0)):
            if value is None and label not in ("num_threads", "decode_processes"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                hint = " (0: the reader threads decode)" if label == "decode_processes" else ""
                raise ConfigError(f"{name} {label} must be an int >= {low}{hint}, got {value!r}.")
        if not callable(decode):
            raise ConfigError(f"{name} decode must be callable (bytes -> dict), got {decode!r}.")
        self.data = data
        self._locate = locate
        self.num_threads = num_threads
        self.read_ahead = read_ahead if read_ahead is not None else 2 * num_threads
        self.chunk_size = chunk_size
        self._batch = 0  # the batch size chunk_size was chosen for (0: given)
        self.policy = policy or ErrorPolicy()
        self.name = name
        if decode_batch is not None and not callable(decode_batch):
            raise ConfigError(
                f"{name} decode_batch must be callable (list of raw records -> dict of "
                f"arrays with one row per record), got {decode_batch!r}."
            )
        processes = None
        if decode_processes != 0:
            processes = DecodeProcesses(decode_processes, name)  # checks the count
            portable(name, data=data, decode=decode, decode_batch=decode_batch)
            self.num_threads = max(num_threads, decode_processes)  # one to feed each
        self._records = DecodedRecords(decode, cast_float64=cast_float64)
        self._reads = ChunkReads(data, self._records, decode_batch, self.policy, processes)
        self._lock = threading.Lock()  # the ledger and the queues: both threads touch them
        self._session_lock = threading.Lock()  # a peek, start and stop: one at a time
        self._session = 0
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: collections.deque[concurrent.futures.Future[Chunk]] = collections.deque()
        self._buffer: collections.deque[Chunk] = collections.deque()
        self.ledger = SkipLedger(self.policy, name)  # bad records: pulled, then committed
        self._order: EpochOrder | None = None
        self._closed = False
        self.position = 0  # epoch positions consumed (handed out or skipped)
        self.cursor = 0  # epoch positions assembled into batches (>= position)
        self._next_read = 0  # first position not yet submitted for reading
        self._session_start = 0  # the position the open session started (or resumed) at
        self._fatal: Failure | None = None  # first bad record under on_error='raise'
        self._over_budget: RecordError | None = None  # the skip that broke the budget

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
        path, in_file = self.locate(index)
        detail = describe_cause(cause)
        when = "" if epoch is None else f" (epoch {epoch})"
        if isinstance(cause, NarrowingError):  # a setting to change, not a broken file
            hint = ("The record is otherwise readable: do as above, or construct the source "
                    "with on_error='skip' to drop such records (they are counted and reported).")
        else:  # records that differ from the first: the decode's to fix, not the file
            hint = structure_hint(cause) or (
                "Fix or regenerate the file, or construct the source with on_error='skip' "
                "to drop bad records (they are counted and reported).")
        err = RecordError(
            f"{self.name}: cannot read {self.where(index)}{when}: {detail}. {hint}",
            path=path,
            index=in_file,
        )
        err.__cause__ = cause
        return err

    def element_spec(self) -> dict[str, Any]:
        """Per-record spec from decoding the first readable record (cached)."""
        if self._records.spec is None:
            self._reads.learn_first(self.name, self.where, self.record_error)
        return dict(self._records.spec)

    # ------------------------------------------------------------- sessions
    def start(self, order: EpochOrder, position: int = 0, skipped: int = 0) -> None:
        """Begin (or resume) handing out ``order`` at epoch ``position``.

        ``skipped`` is the number of records already skipped before ``position`` in
        this epoch (from a saved state), so the skip budget continues exactly.
        """
        if self._closed:
            raise RuntimeError(f"{self.name} is closed; build a new source to read again.")
        self.stop()
        if not 0 <= position <= order.size:
            raise ValueError(f"position {position} outside the epoch's [0, {order.size}]")
        self.element_spec()
        with self._session_lock:
            self._session += 1
            self._order = order
            self.position = self.cursor = int(position)
            self.ledger.begin(order.epoch, skipped)
            self._next_read = self._session_start = int(position)

    @property
    def session(self) -> int:
        """The open reading session (changes at every :meth:`start` and :meth:`stop`)."""
        return self._session

    @property
    def active(self) -> bool:
        """True while an epoch session is open (between :meth:`start` and its end)."""
        return self._order is not None

    @property
    def epoch(self) -> int | None:
        """Epoch of the open session (None when none is open)."""
        return None if self._order is None else self._order.epoch

    def ready_chunks(self) -> int:
        """Chunks read and decoded but not yet handed out (the read-ahead cache)."""
        with self._lock:
            done = sum(1 for f in self._pending if f.done())
            return done + sum(1 for c in self._buffer if c.remaining > 0)

    def read_ahead_records(self) -> int:
        """Epoch positions read ahead of :attr:`position` and not handed out: decoded
        records waiting in finished chunks, plus those already assembled into batches
        (:attr:`cursor`) that the consumer has not taken."""
        with self._lock:
            ready = sum(c.remaining for c in self._buffer)
            for future in self._pending:
                if future.done() and not future.cancelled() and future.exception() is None:
                    ready += len(future.result().indices)
        return ready + max(self.cursor - self.position, 0)

    def ready(self, batch_size: int) -> bool:
        """Whether :meth:`peek_batch` of ``batch_size`` would return without waiting for
        a read: that many records after :attr:`cursor` are read and decoded (or a read
        failed, which it raises at once). False where no session is open."""
        if self._order is None:
            return False
        with self._lock:
            have = sum(c.remaining for c in self._buffer)
            for future in self._pending:
                if have >= batch_size or not future.done():
                    break
                if future.cancelled() or future.exception() is not None:
                    return True
                have += len(future.result().indices)
        return have >= batch_size

    def _submit(self) -> None:
        order = self._order
        assert order is not None
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.num_threads, thread_name_prefix=f"{self.name}-reader",
                initializer=run_behind_consumer,  # the loop's thread first when cores are short
            )
        size = self.chunk_size or 64
        # read_ahead counts chunks of one batch; a chunk of several batches counts for
        # them (memory stays bounded), but every thread keeps one chunk in flight
        batches = max(size // self._batch, 1) if self._batch else 1
        in_flight = max(min(self.num_threads, self.read_ahead), -(-self.read_ahead // batches))
        while len(self._pending) < in_flight and self._next_read < order.size:
            # a session's first batch (a restore's next) is read alone, then chunks grow
            done = self._next_read - self._session_start  # (1, 2, 4... batches to full size)
            first = self._batch and done == 0
            step = min(size, max(self._batch, done)) if self._batch else size
            stop = min(self._next_read + step, order.size)
            future = self._pool.submit(self._reads.read, order, self._next_read, stop)
            with self._lock:
                self._pending.append(future)
            self._next_read = stop
            if first:
                break  # the rest once it is read (_pull)

    def _pull(self) -> bool:
        """Move the next chunk from the readers into the buffer; False at epoch end."""
        self._submit()
        if not self._pending:
            return False
        chunk = self._pending[0].result()
        with self._lock:
            self._pending.popleft()
        self._submit()
        order = self._order
        assert order is not None
        with self._lock:
            for failure in chunk.failures:
                if not self.policy.skips:
                    # Records before the bad one are still handed out; the batch that
                    # would contain it raises.
                    self._fatal = failure
                    self._buffer.append(chunk)
                    return False
                record = self._skipped_record(order.epoch, failure)
                try:
                    self.ledger.pull(record, epoch_size=order.size)
                except RecordError as err:
                    # As under 'raise': the records before it are still handed out; the
                    # batch that would pass it raises (not the read ahead of the loop).
                    self._over_budget = err
                    self._buffer.append(chunk.before(failure.position))
                    return False
            self._buffer.append(chunk)
        return True

    def _skipped_record(self, epoch: int, failure: Failure) -> SkippedRecord:
        path, in_file = self.locate(failure.index)
        cause = failure.cause
        text = describe_cause(cause)
        return SkippedRecord(epoch, failure.position, failure.index, path, in_file, text)

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

    @property
    def skipped(self) -> int:
        """Records skipped at positions below :attr:`position` this epoch."""
        return self.ledger.skipped

    def next_batch(self, batch_size: int) -> ReadBatch | None:
        """The next ``batch_size`` records (fewer at the epoch's end), or None when done
        (the session then ends): :meth:`peek_batch` and :meth:`commit` in one."""
        if self._order is None:
            raise RuntimeError(f"{self.name}: call start(order) before next_batch().")
        if self.cursor != self.position:  # batches were peeked and not handed out
            self.start(self._order, self.position, self.skipped)
        read = self.peek_batch(batch_size)
        if read is None:
            self.finish()
            return None
        self.commit(read.end)
        return read

    def finish(self) -> None:
        """The consumer reached the end of the epoch: commit it and end the session."""
        if self._order is not None:
            self.commit(self._order.size)
        self.stop()

    def peek_batch(self, batch_size: int, session: int | None = None) -> ReadBatch | None:
        """The ``batch_size`` records after the last ones assembled (fewer at the epoch's
        end), or None at the end; moves :attr:`cursor`, not :attr:`position`.
        ``session``: raise :class:`SessionEnded` unless it is still the open one."""
        with self._session_lock:
            if session is not None and session != self._session:
                raise SessionEnded(f"{self.name}: the reading session ended (the source moved).")
            if self._order is None:
                raise RuntimeError(f"{self.name}: call start(order) before next_batch().")
            if self.chunk_size is None:
                self._batch = int(batch_size)
                self.chunk_size = chunk_positions(self._batch, self._records.spec)
            return self._assemble(int(batch_size))

    def _assemble(self, batch_size: int) -> ReadBatch | None:
        order = self._order
        assert order is not None
        buffered = sum(c.remaining for c in self._buffer)
        while (buffered < batch_size and self._fatal is None and self._over_budget is None
               and self._pull()):
            buffered += self._buffer[-1].remaining
        buffered = sum(c.remaining for c in self._buffer)
        if self._fatal is not None and buffered < batch_size:
            fatal = self._fatal
            raise self.record_error(fatal.index, fatal.cause, epoch=order.epoch)
        if self._over_budget is not None and buffered < batch_size:
            raise self._over_budget
        if buffered == 0:
            self.cursor = order.size
            return None
        # Fast path: one whole chunk is exactly the batch.
        first = self._buffer[0]
        if first.offset == 0 and first.remaining == batch_size:
            with self._lock:
                self._buffer.popleft()
            self.cursor = int(first.positions[-1]) + 1
            return ReadBatch(first.columns, first.indices, self.cursor)
        parts: list[tuple[Chunk, int, int]] = []
        need = batch_size
        with self._lock:
            while need > 0 and self._buffer:
                chunk = self._buffer[0]
                take = min(need, chunk.remaining)
                if take > 0:
                    parts.append((chunk, chunk.offset, chunk.offset + take))
                    chunk.offset += take
                    need -= take
                if chunk.remaining == 0:
                    self._buffer.popleft()
        last_chunk, _, last_stop = parts[-1]
        self.cursor = int(last_chunk.positions[last_stop - 1]) + 1
        if len(parts) == 1:
            chunk, a, b = parts[0]
            columns = {k: v[a:b] for k, v in chunk.columns.items()}
            indices = chunk.indices[a:b]
        else:
            columns = {
                k: np.concatenate([c.columns[k][a:b] for c, a, b in parts]) for k in parts[0][0].columns
            }
            indices = np.concatenate([c.indices[a:b] for c, a, b in parts])
        return ReadBatch(columns, indices, self.cursor)

    def skipped_records(self) -> list[SkippedRecord]:
        """Reports of records skipped so far (first ``MAX_REPORTS``), in order."""
        return list(self.ledger.reports)

    @property
    def skipped_total(self) -> int:
        """All records skipped since this reader was built (reports may be capped)."""
        return self.ledger.total

    # -------------------------------------------------------------- closing
    def stop(self, session: int | None = None) -> None:
        """End the epoch session (``session``: only while it is the open one): cancel
        read-ahead, join the reader threads (after a peek in progress on another thread)."""
        if session not in (None, self._session):
            return  # ended already (sessions only grow): no lock, a collection may ask mid-read
        with self._session_lock:
            if session not in (None, self._session):
                return
            self._session += 1
            for future in self._pending:
                future.cancel()
            pool, self._pool = self._pool, None
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
            with self._lock:
                self._pending.clear()
                self._buffer.clear()
                self.ledger.drop_pending()
            self._fatal = self._over_budget = None
            self._order = None
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

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        drop_pool(getattr(self, "_pool", None))

