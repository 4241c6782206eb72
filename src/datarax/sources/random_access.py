"""``RandomAccessSource``: records read by index on the host, in threads, in any order.

The base of every host source (ArrayRecord, a TFDS ``data_source``, ``.npy`` shards,
your own format). A subclass says how to read records; the base serves them: each
epoch's order (record order, or the Feistel permutation keyed by ``seed + epoch``) in
this process's shard, threaded read-ahead and decode
(:class:`~datarax.sources.host_reader.HostReader`), the position (what the consumer
received, never the read-ahead), the bad-record policy and its skip count.

Write your own by implementing ``__len__`` and ``read_records(indices)`` (raw records
at those stable indices, one batched read); optionally ``decode(raw)`` (raw record ->
dict of arrays; default: the raw record is that dict already), ``locate(index)`` (file
and index in file, for error messages) and ``shuffle_seed()`` (default:
``config.seed`` when ``config.shuffle`` is true, else record order).

Example:
    >>> import numpy as np
    >>> from dataclasses import dataclass
    >>> from datarax.core.config import StructuralConfig
    >>> @dataclass(frozen=True)
    ... class RowsConfig(StructuralConfig):
    ...     shuffle: bool = False
    ...     seed: int = 0
    >>> class Rows(RandomAccessSource):
    ...     def __init__(self, config, rows):
    ...         super().__init__(config)
    ...         self.rows = rows
    ...     def __len__(self):
    ...         return len(self.rows)
    ...     def read_records(self, indices):
    ...         return [{"x": self.rows[i]} for i in indices]
    >>> src = Rows(RowsConfig(), np.arange(5, dtype=np.int32))
    >>> src.get_batch_with_indices(3)[0]["x"].tolist(), src.get_state()["current_index"]
    ([0, 1, 2], 3)
    >>> int(src[-1]["x"])  # one record by its index, as Grain's data sources read it
    4
    >>> src.close()
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from flax import nnx

from datarax.core.batch import concat_batches
from datarax.core.config import StructuralConfig, check_count
from datarax.core.data_source import DataSourceModule, SourceKind
from datarax.core.errors import ConfigError, RecordError
from datarax.core.module import HostState
from datarax.core.share import Share
from datarax.host.counts import count_words
from datarax.sources.decoded_records import DecodedRecords
from datarax.sources.host_reader import HostReader
from datarax.sources.epoch_order import EpochOrder
from datarax.sources.read_ahead import SessionCursor
from datarax.sources.skip_ledger import (
    SKIP_ADVICE, ErrorPolicy, SkipCounts, SkippedRecord, add_on_error_advice, bad_record_error)
from datarax.typing import Batch


class BadRecordFields:
    """Mixin of source configs that declare ``on_error``, ``max_skipped`` and
    ``max_skipped_fraction``; :meth:`error_policy` in ``__post_init__`` checks them."""

    on_error: str
    max_skipped: int | None
    max_skipped_fraction: float | None

    def error_policy(self) -> ErrorPolicy:
        """The :class:`~datarax.sources.skip_ledger.ErrorPolicy` these fields describe (a
        ``ConfigError`` naming this config when one is invalid)."""
        for name, kind, numpy in (("max_skipped", int, np.integer),
                                  ("max_skipped_fraction", float, (np.integer, np.floating))):
            if isinstance(getattr(self, name, None), numpy):  # kept as the same Python number
                object.__setattr__(self, name, kind(getattr(self, name)))
        try:
            return ErrorPolicy(self.on_error, self.max_skipped,
                               getattr(self, "max_skipped_fraction", None))
        except ConfigError as err:
            raise ConfigError(f"{type(self).__name__}: {err}") from None


class _HookRecords:
    """The ``data`` object HostReader reads, backed by a source's ``read_records``."""

    def __init__(self, source: RandomAccessSource) -> None:
        self._source = source

    def __len__(self) -> int:
        return len(self._source)

    def __getitem__(self, index: int) -> Any:
        return self._source.read_records([int(index)])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        return list(self._source.read_records(list(indices)))


class _Resplit(HostState):
    """The re-split :class:`~datarax.core.share.Share` of one epoch this source serves
    (``use_share``), or None: its own block of every epoch."""

    def __init__(self) -> None:
        self.share: Share | None = None


class RandomAccessSource(SkipCounts, DataSourceModule):
    """A host source that reads records by index; see the module docstring.

    ``num_threads`` / ``read_ahead`` (keywords a subclass passes on): reader threads and
    batches read ahead. Records skipped under ``on_error="skip"`` are counted per epoch
    (``skipped``, saved in the state), so a restore continues the epoch's skip budget.
    """

    kind: ClassVar[SourceKind | None] = SourceKind.HOST
    rebuilt_on_copy: ClassVar[tuple[str, ...]] = ("_RandomAccessSource__reader",)

    def __init__(
        self,
        config: StructuralConfig,
        *,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
        num_threads: int = 4,
        read_ahead: int | None = None,
    ) -> None:
        super().__init__(config, rngs=rngs, name=name)
        self._init_skips()  # skipped this epoch before the position
        self.__reader: HostReader | None = None
        self.__build_reader: Callable[[], HostReader] | None = None
        self.__reader_options = (num_threads, read_ahead)
        self.__resplit = _Resplit()
        self._closed = False  # close() ends reading: later reads raise (_check_open)

    # ------------------------------------------------------------------ hooks
    def __len__(self) -> int:  # pragma: no cover - abstract
        raise TypeError(f"{type(self).__name__} must implement __len__")

    def read_records(self, indices: Sequence[int]) -> Sequence[Any]:
        """Raw records at stable ``indices`` (one batched read)."""
        raise NotImplementedError(f"{type(self).__name__} must implement read_records(indices)")

    def decode(self, raw: Any) -> Mapping[str, Any]:
        """One raw record -> dict of arrays (default: ``raw`` is that dict)."""
        return raw

    def locate(self, index: int) -> tuple[str | None, int]:
        """``(file, index_in_file)`` of stable record ``index`` (for error messages)."""
        return None, int(index)

    def shuffle_seed(self) -> int | None:
        """Base seed of the epoch order (epoch ``e`` uses ``seed + e``); None: record order."""
        config = self.config
        return int(config.seed) if getattr(config, "shuffle", False) else None

    def error_policy(self) -> ErrorPolicy:
        """The bad-record policy (the config's ``on_error`` fields, else raise)."""
        config = self.config
        make = getattr(config, "error_policy", None)
        if callable(make):
            return make()
        if not hasattr(config, "on_error"):
            return ErrorPolicy()
        # a config of one's own that declares the fields without BadRecordFields
        budgets = [getattr(config, name, None) for name in ("max_skipped", "max_skipped_fraction")]
        budgets = [b.item() if isinstance(b, np.generic) else b for b in budgets]
        try:
            return ErrorPolicy(config.on_error, *budgets)
        except ConfigError as err:
            raise ConfigError(f"{type(config).__name__}: {err}") from None

    def _reword_error(self, err: RecordError) -> RecordError:
        """The error a failed read raises (default: the reader's own)."""
        return err

    def _host_columns(self, columns: dict[str, Any]) -> Batch:
        """The batch handed out for the reader's stacked columns (default: as read)."""
        return columns

    def supports_indexed_access(self) -> bool:
        """False: records are read on the host, through a cursor (:mod:`datarax.core.reading`)."""
        return False

    # ----------------------------------------------------------------- reader
    def _use_reader(self, build: Callable[[], HostReader]) -> None:
        """Serve records read by the reader ``build()`` returns; a copy of the source calls
        its copy of ``build``, so ``build`` takes what it reads as arguments (a partial)."""
        self.__build_reader = build
        self.__reader = build()

    def rebuild_after_copy(self, memo: dict[int, Any]) -> None:
        """A copy's own reader: built now by :meth:`_use_reader`'s ``build``, else on first
        use (:attr:`host_reader`)."""
        build = self.__build_reader
        self.__reader = None if build is None else build()

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the reader (threads, locks): unpickled, it builds its own."""
        state = super().__getstate__()
        state["_RandomAccessSource__reader"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.rebuild_after_copy({})

    @property
    def host_reader(self) -> HostReader:
        """The threaded reader (built from the hooks on first use)."""
        if self.__reader is None:
            num_threads, read_ahead = self.__reader_options
            self.__reader = HostReader(
                _HookRecords(self),
                self.decode,
                locate=self.locate,
                num_threads=num_threads,
                read_ahead=read_ahead,
                policy=self.error_policy(),
                name=type(self).__name__,
                cast_float64=self._cast_float64(),
                skip_advice=self._skip_advice(),
            )
            if self._closed:  # built after close() (for stats, say): it reads nothing
                self.__reader.close()
        return self.__reader

    def _skip_advice(self) -> str:
        """How bad-record messages say to skip: ``on_error='skip'``, or, for a config
        without the field, how to add it."""
        if hasattr(self.config, "on_error"):
            return SKIP_ADVICE
        return add_on_error_advice(type(self.config).__name__)

    def _cast_float64(self) -> bool:
        return bool(getattr(self.config, "cast_float64", False))

    def __getitem__(self, index: int) -> Mapping[str, Any]:
        """Record ``index`` in stable (file) order, decoded, as Grain's data sources read
        one; no position moves. A bad record raises :class:`RecordError` (the skip
        policy is a pass's)."""
        self._check_open()
        n = len(self)
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"{type(self).__name__} indices must be integers (one record at "
                            f"a time), got {type(index).__name__}; iterate the source or a "
                            "Pipeline for batches.")
        at = int(index) + n if index < 0 else int(index)
        if not 0 <= at < n:
            raise IndexError(f"{type(self).__name__} index {int(index)} is out of range for "
                             f"{count_words(n, 'record')}.")
        # decoded and checked as a batch's records are: the same fields and dtypes
        records = DecodedRecords(self.decode, cast_float64=self._cast_float64())
        try:
            record = records.check(self.read_records([at])[0])
            try:  # and against a pass's structure, so a record a pass refuses is refused here
                record = self.host_reader.check_decoded(record)
            except RecordError:  # no readable first record (on_error="raise"): this one alone
                pass
        except ConfigError:  # a setting to change (cast_float64), raised as a batch raises it
            raise
        except Exception as cause:
            raise bad_record_error(type(self).__name__, self.locate(at), cause,
                                   skipping=False, skip_advice=self._skip_advice()) from cause
        return dict(record)

    # ------------------------------------------------------------ description
    def element_spec(self) -> dict[str, Any]:
        """Fields, per-record shapes and dtypes, from decoding the first record."""
        return _reworded(self, self.host_reader.element_spec)

    def known_spec(self) -> dict[str, Any] | None:
        """The spec if a record was decoded already (for ``repr``), else None: reads nothing."""
        return None if self.__reader is None else self.__reader.known_spec()

    def skipped_records(self) -> list[SkippedRecord]:
        """Records dropped under ``on_error="skip"`` so far: where they are and why."""
        return self.host_reader.skipped_records()

    def stats(self) -> dict[str, Any] | None:
        """The reader's timers, when it keeps any."""
        stats = getattr(self.host_reader, "stats", None)
        return stats() if callable(stats) else None

    # ----------------------------------------------------------------- epochs
    def epoch_order(self, epoch: int) -> EpochOrder:
        """Stable record index of every position of pass ``epoch`` in this shard."""
        n = len(self)
        share = self.__resplit.share
        if share is not None and share.epoch == epoch:
            return EpochOrder(n, self.shuffle_seed(), int(epoch), runs=share.runs(n))
        lo, hi = self.shard.bounds(n)
        return EpochOrder(n, self.shuffle_seed(), int(epoch), lo, hi)

    def epoch_size(self) -> int | None:
        """Records this shard serves in the current epoch (its re-split share, if any)."""
        share = self.__resplit.share
        if share is not None and share.epoch == self.epoch:
            return share.size(len(self))
        return super().epoch_size()

    def use_share(self, share: Share | None) -> None:
        """Serve pass ``share.epoch`` from the runs of the re-split ``share`` (a restore
        saved by another process count) instead of this shard's block; later epochs (and
        ``None``) use the block again."""
        self.__resplit.share = share

    def _moved(self) -> None:
        reader = self.__reader
        if reader is not None:  # read-ahead belongs to the old position (not the next
            reader.moved_to(*self.datarax_position.where())  # epoch's, where it starts)
        self._skips_at_start()

    def get_batch_with_indices(self, batch_size: int) -> tuple[Batch | None, Any | None]:
        """The next ``batch_size`` records of this epoch and their stable indices;
        ``(None, None)`` when the epoch is done. Between a live pipeline's batches: the
        records after those it handed out (the pipeline goes on after them)."""
        batch_size = check_count(batch_size, "batch_size", 1)
        self._check_open()
        reader = self.host_reader
        epoch, index = self.epoch, self.index
        # under the reader's lock: a concurrent peek of a pipeline's read-ahead comes wholly
        # before this read or after it, in an ended session
        with reader.sessions.lock:
            stands = (reader.position, reader.cursor, reader.epoch)
            if reader.active and stands != (index, index, epoch):
                # the position was changed from outside (e.g. nnx.update), or a pipeline's
                # read-ahead assembled batches past it: continue from the position
                reader.stop()
            if not reader.active:
                if index >= (self.epoch_size() or 0):
                    return None, None
                reader.start(self.epoch_order(epoch), index, self._skips())
            read = _reworded(self, lambda: reader.next_batch(batch_size))
            self._set_skips(reader.skipped)
            if read is None:
                self.datarax_position.move(epoch, self.epoch_size() or 0)
                return None, None
            self.datarax_position.move(epoch, read.end)
        return self._host_columns(read.columns), read.indices

    def batch_cursor(self) -> SessionCursor | None:
        """Batches read ahead of the current position
        (:class:`~datarax.sources.read_ahead.SessionCursor`); None when a subclass
        overrides ``get_batch_with_indices``, so a pipeline reads through the override.

        Example:
            >>> import numpy as np
            >>> from datarax.sources import MemorySourceConfig
            >>> class Rows(RandomAccessSource):
            ...     def __len__(self):
            ...         return 5
            ...     def read_records(self, indices):
            ...         return [{"x": np.int32(i)} for i in indices]
            >>> src = Rows(MemorySourceConfig())
            >>> cursor = src.batch_cursor()
            >>> [cursor.peek(2)[2], cursor.peek(2)[2]], src.index
            ([2, 4], 0)
            >>> cursor.commit(2); src.index, src.get_batch(9)["x"].tolist()
            (2, [2, 3, 4])
            >>> src.close()
        """
        if type(self).get_batch_with_indices is not RandomAccessSource.get_batch_with_indices:
            return None
        self._check_open()
        reader = self.host_reader
        epoch, index = self.epoch, self.index
        with reader.sessions.lock:  # the session opened is the one the cursor reads
            reader.moved_to(epoch, index)  # (the next epoch's reads kept for its start)
            if index < (self.epoch_size() or 0):  # a pass's start decodes the first record
                _reworded(self, lambda: reader.start(self.epoch_order(epoch), index, self._skips()))
            session = reader.session if reader.active else None
        return SessionCursor(self, reader, session, present=self._host_columns,
                             guard=lambda read: _reworded(self, read))

    def read_in_order(self, order: Any, first: int, count: int, *, resume: bool) -> Batch:
        """Records ``first .. first + count - 1`` of ``order`` (a mixture's draws)
        through the threaded reader, the position not moved; ``resume``: they follow the
        last ones read so.

        Example:
            >>> import numpy as np, os, tempfile
            >>> from datarax.sources import NpySource, NpySourceConfig
            >>> from datarax.sources.epoch_order import EpochOrder
            >>> path = os.path.join(tempfile.mkdtemp(), "x.npy"); np.save(path, np.arange(10))
            >>> src, order = NpySource(NpySourceConfig(paths=path)), EpochOrder(10, 3, 0)
            >>> first = src.read_in_order(order, 0, 4, resume=False)["data"].tolist()
            >>> rest = src.read_in_order(order, 4, 6, resume=True)["data"].tolist()
            >>> sorted(first + rest) == list(range(10)), src.index
            (True, 0)
            >>> src.close()
        """
        reader = self.host_reader
        if not (resume and reader.active):
            reader.start(order, first)
        parts, have = [], 0
        while have < count:
            read = _reworded(self, lambda: reader.next_batch(count - have))
            parts.append(self._host_columns(dict(read.columns)))
            have += len(read)
        return concat_batches(parts)

    def _check_open(self) -> None:
        """Raise once :meth:`close` ran: a pass, a batch or ``source[i]`` alike."""
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed; build a new source.")

    def get_batch(self, batch_size: int) -> Batch | None:
        """The next batch of this epoch (None when it is done)."""
        return self.get_batch_with_indices(batch_size)[0]

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict[str, Any]:
        """The position (records handed out plus skipped), ``skipped`` (of those, this
        epoch) and ``prefetch_cache`` (records read ahead: information only)."""
        state = super().get_state()
        state["skipped"] = self._skips()
        reader = self.__reader
        active = reader is not None and reader.active
        state["prefetch_cache"] = reader.read_ahead_records() if active else 0
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue exactly after the last record the saved source handed out (a state
        without ``"skipped"``: none skipped)."""
        self.__resplit.share = None  # a plain state: this shard's own block
        self._resume(*self._checked_skips(
            state, where=type(self).__name__, length=self.epoch_size()
        ))

    # ---------------------------------------------------------------- closing
    def close_epoch(self) -> None:
        """Stop reading ahead (the position is kept; the next batch resumes there)."""
        if self.__reader is not None:
            self.__reader.stop()

    def close(self) -> None:
        """Stop the reader threads; every later read raises (build a new source)."""
        self._closed = True
        if self.__reader is not None:
            self.__reader.close()


def _reworded(source: RandomAccessSource, read: Callable[[], Any]) -> Any:
    """``read()`` (a batch, the first record's spec, a pass's start), a bad record's error
    as ``source._reword_error`` words it."""
    try:
        return read()
    except RecordError as err:
        reworded = source._reword_error(err)
        if reworded is err:
            raise
        raise reworded from err.__cause__
