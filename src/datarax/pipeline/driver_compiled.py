"""The compiled driver: a pass's batches computed from positions inside the compiled step.

:class:`CompiledDriver` runs a pass's dispatch (:class:`~datarax.pipeline.dispatch.IndexedDispatch`,
or a filtered pass's :class:`~datarax.pipeline.filtered.FilteredDispatch`) ``prefetch``
dispatches ahead on a worker (:mod:`datarax.pipeline.ahead`), or on the loop's thread
where there is none (``prefetch=0``, text joined on the host). The source's position
moves only when a batch is handed out (``advance`` by the positions it covers).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from datarax.pipeline.ahead import DispatchAhead
from datarax.pipeline.devices import place_batch
from datarax.pipeline.dispatch import IndexedDispatch, start_ahead
from datarax.pipeline.driver import SourceMoved
from datarax.pipeline.host_pass import check_finite
from datarax.pipeline.plan import PassContext
from datarax.typing import Batch

#: a batch as the driver hands it out: (positions covered, batch, records, their
#: stable indices (called for check_finite's message), whether its rows are filtered)
Served = tuple[int, Batch, int, Callable[[], Any], bool]


class CompiledDriver:
    """The batches of pass ``epoch`` of a compiled source, from where it stands (see
    :mod:`datarax.pipeline.driver`)."""

    def __init__(self, context: PassContext, epoch: int) -> None:
        self.context, self.source, self.plan = context, context.source, context.plan
        self.stats, self.epoch = context.stats, epoch
        self.dispatch: Any = self._open()
        self.ahead: DispatchAhead | None = self._start()
        self.queue: collections.deque[Any] = collections.deque()  # made here, not yet taken
        self.expect = self.source.datarax_position.where()

    def _open(self) -> Any:
        return IndexedDispatch(self.context, self.epoch)

    def _start(self) -> DispatchAhead | None:
        return start_ahead(self.dispatch, self.plan.prefetch)

    def _served(self, item: Any) -> Served:
        count, batch, start = item
        size = self.plan.batch_size
        return count, batch, count, lambda: self.source.record_indices_at(start, size, None), False

    def _counted(self, covered: int, count: int) -> None:
        """A batch of ``count`` records covering ``covered`` positions was handed out
        (or, past the pass's end, dropped)."""

    def _finished(self) -> None:
        """The dispatch has no more batches."""

    def _take(self) -> Any:
        if self.ahead is not None:  # prepared on the worker
            return self.ahead.get()
        while len(self.queue) <= self.plan.prefetch:
            made = self.dispatch.dispatch_some()
            if made is None:
                break
            self.queue.extend(made)
        return self.queue.popleft() if self.queue else None

    def next_batch(self) -> tuple[Batch, int]:
        source = self.source
        if source.datarax_position.where() != self.expect:
            raise SourceMoved  # what was dispatched ahead belongs to the old position
        item = self._take()
        if item is None:
            self._finished()
            raise StopIteration
        covered, batch, count, stable, filtered = self._served(item)
        if count < self.plan.batch_size and self.plan.drop_remainder and filtered:
            self._counted(covered, count)  # a short filtered batch, dropped
            raise StopIteration
        if self.plan.check_finite:  # checked on this process's rows, then placed
            check_finite(source, self.epoch, batch, stable, source.index, filtered)
            batch = place_batch(self.plan, self.stats, batch, source.index, self.epoch)
        source.datarax_position.advance(covered)
        self.expect = (self.expect[0], self.expect[1] + covered)
        self._counted(covered, count)
        if self.ahead is not None:
            self.ahead.resume()
        return batch, count

    def release(self) -> None:
        self.queue.clear()
        ahead, self.ahead = self.ahead, None
        if ahead is not None:
            ahead.stop()

    def end(self) -> None:
        ahead = self.ahead
        if ahead is not None and ahead.finished:
            # kept for the next pass of this pipeline (the next epoch's worker)
            self.ahead = None
            self.context.session.pass_reuse.park(ahead)
        self.release()
