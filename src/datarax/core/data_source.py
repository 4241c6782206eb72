"""``DataSourceModule``: the contract every datarax source implements.

A source is one of three kinds (see ``ARCHITECTURE.md``):

* **indexed** — implements ``get_batch_at(start, size, key)``: stateless and
  JAX-traceable, so Pipeline compiles index computation, gather and every stage into
  one jitted step. ``start`` is a global record position counted across epochs
  (epoch ``e`` starts at ``e * len(source)``); a source wraps it with ``% len(self)``.
* **random access on the host** / **forward-only stream** — implements
  ``get_batch(batch_size)``: the next batch of the current pass, advancing the
  source's own position; ``None`` (or ``StopIteration``) ends the pass.

A source implementing neither is refused when iteration starts, with an error naming
both methods. Every source also iterates record by record (``for element in source``)
and reports / restores its position with ``get_state()`` / ``set_state()``.
"""

from __future__ import annotations

import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from datarax.core.batch import batch_length, concat_batches, take_records
from datarax.core.config import StructuralConfig
from datarax.core.element import Element, RecordMetadata
from datarax.core.errors import SourceContractError, StateError
from datarax.core.module import DataraxModule
from datarax.core.position import EpochPosition
from datarax.core.spec import array_to_spec_strip_leading, check_spec_x64, x64_enabled

Batch = dict[str, Any]

_SPEC_CACHE: weakref.WeakKeyDictionary[Any, dict[bool, dict[str, Any]]] = (
    weakref.WeakKeyDictionary()
)


class DataSourceModule(DataraxModule):
    """Base class of all data sources (an ``nnx.Module`` with the iterator protocol).

    Subclasses call ``super().__init__(config, rngs=rngs, name=name)`` first, then
    implement ``get_batch_at`` (indexed) or ``get_batch`` (streaming) and
    ``element_spec()``.

    Example:
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> source = MemorySource(MemorySourceConfig(), {"x": np.arange(4, dtype=np.int32)})
        >>> [int(e["x"]) for e in source]
        [0, 1, 2, 3]
        >>> source.get_state()
        {'current_index': 4, 'current_epoch': 0}
    """

    def __init__(
        self,
        config: StructuralConfig,
        *,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(config, rngs=rngs, name=name)
        self._cursor = EpochPosition()
        self._skip_pending = 0  # records to fast-forward after set_state on a stream
        self._shard = (0, 1)  # (index, count): this process's share of every epoch
        self._stream_position = 0  # records a forward-only stream has read this pass

    # ------------------------------------------------------------------ contract
    def supports_indexed_access(self) -> bool:
        """True when the class implements ``get_batch_at`` (the compiled path)."""
        return type(self).get_batch_at is not DataSourceModule.get_batch_at

    def supports_streaming(self) -> bool:
        """True when the class implements ``get_batch`` (the host path)."""
        return type(self).get_batch is not DataSourceModule.get_batch

    def check_contract(self) -> None:
        """Raise unless the source implements ``get_batch_at`` or ``get_batch``."""
        if not (self.supports_indexed_access() or self.supports_streaming()):
            raise SourceContractError(
                f"{type(self).__name__} implements neither get_batch_at(start, size, key) "
                "(random access, compiled path) nor get_batch(batch_size) (forward-only "
                "streaming). Implement one of them to use it as a data source."
            )

    def get_batch_at(self, start: Any, size: int, key: Any | None = None) -> Batch:
        """``size`` records starting at global position ``start`` (stateless, traceable)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement get_batch_at")

    def record_indices_at(self, start: Any, size: int, key: Any | None = None) -> Any:
        """Stable index of each record ``get_batch_at(start, size, key)`` serves.

        The default names records by position (``(start + i) % len(self)``), right for
        a source that serves records in order. Sources that shuffle, partition or mix
        records override it.
        """
        positions = jnp.arange(size) + start
        try:
            n = len(self)  # type: ignore[arg-type]
        except TypeError:
            return positions
        return positions % n

    def get_batch_and_indices_at(
        self, start: Any, size: int, key: Any | None = None
    ) -> tuple[Batch, Any]:
        """``(get_batch_at(...), record_indices_at(...))`` in one call (traceable).

        Pipeline's compiled step calls this; a source that computes the indices to
        gather anyway (a shuffled one) overrides it so they are traced once.
        """
        return self.get_batch_at(start, size, key), self.record_indices_at(start, size, key)

    def get_batch(self, batch_size: int) -> Batch | None:
        """The next batch (at most ``batch_size`` records) of the current pass, or None."""
        raise NotImplementedError(f"{type(self).__name__} does not implement get_batch")

    def get_batch_with_indices(self, batch_size: int) -> tuple[Batch | None, Any | None]:
        """``get_batch`` plus each record's stable index (its position in the pass).

        This is what Pipeline's host path calls. The default wraps ``get_batch`` for
        forward-only streams: it keeps only this shard's records (every ``count``-th
        record of the pass, starting at ``index``), advances the source's position by
        the records it hands out, and, after ``set_state`` on a stream that cannot
        seek, first reads and discards the records the saved position covers. Host
        sources that seek (ArrayRecord) override it and keep their own position.
        """
        index, count = self._shard
        while self._skip_pending > 0:
            skipped = self._call_get_batch(min(self._skip_pending, max(batch_size, 256)))
            if skipped is None:
                raise StateError(
                    f"{type(self).__name__}: the restored state says "
                    f"{self._cursor.index} records were handed out this pass, but the "
                    "stream ended before reaching them; the state comes from a different "
                    "stream.",
                    field="current_index",
                )
            read = batch_length(skipped)
            self._skip_pending -= read
            self._stream_position += read
        while True:
            raw = self._call_get_batch(batch_size * count)
            if raw is None:
                return None, None
            if count > 1:
                raw = self._complete_rounds(raw, count)
                if raw is None:
                    return None, None
            read = batch_length(raw)
            positions = np.arange(self._stream_position, self._stream_position + read)
            self._stream_position += read
            if count == 1:
                self._cursor.advance(read)
                return raw, positions
            keep = np.flatnonzero(positions % count == index)
            if len(keep):
                self._cursor.advance(len(keep))
                return take_records(raw, keep), positions[keep]

    def _complete_rounds(self, raw: Batch, count: int) -> Batch | None:
        """Extend ``raw`` to whole rounds of ``count`` records, or cut the last partial
        round where the stream ends, so every shard hands out the same number of records.
        """
        parts = [raw]
        have = batch_length(raw)
        while (self._stream_position + have) % count:
            extra = self._call_get_batch(count - (self._stream_position + have) % count)
            if extra is None:  # the stream ended inside a round: no shard takes it
                have -= (self._stream_position + have) % count
                if have == 0:
                    return None
                return take_records(concat_batches(parts), np.arange(have))
            parts.append(extra)
            have += batch_length(extra)
        return concat_batches(parts)

    def _call_get_batch(self, batch_size: int) -> Batch | None:
        try:
            batch = self.get_batch(batch_size)
        except StopIteration:
            return None
        if batch is not None and batch_length(batch) == 0:
            return None
        return batch

    def set_shard(self, index: int, count: int) -> None:
        """Serve only share ``index`` of ``count`` of every epoch (Pipeline calls this).

        Random-access sources serve the contiguous block ``shard_bounds(len)`` of each
        epoch's (shuffled) order, so shares are disjoint and equally long; the last
        ``len % count`` positions of each epoch are left out. Streams keep every
        ``count``-th record starting at ``index``, in whole rounds of ``count``
        records (a partial last round is left out), so shares are equally long.
        """
        if not (isinstance(count, int) and count >= 1 and isinstance(index, int) and 0 <= index < count):
            raise ValueError(
                f"shard index must satisfy 0 <= index < count, got index={index!r}, "
                f"count={count!r}."
            )
        self._shard = (index, count)

    @property
    def shard(self) -> tuple[int, int]:
        """``(index, count)`` of the share of each epoch this source serves."""
        return self._shard

    def shard_bounds(self, length: int) -> tuple[int, int]:
        """``[lo, hi)`` epoch positions of this shard for a source of ``length`` records."""
        index, count = self._shard
        if count == 1:
            return 0, length
        share = length // count
        return index * share, (index + 1) * share

    def start_epoch(self, epoch: int) -> None:
        """Position a host source at the start of pass ``epoch`` (Pipeline calls this).

        Subclasses that restart their stream here call ``super().start_epoch(epoch)``.
        """
        self._cursor.start_epoch(epoch)
        self._stream_position = 0
        self._skip_pending = 0

    # ------------------------------------------------------------- resources
    def close(self) -> None:
        """Release what the source holds (reader threads, open files or streams).

        The default ends the current pass (``close_epoch()`` where the source has
        one); sources that own threads or files override it. Calling it twice is safe.
        """
        closer = getattr(self, "close_epoch", None)
        if closer is not None:
            closer()

    def __enter__(self) -> DataSourceModule:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def element_spec(self) -> dict[str, Any]:
        """Per-record keys, shapes and dtypes the source's batches carry.

        The default traces ``get_batch_at(0, 1)`` abstractly; streaming sources must
        override it.
        """
        if not self.supports_indexed_access():
            raise NotImplementedError(
                f"{type(self).__name__} must implement element_spec() to declare what its "
                "batches carry."
            )
        shapes = jax.eval_shape(lambda: self.get_batch_at(0, 1, None))
        return {k: array_to_spec_strip_leading(v) for k, v in shapes.items()}

    def checked_element_spec(self) -> dict[str, Any]:
        """``element_spec()`` read once per source and x64 setting, 64-bit fields refused."""
        per_source = _SPEC_CACHE.setdefault(self, {})
        x64 = x64_enabled()
        if x64 not in per_source:
            spec = dict(self.element_spec())
            check_spec_x64(spec, where=f"{type(self).__name__}.element_spec()")
            per_source[x64] = spec
        return per_source[x64]

    # ------------------------------------------------------- epochs and position
    @property
    def num_epochs(self) -> int:
        """Passes that direct iteration makes (``config.num_epochs``; -1 unbounded)."""
        return int(getattr(self.config, "num_epochs", 1))

    def _length_or_none(self) -> int | None:
        try:
            return len(self)  # type: ignore[arg-type]
        except TypeError:
            return None

    def get_state(self) -> dict[str, Any]:
        """A small JSON-able dict of the source's position."""
        return self._cursor.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`get_state` dict (on this or a freshly built source)."""
        if not isinstance(state, dict):
            raise StateError(
                f"{type(self).__name__}.set_state expects the dict get_state() returned, "
                f"got {type(state).__name__}."
            )
        self._cursor.set_state(state, length=self._length_or_none(), where=type(self).__name__)
        if not self.supports_indexed_access():
            # A forward-only stream restarts its pass from the beginning and skips what
            # this shard's handed-out records span (count raw records per kept record).
            self._skip_pending = self._cursor.index * self._shard[1]
            self._stream_position = 0

    # ------------------------------------------------------- iterator protocol
    def _exhausted(self) -> bool:
        n = self._length_or_none()
        if n is None:
            return False
        lo, hi = self.shard_bounds(n)
        epochs = self.num_epochs
        cursor = self._cursor
        return epochs >= 0 and cursor.epoch >= epochs - 1 and cursor.index >= hi - lo

    def __iter__(self) -> DataSourceModule:
        """Iterate records from the current position; restarts a finished source."""
        self.check_contract()
        if self._exhausted():
            self._cursor.start_epoch(0)
        return self

    def __next__(self) -> Any:
        cursor = self._cursor
        if self.supports_indexed_access():
            lo, hi = self.shard_bounds(len(self))  # type: ignore[arg-type]
            if cursor.index >= hi - lo:
                if self.num_epochs >= 0 and cursor.epoch + 1 >= self.num_epochs:
                    raise StopIteration
                cursor.start_epoch(cursor.epoch + 1)
            if hi == lo:
                raise StopIteration
            record, index = self._read_record(cursor.epoch, lo + cursor.index)
            cursor.advance(1)
        else:
            self.check_contract()
            batch, indices = self.get_batch_with_indices(1)
            if batch is None:
                if self.num_epochs >= 0 and cursor.epoch + 1 >= self.num_epochs:
                    raise StopIteration
                self.start_epoch(cursor.epoch + 1)
                batch, indices = self.get_batch_with_indices(1)
                if batch is None:
                    raise StopIteration
            record = {k: v[0] for k, v in batch.items()}
            index = cursor.index - 1 if indices is None else int(np.asarray(indices)[0])
        if getattr(self.config, "track_metadata", False):
            return Element(
                data=record,
                metadata=RecordMetadata(index=int(index), epoch=cursor.epoch, source=self.name),
            )
        return record

    def _read_record(self, epoch: int, index: int) -> tuple[Batch, int]:
        """One record at ``index`` of pass ``epoch`` of an indexed source, and its stable index."""
        n = len(self)  # type: ignore[arg-type]
        start = epoch * n + index
        batch = self.get_batch_at(start, 1, None)
        stable = int(np.asarray(self.record_indices_at(start, 1, None))[0])
        return {k: v[0] for k, v in batch.items()}, stable


