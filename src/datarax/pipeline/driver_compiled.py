"""The compiled driver: a pass's batches computed from positions inside the compiled step.

:class:`CompiledDriver` runs a pass's dispatch ``prefetch`` dispatches ahead: on a worker
thread on :data:`WORKER_BACKENDS` (XLA:CPU runs a cheap program on the dispatching
thread), elsewhere on the loop's thread (dispatch is asynchronous there). An error met
dispatching ahead is raised by the ``next()`` of its own batch.
"""

from __future__ import annotations

import collections
from typing import Any


from datarax.pipeline.ahead import DispatchAhead
from datarax.pipeline.devices import default_device, place_batch, stage_device
from datarax.pipeline.dispatch import IndexedDispatch
from datarax.pipeline.driver import Driver, SourceMoved
from datarax.pipeline.filtered import FilteredDispatch
from datarax.pipeline.host_pass import check_finite
from datarax.pipeline.plan import PassContext
from datarax.typing import Batch

#: backends on which a worker thread, not the loop's, dispatches ahead
WORKER_BACKENDS = frozenset({"cpu"})


def step_backend(plan: Any) -> str:
    """The platform a pipeline's compiled steps run on.

    >>> from datarax.pipeline.plan import PipelinePlan
    >>> step_backend(PipelinePlan(4, False, 2, False, stages_on="host"))
    'cpu'
    """
    return (stage_device(plan) or default_device()).platform


class CompiledDriver(Driver):
    """The batches of pass ``epoch`` of a compiled source, from where it stands; filtered
    where stage ``at`` is a ``FilterOperator``."""

    def __init__(self, context: PassContext, epoch: int, at: int | None = None) -> None:
        self.context, self.source, self.plan = context, context.source, context.plan
        self.stats, self.epoch = context.stats, epoch
        self.reuse = context.session.pass_reuse
        self.queue: collections.deque[Any] = collections.deque()  # made here, not yet taken
        self.done = False  # the dispatch returned None
        self.failed: Exception | None = None  # met dispatching ahead, raised at its batch
        self.dispatch: IndexedDispatch | FilteredDispatch = (
            IndexedDispatch(context, epoch) if at is None else FilteredDispatch(context, epoch, at))
        on_worker = step_backend(self.plan) in WORKER_BACKENDS
        self.ahead: DispatchAhead | None = self.dispatch.start(
            self.plan.prefetch if on_worker else 0)
        self.expect = self.source.datarax_position.where()

    def _take(self) -> Any:
        if self.ahead is not None:  # prepared on the worker
            return self.ahead.get()
        queue = self.queue
        if not queue:
            if self.failed is not None:  # the batches before it were handed out
                raise self.failed
            if self.done or not self._dispatch():  # this batch's own error is raised now
                return None
        item = queue.popleft()
        # dispatch the next batches before handing this one out: they run while the loop trains
        depth = self.plan.prefetch * self.dispatch.group
        while len(queue) < depth and not self.done and self.failed is None:
            try:
                self._dispatch()
            except Exception as err:  # noqa: BLE001 - raised by the next() of its batch
                self.failed = err
        return item

    def _dispatch(self) -> bool:
        """Dispatch the next batch (or group) into the queue; False at the pass's end."""
        made = self.dispatch.dispatch_some()
        if made is None:
            self.done = True
            return False
        self.queue.extend(made)
        return True

    def next_batch(self) -> tuple[Batch, int]:
        source = self.source
        if source.datarax_position.where() != self.expect:
            raise SourceMoved  # what was dispatched ahead belongs to the old position
        item = self._take()
        if item is None:
            self.dispatch.finished()
            raise StopIteration
        covered, batch, count, stable, filtered = self.dispatch.served(item)
        if count < self.plan.batch_size and self.plan.drop_remainder and filtered:
            self.dispatch.counted(covered, count)  # a short filtered batch, dropped
            raise StopIteration
        if self.plan.check_finite:  # checked on this process's rows, then placed
            check_finite(source, self.epoch, batch, stable, source.index, filtered)
            batch = place_batch(self.plan, self.stats, batch, source.index, self.epoch)
        source.datarax_position.advance(covered)
        self.expect = (self.expect[0], self.expect[1] + covered)
        self.dispatch.counted(covered, count)
        if self.ahead is not None:
            self.ahead.resume()
        return batch, count

    def release(self) -> None:
        self.queue.clear()
        self.failed = None
        super().release()
