"""``RandomAccessHostSource``: a host source that reads records by index.

The shared serving logic of the sources built on
:class:`~datarax.sources.host_reader.HostReader` (ArrayRecord files, a TFDS
``data_source``): each epoch's order (file order or the Feistel permutation keyed
by ``seed + epoch``) restricted to this process's shard, the cursor that a
``{"current_index", "current_epoch"}`` state saves, and stopping / closing the
reader's read-ahead threads.
"""

from __future__ import annotations

from typing import Any

from flax import nnx

from datarax.core.data_source import Batch, DataSourceModule
from datarax.core.errors import ConfigError, RecordError, StateError
from datarax.sources.host_reader import EpochOrder, HostReader, ReadBatch


class RandomAccessHostSource(DataSourceModule):
    """Base of host sources that read ``length`` records through a ``HostReader``.

    A subclass calls ``super().__init__(config, rngs=rngs, name=name)``, builds its
    reader, hands it over with :meth:`_use_reader` and implements
    :meth:`_shuffle_seed`. Hooks it may override: :meth:`_reword_error`,
    :meth:`_host_columns`, and :meth:`_skipped` / :meth:`_set_skipped` where bad
    records can be skipped.
    """

    _length: int
    _reader: HostReader

    def _use_reader(self, reader: HostReader, length: int) -> None:
        """Serve ``length`` records read by ``reader``."""
        self._length = nnx.static(int(length))
        self._reader = nnx.static(reader)

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
        """Records skipped this epoch before the cursor (0 where none can be skipped)."""
        return 0

    def _set_skipped(self, count: int) -> None:
        """Remember that ``count`` records were skipped this epoch before the cursor."""

    # ------------------------------------------------------------ description
    def __len__(self) -> int:
        return self._length

    def element_spec(self) -> dict[str, Any]:
        """Fields, per-record shapes and dtypes, from decoding the first record."""
        return self._reader.element_spec()

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

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue exactly after the last record the saved source handed out."""
        self._check_state_dict(state)
        self._reader.stop()
        self._cursor.set_state(state, length=self._epoch_size(), where=type(self).__name__)

    # ---------------------------------------------------------------- closing
    def close_epoch(self) -> None:
        """Stop reading ahead (the position is kept; the next batch resumes there)."""
        self._reader.stop()

    def close(self) -> None:
        """Stop the reader threads."""
        self._reader.close()
