"""The cursor driver: a pass's batches pulled on the host through a cursor.

:class:`CursorDriver` peeks batches from a cursor, prepares them
(:meth:`~datarax.pipeline.host_pass.HostPass.produce`) and commits each as it hands it
out: ahead on a worker where the source opens cursors, else on the loop's thread through
:class:`DirectReads` (or a filtered pass's :class:`FilteredReads`).
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from typing import Any

import jax
import numpy as np

from datarax.core.batch import batch_length, concat_batches, take_records
from datarax.core.cursor import ReadAheadCursor, SessionEnded
from datarax.core.operator import RecordFilter
from datarax.core.reading import Reading, cursor_of
from datarax.core.spec import checked_batch
from datarax.core.stages import filtered
from datarax.pipeline.ahead import DispatchAhead, run_ahead
from datarax.pipeline.arguments import no_batch_error
from datarax.pipeline.devices import stage_device
from datarax.pipeline.driver import Driver, SourceMoved
from datarax.pipeline.host_pass import HostPass, has_list_leaf, padded_rows, padded_size
from datarax.pipeline.pass_spec import PassSpec
from datarax.pipeline.plan import PassContext
from datarax.sources.skip_ledger import skipped_in_epoch
from datarax.typing import Batch

#: the reads reading each host source on the loop's thread now (held weakly)
_READING: weakref.WeakKeyDictionary[Any, weakref.ref[Any]] = weakref.WeakKeyDictionary()
_READING_LOCK = threading.RLock()  # re-entrant: a collection may run inside it


class DirectReads:
    """A cursor over a source read where it is asked: ``peek`` reads (the source moves as
    it serves), ``commit`` moves nothing; ``release`` ends only its own reading."""

    current = True  # a source moved from outside is seen by its position

    def __init__(self, source: Any, reading: Reading) -> None:
        self.source = source
        self.closes_epoch = reading.closes_epoch
        self.done = False  # the source served its last batch of the pass
        with _READING_LOCK:
            _READING[source] = weakref.ref(self)

    def read(self, want: int) -> tuple[Batch, np.ndarray] | None:
        """Up to ``want`` records from where the source stands (None: the pass is over)."""
        if self.done:
            return None
        source = self.source
        start = source.index
        batch, indices = source.get_batch_with_indices(want)
        if batch is None:
            self.done = True
            return None
        batch = dict(batch)
        count = batch_length(batch)
        if indices is None:
            indices = np.arange(start, start + count)
        return batch, np.asarray(indices)

    def peek(self, batch_size: int) -> tuple[Batch, np.ndarray, int] | None:
        """Exactly ``batch_size`` records (of those :meth:`kept`), or fewer only where
        the pass ends."""
        parts: list[tuple[Batch, np.ndarray]] = []
        have = 0
        while have < batch_size:
            at = self.source.index
            read = self.read(batch_size - have)
            if read is None:
                break
            part = self.kept(*read, at)
            if part is not None:
                parts.append(part)
                have += batch_length(part[0])
        if not parts:
            return None
        if len(parts) == 1:
            return (*parts[0], self.source.index)
        return (concat_batches([b for b, _ in parts]),
                np.concatenate([i for _, i in parts]), self.source.index)

    def kept(self, batch: Batch, indices: np.ndarray, at: int) -> tuple[Batch, np.ndarray] | None:
        """The records of a read (at position ``at``) a batch holds: all of them."""
        return batch, indices

    def commit(self, end: int | None) -> None:
        """Nothing to move: the source moved as it served."""

    def ready(self, batch_size: int) -> bool:
        return False

    def release(self) -> None:
        with _READING_LOCK:
            reading = _READING.get(self.source)
            if reading is not None and reading() in (self, None):
                _READING.pop(self.source, None)
                if self.closes_epoch:
                    self.source.close_epoch()


class FilteredReads(DirectReads):
    """The cursor of a filtered pass over a host source or stream: records read
    ``batch_size - kept so far`` at a time (see :mod:`datarax.pipeline.filtered`)."""

    def __init__(self, context: PassContext, epoch: int) -> None:
        super().__init__(context.source, context.reading)
        self.plan, self.stats, self.epoch = context.plan, context.stats, epoch
        self.filter: RecordFilter = list(context.stages)[0]
        self.verdicts = (0, 0)  # (kept, covered) of the batch peeked last
        self.pass_spec = PassSpec(self.source)  # read at each read (x64 may switch between)

    def peek(self, batch_size: int) -> tuple[Batch, np.ndarray, int] | None:
        source = self.source
        position, skips = source.index, skipped_in_epoch(source)
        read = super().peek(batch_size)
        # positions covered, less the records the source skipped as bad (no verdict)
        covered = source.index - position - max(skipped_in_epoch(source) - skips, 0)
        self.verdicts = (0 if read is None else batch_length(read[0]), covered)
        return read

    def kept(self, batch: Batch, indices: np.ndarray, at: int) -> tuple[Batch, np.ndarray] | None:
        picked = np.flatnonzero(self._keep(batch, at))
        return (take_records(batch, picked), indices[picked]) if len(picked) else None

    def commit(self, end: int | None) -> None:
        (kept, covered), self.verdicts = self.verdicts, (0, 0)
        self.stats.count_filtered(kept, covered - kept)

    def _keep(self, raw: Batch, at: int) -> np.ndarray:
        """One boolean per record read (validated first: the predicate sees checked data)."""
        source, size = self.source, self.plan.batch_size
        where = f"{type(source).__name__} records at {at} of epoch {self.epoch}"
        answers = self.pass_spec
        spec = answers.read()
        with self.stats.timer("validate"):
            plain = checked_batch(raw, spec, answers.fields, size, where=where)
        # a plain batch (exactly the spec's number arrays) has no host leaf to ask about
        if self.filter.on_host or (plain is None and (answers.text or has_list_leaf(raw))):
            return self.filter.keep_records(
                raw, f"Pipeline stage 0, the {batch_length(raw)} records {type(source).__name__} "
                f"read from position {at} of epoch {self.epoch}")
        rows = max(padded_size(size, source), batch_length(raw))
        padded = jax.device_put(jax.tree.map(lambda v: padded_rows(v, rows), raw),
                                stage_device(self.plan))  # the CPU for stages_on="host"
        return np.asarray(host_keep(self.filter)(padded))[:batch_length(raw)].astype(bool)


class CursorDriver(Driver):
    """The batches of pass ``epoch`` of a cursor-mode source, from where it stands;
    filtered (through :class:`FilteredReads`) where stage ``at`` is a ``FilterOperator``."""

    def __init__(self, context: PassContext, epoch: int, at: int | None = None) -> None:
        source = self.source = context.source
        self.ahead: DispatchAhead | None = None
        self.reuse = context.session.pass_reuse  # the last pass's worker, parked for this one
        cursor: ReadAheadCursor | None
        if at is not None:
            stages = list(context.stages)
            post = [filtered] + stages[1:] if len(stages) > 1 else []
            host = HostPass(dataclasses.replace(context, stages=post), epoch, filtered=True)
            cursor = FilteredReads(context, epoch)
        else:
            host = HostPass(context, epoch)
            cursor = cursor_of(source, context.reading)
            if cursor is not None:  # read ahead on the worker (None: prefetch=0)
                self.ahead = run_ahead(host.produce(cursor), context.plan.prefetch,
                                       self.reuse.parked())
            else:
                cursor = DirectReads(source, context.reading)
        self.cursor: ReadAheadCursor = cursor
        # on the loop's thread: one batch at a time, read when asked for
        self.produce = host.produce(cursor, group=False) if self.ahead is None else None
        self.expect = (source.epoch, source.index)
        self.batch_size = context.plan.batch_size

    def _take(self) -> Any:
        if self.produce is None:
            return self.ahead.get()  # type: ignore[union-attr]
        made = self.produce()
        return made[0] if made else None

    def next_batch(self) -> tuple[Batch, int]:
        source, cursor = self.source, self.cursor
        if (source.epoch, source.index) != self.expect or not cursor.current:
            raise SourceMoved  # moved or read from outside
        try:
            item = self._take()
        except SessionEnded:  # ended under the worker: the source was moved or read
            raise SourceMoved from None
        if item is not None and not cursor.current:
            raise SourceMoved  # read for the old session (handing it out would not count it)
        if item is None:  # the pass is over: the source stands at its end
            cursor.commit(None)
            raise StopIteration
        end, batch = item
        cursor.commit(end)  # handed out: the source's position moves past it
        start, self.expect = self.expect[1], (self.expect[0], end)
        if batch is None:  # the short last batch, dropped (drop_remainder)
            if start == 0 and end > 0 and not isinstance(cursor, FilteredReads):
                # a whole pass shorter than a batch: no batch ever (as check_share refuses)
                raise no_batch_error(source, end, self.batch_size, source.shard.count,
                                     skipped=source.get_state().get("skipped", 0))
            raise StopIteration
        if self.ahead is not None:
            self.ahead.resume()
        return batch, batch_length(batch)

    def release(self) -> None:
        super().release()
        self.cursor.release()  # only this pass's session, if still open


_KEEP: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def host_keep(filt: RecordFilter) -> Any:
    """The compiled predicate of ``filt`` over a numpy batch (one per operator)."""
    fn = _KEEP.get(filt)
    if fn is None:
        fn = jax.jit(filt.keep)
        _KEEP[filt] = fn
    return fn
