"""``RandomAccessHostSource``: a host source that reads records by index.

The shared serving logic of the sources built on
:class:`~datarax.sources.host_reader.HostReader` (ArrayRecord files, a TFDS
``data_source``): each epoch's order (file order or the Feistel permutation keyed
by ``seed + epoch``) restricted to this process's shard, the cursor that a
``{"current_index", "current_epoch", "skipped"}`` state saves, the bad-record policy
(``on_error`` / ``max_skipped`` / ``max_skipped_fraction``, :class:`BadRecordFields`)
with its skip count, and stopping / closing the reader's read-ahead threads.
"""

from __future__ import annotations

from typing import Any

from flax import nnx

from datarax.core.data_source import Batch, DataSourceModule
from datarax.core.errors import ConfigError, RecordError, StateError
from datarax.sources.host_reader import (
    EpochOrder,
    ErrorPolicy,
    HostReader,
    ReadBatch,
    SkippedRecord,
)


class BadRecordFields:
    """Mixin of source configs that declare ``on_error``, ``max_skipped`` and
    ``max_skipped_fraction`` (defaults ``"raise"``, None, None).

    Call :meth:`error_policy` in ``__post_init__`` to validate them.
    """

    on_error: str
    max_skipped: int | None
    max_skipped_fraction: float | None

    def error_policy(self) -> ErrorPolicy:
        """The :class:`~datarax.sources.host_reader.ErrorPolicy` these fields describe.

        Raises:
            ConfigError: a field is invalid (the message names this config).
        """
        try:
            return ErrorPolicy(self.on_error, self.max_skipped, self.max_skipped_fraction)
        except ConfigError as err:
            raise ConfigError(f"{type(self).__name__}: {err}") from None


class RandomAccessHostSource(DataSourceModule):
    """Base of host sources that read ``length`` records through a ``HostReader``.

    A subclass calls ``super().__init__(config, rngs=rngs, name=name)``, builds its
    reader (with the config's ``error_policy()``), hands it over with
    :meth:`_use_reader` and implements :meth:`_shuffle_seed`. Hooks it may override:
    :meth:`_reword_error` and :meth:`_host_columns`.

    Records skipped under ``on_error="skip"`` are counted per epoch in the ``skipped``
    variable and the ``"skipped"`` state key, so a restored source continues the
    epoch's skip budget exactly.
    """

    _length: int
    _reader: HostReader

    def _use_reader(self, reader: HostReader, length: int) -> None:
        """Serve ``length`` records read by ``reader``."""
        self._length = nnx.static(int(length))
        self._reader = nnx.static(reader)
        self.skipped = nnx.Variable(0)  # records skipped this epoch before the cursor

    # ------------------------------------------------------------------ hooks
    def _shuffle_seed(self) -> int | None:
        """Base seed of the epoch order (epoch ``e`` uses ``seed + e``); None: record order."""
        raise NotImplementedError(f"{type(self).__name__} must implement _shuffle_seed()")

    def _reword_error(self, err: RecordError) -> RecordError:
        """The error a failed read raises (default: the reader's own)."""
        return err

    def _host_columns(self, columns: dict[str, Any]) -> Batch:
        """The batch handed out for the reader's stacked columns (default: as read)."""
        return columns

    def _skipped(self) -> int:
        """Records skipped this epoch before the cursor."""
        return int(self.skipped.get_value())

    def _set_skipped(self, count: int) -> None:
        self.skipped.set_value(int(count))

    # ------------------------------------------------------------ description
    def __len__(self) -> int:
        return self._length

    def element_spec(self) -> dict[str, Any]:
        """Fields, per-record shapes and dtypes, from decoding the first record."""
        return self._reader.element_spec()

    def skipped_records(self) -> list[SkippedRecord]:
        """Records dropped under ``on_error="skip"`` so far: where they are and why."""
        return self._reader.skipped_records()

    # ----------------------------------------------------------------- epochs
    def _order(self, epoch: int) -> EpochOrder:
        lo, hi = self.shard_bounds(self._length)
        return EpochOrder(self._length, self._shuffle_seed(), int(epoch), lo, hi)

    def _epoch_size(self) -> int:
        lo, hi = self.shard_bounds(self._length)
        return hi - lo

    def start_epoch(self, epoch: int) -> None:
        """Position at the start of pass ``epoch`` (drops any read-ahead)."""
        self._reader.stop()
        self._cursor.start_epoch(epoch)
        self._set_skipped(0)

    def get_batch_with_indices(self, batch_size: int) -> tuple[Batch | None, Any | None]:
        """The next ``batch_size`` records of this epoch and their stable indices.

        Returns ``(None, None)`` when the epoch is done.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be an int >= 1, got {batch_size!r}.")
        reader = self._reader
        cursor = self._cursor
        if reader.active and (reader.position, reader.epoch) != (cursor.index, cursor.epoch):
            reader.stop()  # the position was changed from outside (e.g. nnx.update)
        if not reader.active:
            if cursor.index >= self._epoch_size():
                return None, None
            reader.start(self._order(cursor.epoch), cursor.index, self._skipped())
        read = self._next_batch(batch_size)
        self._set_skipped(reader.skipped)
        if read is None:
            cursor.current_index.set_value(self._epoch_size())
            return None, None
        cursor.current_index.set_value(read.end)
        return self._host_columns(read.columns), read.indices

    def _next_batch(self, batch_size: int) -> ReadBatch | None:
        try:
            return self._reader.next_batch(batch_size)
        except RecordError as err:
            reworded = self._reword_error(err)
            if reworded is err:
                raise
            raise reworded from err.__cause__

    def get_batch(self, batch_size: int) -> Batch | None:
        """The next batch of this epoch (None when it is done)."""
        return self.get_batch_with_indices(batch_size)[0]

    # ------------------------------------------------------------------ state
    def _check_state_dict(self, state: Any) -> None:
        if not isinstance(state, dict):
            raise StateError(
                f"{type(self).__name__}.set_state expects the dict get_state() returned, got "
                f"{type(state).__name__}."
            )

    def get_state(self) -> dict[str, Any]:
        """``current_index`` (epoch positions consumed: records handed out plus records
        skipped), ``current_epoch`` and ``skipped`` (records skipped this epoch before
        ``current_index``)."""
        state = super().get_state()
        state["skipped"] = self._skipped()
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue exactly after the last record the saved source handed out.

        A state without ``"skipped"`` counts no skips before its position.
        """
        where = type(self).__name__
        self._check_state_dict(state)
        skipped = state.get("skipped", 0)
        if isinstance(skipped, bool) or not isinstance(skipped, int) or skipped < 0:
            raise StateError(
                f"{where} state 'skipped' must be a non-negative int, got {skipped!r}.",
                field="skipped",
            )
        self._reader.stop()
        self._cursor.set_state(state, length=self._epoch_size(), where=where)
        if skipped > self._cursor.index:
            raise StateError(
                f"{where} state says {skipped} records were skipped before position "
                f"{self._cursor.index}; the state was tampered with.",
                field="skipped",
            )
        self._set_skipped(skipped)

    # ---------------------------------------------------------------- closing
    def close_epoch(self) -> None:
        """Stop reading ahead (the position is kept; the next batch resumes there)."""
        self._reader.stop()

    def close(self) -> None:
        """Stop the reader threads."""
        self._reader.close()
