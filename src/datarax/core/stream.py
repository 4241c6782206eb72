"""Forward-only streams: :class:`StreamSource` and the one way datarax reads them.

A stream hands out records in order with ``get_batch(batch_size)`` and cannot seek.
:class:`StreamPass` makes it a Pipeline source: with ``set_shard(i, P)`` the pass is read
in whole rounds of ``P`` records, record ``i`` of each kept; a resume at ``(e, k)``
restarts the pass and discards ``k * P`` records; ``restart(epoch)`` is called before
every pass, and a stream that did not rewind is refused, as is a new pass asked of a
stream without ``restart`` from inside its pass (it would serve that pass's rest).

Example:
    >>> import numpy as np
    >>> from datarax.core.spec import array_to_spec_strip_leading
    >>> class Count(StreamSource):
    ...     def __init__(self, n):
    ...         super().__init__(StructuralConfig())
    ...         self.n, self.next_value = n, 0
    ...     def restart(self, epoch):
    ...         self.next_value = 0
    ...     def get_batch(self, batch_size):
    ...         if self.next_value >= self.n:
    ...             return None
    ...         x = np.arange(self.next_value, min(self.n, self.next_value + batch_size), dtype=np.int32)
    ...         self.next_value += len(x)
    ...         return {"x": x}
    ...     def element_spec(self):
    ...         return {"x": array_to_spec_strip_leading(np.zeros(1, np.int32))}
    >>> src = Count(5)
    >>> src.get_batch_with_indices(3)[0]["x"].tolist(), src.get_state()
    ([0, 1, 2], {'current_index': 3, 'current_epoch': 0})
    >>> fresh = Count(5); fresh.set_state(src.get_state())
    >>> fresh.get_batch_with_indices(3)[0]["x"].tolist()
    [3, 4]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from flax import nnx

from datarax.core.batch import batch_length, concat_batches, take_records
from datarax.core.config import StructuralConfig, check_count
from datarax.core.data_source import DataSourceModule, SourceKind
from datarax.core.lengths import LengthIfKnown
from datarax.core.errors import ConfigError, SourceContractError, StateError
from datarax.core.module import HostState
from datarax.core.position import past_the_end, seek_is_for_owner, seek_past_the_end
from datarax.core.spec import flatten_fields
from datarax.host.counts import count_words
from datarax.typing import Batch

__all__ = ["CannotGoBack", "StreamSource", "StreamPass", "StructuralConfig"]


class CannotGoBack(SourceContractError):
    """A stream without ``restart(self, epoch)`` was asked to go back (to records of its
    pass it already read, or to a new pass from inside its pass); it read nothing for the
    ask, so whoever moved its position may move it back. ``stream`` names its type."""

    def __init__(self, message: str, *, stream: str | None = None) -> None:
        super().__init__(message)
        self.stream = stream


def _check_batch_form(source: Any, batch: Any) -> None:
    """Refuse a ``get_batch`` result that is not a dict of fields with records on axis 0."""
    name = f"{type(source).__name__}.get_batch"
    if not isinstance(batch, Mapping):
        raise SourceContractError(
            f"{name} returned {type(batch).__name__}, not a batch: return a dict of fields, "
            "each with the records along its first axis (or None at the pass's end)."
        )
    for path, value in flatten_fields(batch).items():
        if not isinstance(value, (list, tuple)) and np.ndim(value) == 0:
            raise SourceContractError(
                f"{name} returned field '{path}' as one value ({type(value).__name__}), "
                "not a batch of records: give each field the records along its first "
                f"axis, e.g. {{'{path}': np.asarray([value])}} for a batch of one."
            )


def _other_stream(source: StreamSource) -> str:
    """Where a restored position past the re-read pass's end comes from, for the message."""
    if type(source).restart is not StreamSource.restart:
        return "a different stream"
    return (f"a different stream, or {type(source).__name__} was not started over: on a "
            "restore datarax calls restart(epoch) and re-reads the records the position "
            "covers, so a stream that keeps its own place (a counter, an open file, an "
            "nnx.Variable restored with the rest) must implement restart(self, epoch) to "
            "go back to the pass's first record")


class StreamSource(LengthIfKnown, DataSourceModule, kind_base=SourceKind.STREAM):
    """Base of forward-only streams (sources read in order, batch by batch).

    Implement ``get_batch(batch_size)`` (at most ``batch_size`` records, text as lists of
    ``str``; ``None`` at the pass's end), ``element_spec`` and, for more than one pass,
    ``restart(epoch)``. ``len()`` raises ``TypeError`` unless the stream defines
    ``__len__`` or :meth:`length_or_reason`."""

    def __init__(
        self,
        config: StructuralConfig,
        *,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(config, rngs=rngs, name=name)
        self.__pass = StreamPass()

    def length_or_reason(self) -> int | str:
        """Why a stream has no length (a stream that knows its length says it here)."""
        return ("it is a stream, read forward only; len() does not read a pass to count its "
                "records (count them as you iterate).")

    def get_batch(self, batch_size: int) -> Batch | None:  # pragma: no cover - abstract
        """The next batch (at most ``batch_size`` records) of the current pass, or None."""
        raise NotImplementedError(f"{type(self).__name__} must implement get_batch(batch_size)")

    def restart(self, epoch: int) -> None:
        """Begin pass ``epoch`` from the stream's first record (reopen a file, re-create a
        generator); called before every pass. The default does nothing."""

    def supports_indexed_access(self) -> bool:
        """False: a stream is read forward only."""
        return False

    def get_batch_with_indices(self, batch_size: int) -> tuple[Batch | None, Any | None]:
        """This shard's next batch and each record's position in the pass (stable index)."""
        size = check_count(batch_size, f"{type(self).__name__} batch_size", 1)
        return self.__pass.read(self, size)

    def seek(self, epoch: int, index: int = 0) -> None:
        """Stand at record ``index`` of pass ``epoch`` (re-read on the next read); one past
        the pass's end is refused then, worded as this seek."""
        stood = self.datarax_position.where()
        super().seek(epoch, index)
        if seek_is_for_owner():  # a wrapper stands its child where its own position says
            self.__pass.sought = None
        elif self.datarax_position.where() != stood:  # not a re-seek after nnx.update
            self.__pass.sought = self.datarax_position.where()

    def _sought(self) -> tuple[int, int] | None:
        """The position the last seek of this source itself set: None after a restore, a
        wrapper standing it (:func:`~datarax.core.position.seeking_for_owner`) or none."""
        return self.__pass.sought

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self.__pass.sought = None  # a restored position past the end is worded as one

    def _moved(self) -> None:
        self.__pass.reposition()


class StreamPass(HostState):
    """Reading state of one stream in this process (never saved: derived from the position)."""

    def __init__(self) -> None:
        self.read_in_pass = 0  # raw records read from the stream this pass (all shards)
        self.previous_pass: tuple[int, int] | None = None  # (epoch, records read) of the last pass
        self.opened_epoch: int | None = None  # the pass the stream was last opened for
        self.needs_open = True  # the position moved from outside: open the pass again
        self.to_skip = 0  # raw records to read and discard before serving
        self.sought: tuple[int, int] | None = None  # the position a seek of this source set
        self.ran_dry = False  # the opened pass's stream returned its end

    def reposition(self) -> None:
        """The source's position was set from outside: reopen the pass on the next read."""
        self.needs_open = True

    def _open(self, source: StreamSource) -> None:
        epoch, index = source.epoch, source.index
        if type(source).restart is StreamSource.restart and not self.ran_dry:
            if self.opened_epoch == epoch:  # inside a pass it cannot start over
                self._stay(source, epoch, index)
                return
            if self.read_in_pass:  # the rest of its pass would be served as another
                raise _inside_pass(source, self.opened_epoch, self.read_in_pass, epoch)
        if self.opened_epoch is not None:
            self.previous_pass = (self.opened_epoch, self.read_in_pass)
        source.restart(epoch)
        self.opened_epoch = epoch
        self.needs_open = False
        self.read_in_pass = 0
        self.ran_dry = False
        self.to_skip = index * source.shard.count

    def _stay(self, source: StreamSource, epoch: int, index: int) -> None:
        """Stand a stream that cannot restart at ``index`` of the pass it is reading: from
        where it is, reading forward; records it read past ``index`` cannot be read again."""
        behind = self.read_in_pass - index * source.shard.count
        if behind > 0:
            raise CannotGoBack(
                f"{type(source).__name__} cannot go back to record {index} of pass {epoch}: "
                f"it already read {count_words(behind, 'record')} past it (a batch that "
                "failed after its read, batches read ahead with prefetch, peek(), a "
                "ShuffleBufferSource or InterleaveSource over it, which reads its records "
                "ahead), and without restart(self, epoch) they cannot be read again. "
                "Implement restart(self, epoch) to start the pass over (reopen the file, re-create "
                "the generator): datarax then reads up to the position again. Or build a "
                "new source and set_state a saved state.", stream=type(source).__name__,
            )
        self.needs_open = False
        self.to_skip = -behind

    def _get(self, source: StreamSource, batch_size: int, *, mid_read: bool = False) -> Batch | None:
        """The stream's next batch, or None (``mid_read``: the pass is not empty)."""
        try:
            batch = source.get_batch(batch_size)
        except StopIteration:
            return None
        except Exception as err:
            err.add_note(self._failed_read(source))
            raise
        if batch is not None:
            _check_batch_form(source, batch)
        if batch is None or batch_length(batch) == 0:
            self.ran_dry = True
            if not mid_read:
                self._check_rewound(source)
            return None
        return batch

    def _failed_read(self, source: StreamSource) -> str:
        """Where a raising ``get_batch`` stood and what the next read does (reopen the pass
        at the position when the stream can restart, as a restore would)."""
        epoch, index = source.epoch, source.index
        were = "was" if index == 1 else "were"
        where = (f"{type(source).__name__}.get_batch raised in pass {epoch} after "
                 f"{count_words(index, 'record')} {were} handed out")
        if type(source).restart is StreamSource.restart:
            return (f"{where}; it does not implement restart(self, epoch), so the next read "
                    "goes on from where the stream stands (records this call took from it "
                    f"are not read again): implement restart to read on from record {index}, "
                    "or build a new source and set_state a saved state.")
        self.needs_open = True
        return (f"{where}; the next read calls restart({epoch}) and continues at record "
                f"{index} of the pass.")

    def _check_rewound(self, source: StreamSource) -> None:
        """Refuse a second pass that is empty from its first read (the stream did not rewind)."""
        previous = self.previous_pass
        if self.read_in_pass or previous is None or previous[1] == 0:
            return
        again = (f"none when pass {previous[0]} was read again" if previous[0] == self.opened_epoch
                 else f"none in pass {self.opened_epoch}")  # a finished source iterated again
        raise SourceContractError(
            f"{type(source).__name__} served {previous[1]} records in pass {previous[0]} and "
            f"{again}: a forward-only stream must be rewound between "
            "passes. Implement restart(self, epoch) to start the stream over (reopen the "
            "file, re-create the generator), or build a new source for each pass."
        )

    def read(self, source: StreamSource, batch_size: int) -> tuple[Batch | None, np.ndarray | None]:
        """This shard's next records (at most ``batch_size``) and their positions in the pass."""
        if self.needs_open or self.opened_epoch != source.epoch:
            self._open(source)
        index, count = source.shard.index, source.shard.count
        while self.to_skip > 0:
            skipped = self._get(source, min(self.to_skip, max(batch_size, 256)))
            if skipped is None:
                where = (source.epoch, source.index)
                if self.sought == where:  # a seek past the end of the pass
                    raise seek_past_the_end(type(source).__name__, *where,
                                            holds=self.read_in_pass // source.shard.count)
                raise past_the_end(type(source).__name__, *where, _other_stream(source))
            read = batch_length(skipped)
            if read > self.to_skip:  # the stream ignored the size: keep the rest
                raise StateError(
                    f"{type(source).__name__}.get_batch({self.to_skip}) returned {read} "
                    "records; a stream must return at most batch_size records.",
                    field="current_index",
                )
            self.to_skip -= read
            self.read_in_pass += read
        while True:
            raw = self._get(source, batch_size * count)
            if raw is None:
                return None, None
            if count > 1:
                raw = self._complete_rounds(source, raw, count)
                if raw is None:
                    return None, None
            read = batch_length(raw)
            positions = np.arange(self.read_in_pass, self.read_in_pass + read)
            self.read_in_pass += read
            if count == 1:
                source.datarax_position.advance(read)
                return raw, positions
            keep = np.flatnonzero(positions % count == index)
            if len(keep):
                source.datarax_position.advance(len(keep))
                return take_records(raw, keep), positions[keep]

    def _complete_rounds(self, source: StreamSource, raw: Batch, count: int) -> Batch | None:
        """Extend ``raw`` to whole rounds of ``count`` records (cut a partial last round),
        so every shard hands out as many records."""
        parts = [raw]
        have = batch_length(raw)
        while (self.read_in_pass + have) % count:
            extra = self._get(source, count - (self.read_in_pass + have) % count, mid_read=True)
            if extra is None:  # the stream ended inside a round: no shard takes it
                if self.read_in_pass == 0 and have < count:
                    raise _shorter_than_round(source, have, count)
                have -= (self.read_in_pass + have) % count
                if have == 0:
                    return None
                return take_records(concat_batches(parts), np.arange(have))
            parts.append(extra)
            have += batch_length(extra)
        return concat_batches(parts)


def _inside_pass(source: StreamSource, opened: int | None, read: int, epoch: int,
                 ) -> CannotGoBack:
    """The error for a stream without ``restart`` asked for pass ``epoch`` while it stands
    inside pass ``opened``, ``read`` records in (its rest would be served as pass ``epoch``)."""
    name, length = type(source).__name__, source.length_or_reason()
    whole = (f"; here all {length} records its length says were read, but the loop "
             "stopped before asking for the end: a loop of len(pipeline) batches (zip, "
             "islice) or a take() of the whole pass"
             if isinstance(length, int) and 0 < length <= read else "")
    return CannotGoBack(
        f"{name} cannot begin pass {epoch}: it stands inside pass {opened}, "
        f"{count_words(read, 'record')} read, and does not implement restart(self, epoch), "
        f"so pass {epoch} would serve the rest of pass {opened}. Pass {opened} was left "
        "before the stream returned its end (a `for` after a `break` or a take() starts the "
        "next pass; a wrapper such as ShuffleBufferSource reads ahead of the batches handed "
        f"out{whole}). Implement restart(self, epoch) to start the stream over (reopen the file, "
        "re-create the generator), or build a new source for each pass. To serve the rest "
        f"of pass {opened} instead, call pipeline.set_state(pipeline.get_state()) before "
        "the next loop (unless a wrapper read the stream ahead), or keep the pass's "
        "iterator (it = iter(pipeline)) and loop over it again after a break.", stream=name,
    )


def _shorter_than_round(source: StreamSource, records: int, count: int) -> ConfigError:
    """The error for a pass of fewer records than shards."""
    return ConfigError(
        f"{type(source).__name__} is read by {count} processes (shard_count={count}) but "
        f"its pass holds {records} records: a stream is shared in whole rounds of {count} "
        "records, one per process, so no process would serve any. Use at most "
        f"{records} processes (shard_count), or a stream of at least {count} records.")
