"""The open pass of an ``HFStreamingSource``: chunks read (shuffled through a buffer
when asked), sharded, converted, and the bad-record policy (skip, count, report,
budget) applied to them. Sessions, the converted records waiting in order and the
cursor are the read-ahead engine's (:mod:`datarax.sources.read_ahead`)."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from datarax.core.data_source import DataSourceModule
from datarax.core.dtypes import Records, record_number
from datarax.core.errors import DataraxError, RecordError
from datarax.core.position import past_the_end
from datarax.core.spec import describe_field, field_spec
from datarax.host.counts import count_words
from datarax.sources.hf.arrow import table_to_columns
from datarax.sources.hf.config import HFConfig
from datarax.sources.hf.locate import unreadable_cause
from datarax.sources.read_ahead import Chunks, ReadBatch, Sessions
from datarax.sources.skip_ledger import ErrorPolicy, LedgerReads, SkipLedger, SkippedRecord


class StreamReader(LedgerReads):
    """The open pass of ``source`` (its ``config``, ``shard`` and ``element_spec()``):
    Arrow chunks, sharded in whole rounds as every stream is, and converted.

    ``position`` counts this shard's records of the pass handed out or skipped,
    ``skipped`` the bad ones before it; ``read_to`` is where reading stands (past
    ``position`` while a pipeline reads ahead: :meth:`start` a session,
    :meth:`peek_batch` on the read-ahead thread, :meth:`commit` on the consumer's).
    """

    def __init__(
        self,
        source: DataSourceModule,
        dataset: Any,
        keys: tuple[str, ...],
        by_shard: bool,
        policy: ErrorPolicy,
        length: int | None,
    ) -> None:
        self._source = source
        self._dataset = dataset
        self._by_shard = by_shard
        self._keys = keys
        self._policy = policy
        self._length = length  # records in the split, when the stream declares it
        self.ledger = SkipLedger(policy, _WHERE)  # bad records: pulled, then committed
        self._tables: Any = None
        self._chunks = Chunks()  # converted records of this shard, not yet taken
        self.ended = False
        # One thread reads at a time (a peek, a direct read, an open or a stop); a
        # session ends with every stop, so a peek of an ended one raises SessionEnded.
        self.sessions = Sessions(_WHERE)
        self.stop()

    def for_source(self, source: DataSourceModule) -> StreamReader:
        """A reader of the same split for ``source`` (a copy of this one's), not open."""
        return StreamReader(source, self._dataset, self._keys, self._by_shard, self._policy,
                            self._length)

    def stop(self, session: int | None = None) -> None:
        """Drop the open stream; ends the reading session (``session``: only if it is
        still the open one)."""
        self.sessions.end(session, self._reset)

    def _reset(self) -> None:
        self._open_at: tuple[int, int, int] | None = None  # a session's open, for its first peek
        closer, self._closer = getattr(self, "_closer", None), None
        tables, self._tables = self._tables, None
        if closer is not None:
            closer()  # closes tables
        elif tables is not None:
            _close_tables(tables)
        self._chunks.clear()
        self._stream_position = 0
        self._ahead: list[Any] = []  # tables pulled to find the last whole round
        self._ahead_rows = 0
        self._stream_ended = False
        self._ordinal = 0  # this shard's records pulled from the stream
        self.epoch = 0  # the pass that is open
        self.position = 0
        self.read_to = 0
        self.ledger.begin(0)
        self.ended = False

    def _load(self, epoch: int, skip: int, skipped: int) -> None:
        self.epoch = int(epoch)
        self.position = self.read_to = int(skip)
        self.ledger.begin(epoch, skipped)
        config = self._source.config
        dataset = self._dataset
        if config.shuffle:
            self._tables = shuffled_tables(
                dataset,
                by_shard=self._by_shard,
                chunk_size=config.chunk_size,
                buffer_size=config.shuffle_buffer_size,
                seed=(config.seed + epoch) % 2**32,
            )
        else:
            self._tables = iter(dataset.with_format("arrow").iter(batch_size=config.chunk_size))
        # a pass still open when the interpreter exits (a run that stops mid-epoch) is
        # closed while modules are intact: datasets' readers otherwise print a traceback
        self._closer = weakref.finalize(self, _close_tables, self._tables)
        while skip > 0:
            got = self._next_table()
            if got is None:
                raise past_the_end("HFStreamingSource", epoch, self.position,
                                   "a different dataset or split")
            table, positions, ordinals = got
            if len(positions) <= skip:
                skip -= len(positions)
                continue
            self._set_chunk(table.slice(skip), positions[skip:], ordinals[skip:])
            skip = 0

    # ------------------------------------------------------------- read-ahead
    def start(self, epoch: int, skip: int, skipped: int) -> int:
        """A new reading session at record ``skip`` of pass ``epoch`` (``skipped``
        bad records before it); its first :meth:`peek` opens the stream there, unless
        it is open there already. Returns the session."""
        with self.sessions.lock:
            if self._tables is not None and (self.epoch, self.position, self.read_to) == (epoch, skip, skip):
                return self.sessions.begin()  # keep the open stream: it stands there
            self.stop()
            self._open_at = (int(epoch), int(skip), int(skipped))
            return self.sessions.current

    def peek_batch(self, batch_size: int, session: int | None = None) -> ReadBatch | None:
        """The next ``batch_size`` records of ``session`` after those peeked before (their
        stream positions as indices, ``end`` the :attr:`position` once they are handed
        out); None at the pass's end. Moves only :attr:`read_to`; bad records met are
        pulled, not yet counted. Raises ``SessionEnded`` once the session is over."""
        with self.sessions.lock:
            self.sessions.check(session)
            if self._open_at is not None:
                self._load(*self._open_at)
                self._open_at = None
            return self._take(batch_size)

    def commit(self, end: int | None) -> None:
        """Hand out the records before ordinal ``end`` (None: the rest of the pass). The
        consumer's thread only: it moves what a peek does not touch (:attr:`position`,
        the ledger's committed skips)."""
        if end is None:
            self.finish()
        else:
            self._commit(end)

    def finish(self) -> None:
        """The pass is over: count its last bad records, check the pass's skip share."""
        self._commit(self._ordinal)
        if self._shard_length() is None:  # an unknown pass size: the fraction is checked now
            self.ledger.check_pass_end(self.position)
        self.ended = True

    def ready(self, batch_size: int) -> bool:
        """False: whether the next records are read ahead is not known here."""
        return False

    def _take(self, batch_size: int) -> ReadBatch | None:
        """Up to ``batch_size`` records after :attr:`read_to` (their stream positions as
        indices, ``end`` their last ordinal's successor)."""
        chunks = self._chunks
        while chunks.held < batch_size and chunks.failure is None:
            got = self._next_table()
            if got is None:
                break
            self._set_chunk(*got)
        read = chunks.take(batch_size)
        if read is not None:
            self.read_to = read.end
        return read

    def _next_table(self) -> tuple[Any, np.ndarray, np.ndarray] | None:
        """The next non-empty Arrow chunk of this shard, its stream positions and its
        ordinals among this shard's records."""
        import pyarrow as pa

        index, count = self._source.shard.index, self._source.shard.count
        while True:
            table = self._pull(count)
            if table is None:
                return None
            n = table.num_rows
            positions = np.arange(self._stream_position, self._stream_position + n, dtype=np.int64)
            self._stream_position += n
            if count > 1:
                keep = positions % count == index
                if self._stream_ended:  # the stream's length is known: cut the partial round
                    total = self._stream_position + self._ahead_rows
                    keep &= positions < total - total % count
                table = table.filter(pa.array(keep))
                positions = positions[keep]
            if len(positions):
                ordinals = np.arange(self._ordinal, self._ordinal + len(positions), dtype=np.int64)
                self._ordinal += len(positions)
                return table, positions, ordinals

    def _columns(self, table: Any, first_record: Any) -> dict[str, np.ndarray]:
        """``table``'s records (from stream position ``first_record``) as checked columns."""
        return table_to_columns(table, self._keys, self._source.config, _WHERE,
                                first_record=first_record, features=self._dataset.features)

    def _set_chunk(self, table: Any, positions: np.ndarray, ordinals: np.ndarray) -> None:
        source = self._source
        try:
            columns = self._columns(table, positions)
            if self._policy.skips:
                check_spec(columns, source.element_spec())
        except Exception as err:  # noqa: BLE001 - located per record below
            if not self._policy.skips:
                if isinstance(err, DataraxError):
                    raise
                raise record_error(
                    table,
                    self._keys,
                    source.config,
                    self._dataset.features,
                    positions,
                    self.epoch,
                    err,
                ) from err
            columns, keep = self._convert_records(table, positions, ordinals)
            positions, ordinals = positions[keep], ordinals[keep]
        self._chunks.append(columns, positions, ordinals)

    def _convert_records(
        self, table: Any, positions: np.ndarray, ordinals: np.ndarray
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Convert record by record, skipping (and counting) the ones that fail."""
        source = self._source
        good: list[dict[str, np.ndarray]] = []
        keep = np.zeros(len(positions), bool)
        for i, (position, ordinal) in enumerate(zip(positions.tolist(), ordinals.tolist())):
            try:
                columns = self._columns(table.slice(i, 1), position)
                check_spec(columns, source.element_spec())
            except Exception as err:  # noqa: BLE001 - counted and reported
                try:  # past the skip budget the ledger raises
                    self.ledger.pull(
                        SkippedRecord(self.epoch, ordinal, position, None, position, _cause(err)),
                        epoch_size=self._shard_length(),
                    )
                except RecordError as over:
                    # the records before it are still handed out; the batch that would
                    # pass it raises, not the read ahead of the loop
                    self._chunks.fail(over)
                    break
                continue
            good.append(columns)
            keep[i] = True
        if not good:
            return {}, keep
        return {k: np.concatenate([g[k] for g in good]) for k in self._keys}, keep

    def _commit(self, end: int) -> None:
        """Count bad records before ordinal ``end`` as skipped; ``end`` is the position."""
        self.ledger.commit(end)
        self.position = end
        self.read_to = max(self.read_to, end)

    def _pull(self, count: int) -> Any:
        """The next Arrow table of the stream; with ``count > 1`` tables are pulled ahead
        until ``count`` records follow it, so the partial last round is known in time."""
        if count > 1:
            while not self._stream_ended and (
                not self._ahead or self._ahead_rows - self._ahead[0].num_rows < count
            ):
                table = self._next_arrow()
                if table is None:
                    self._stream_ended = True
                elif table.num_rows:
                    self._ahead.append(table)
                    self._ahead_rows += table.num_rows
            if not self._ahead:
                return None
            table = self._ahead.pop(0)
            self._ahead_rows -= table.num_rows
            return table
        table = self._next_arrow()
        if table is None:
            self._stream_ended = True
        return table

    def _next_arrow(self) -> Any:
        """The stream's next Arrow table (None at its end); a file that ``datasets``
        cannot read is a RecordError saying where the pass stands."""
        try:
            return next(self._tables, None)
        except DataraxError:
            raise
        except Exception as err:  # a data file that is corrupt, truncated or of another format
            raise unreadable(self._source.config, self.epoch,
                             self._stream_position + self._ahead_rows, err) from err

    def _shard_length(self) -> int | None:
        """Records of this shard in one pass, when the split declares its size."""
        if self._length is None:
            return None
        return self._length // self._source.shard.count


_WHERE = "HFStreamingSource"


def _close_tables(tables: Any) -> None:
    """Close an open pass's table iterator (a generator over ``datasets``' readers)."""
    close = getattr(tables, "close", None)
    if close is None:
        return
    try:
        close()
    except ValueError:  # being read on another thread at exit: it ends with the process
        pass


def _cause(err: BaseException) -> str:
    """What went wrong with one record, for messages and reports."""
    if isinstance(err, DataraxError):
        return str(err).removeprefix(f"{_WHERE}: ")
    return f"{type(err).__name__}: {err}"


def unreadable(config: HFConfig, epoch: int, records: int, err: BaseException) -> RecordError:
    """The stream could not read on after ``records`` records of pass ``epoch``."""
    name = config.name if config.name is not None else config.data_files
    return RecordError(
        f"{_WHERE}: cannot read split {config.split!r} of dataset {name!r} (epoch {epoch}) "
        f"after {count_words(records, 'record')}: {unreadable_cause(err)}"
    )


def record_error(
    table: Any,
    keys: Sequence[str],
    config: HFConfig,
    features: Any,
    positions: Records,
    epoch: int,
    err: BaseException,
) -> RecordError:
    """``on_error="raise"``: the error naming the first record of ``table`` (its rows at
    stream ``positions``, see :data:`~datarax.core.dtypes.Records`) that fails alone."""
    position, cause = record_number(positions, 0), err
    for i in range(table.num_rows):
        at = record_number(positions, i)
        try:
            table_to_columns(table.slice(i, 1), keys, config, _WHERE, at, features)
        except Exception as one:  # noqa: BLE001 - reported with location
            position, cause = at, one
            break
    return RecordError(
        f"{_WHERE}: cannot convert record {position} of split {config.split!r} "
        f"(epoch {epoch}): {_cause(cause)}. Fix or filter the data, or construct the "
        "source with on_error='skip' to drop bad records (they are counted and reported).",
        index=position,
    )


def check_spec(columns: dict[str, np.ndarray], spec: dict[str, Any]) -> None:
    """Refuse converted columns whose per-record spec (:func:`~datarax.core.spec.field_spec`:
    text or dtype, and shape) differs from ``spec``."""
    for key, want in spec.items():
        got = field_spec(columns[key], batched=True)
        if describe_field(got) == describe_field(want):
            continue
        have, first = (describe_field(s).partition("(")[0] for s in (got, want))
        raise DataraxError(
            f"{_WHERE}: field '{key}' is {have} of shape {tuple(got.shape)}, but the "
            f"first record's is {first} of shape {tuple(want.shape)}."
        )


def first_good_record(
    table: Any, keys: Sequence[str], config: HFConfig, where: str, features: Any
) -> dict[str, np.ndarray]:
    """``on_error="skip"``: the fields of the first record of ``table`` that converts
    (the first failure when none does)."""
    first: BaseException | None = None
    for i in range(table.num_rows):
        try:
            return table_to_columns(table.slice(i, 1), keys, config, where, i, features)
        except Exception as err:  # noqa: BLE001 - the first one is re-raised
            first = first or err
    assert first is not None
    raise first


def shuffled_tables(
    dataset: Any, *, by_shard: bool, chunk_size: int, buffer_size: int, seed: int
) -> Any:
    """Arrow tables of one shuffled pass: shards (files) in a seeded order, records
    mixed through a rolling buffer of ``buffer_size`` records (``datasets``' scheme,
    read shard after shard, so memory stays at about ``buffer_size + chunk_size``)."""
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    shards = int(getattr(dataset, "num_shards", 1) or 1) if by_shard else 1
    order = rng.permutation(shards) if shards > 1 else np.zeros(1, np.int64)
    tables: list[Any] = []
    held = 0
    for index in order:
        part = dataset.shard(num_shards=shards, index=int(index)) if shards > 1 else dataset
        for table in part.with_format("arrow").iter(batch_size=chunk_size):
            tables.append(table)
            held += table.num_rows
            if held >= buffer_size:
                mixed = pa.concat_tables(tables).take(rng.permutation(held))
                keep = buffer_size // 2
                yield mixed.slice(0, held - keep)
                tables, held = [mixed.slice(held - keep)], keep
    if held:
        yield pa.concat_tables(tables).take(rng.permutation(held))
