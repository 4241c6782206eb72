"""What one pass of a pipeline drives: a compiled driver or a cursor driver, chosen once.

A :class:`~datarax.pipeline.iterator.PipelineIterator` serves its batches through one
driver, picked from the plan's read mode (:mod:`datarax.core.reading`, decided when the
pipeline was built) and whether a ``FilterOperator`` decides what a batch holds:

* compiled — :class:`~datarax.pipeline.driver_compiled.CompiledDriver`: positions ->
  batch inside the compiled step (:mod:`datarax.pipeline.dispatch`; a source keeping
  text on the host gets its text joined and its stages run on the host), ``prefetch``
  batches dispatched ahead on a worker (placed on the ``sharding=`` mesh as they are);
  filtered, the dispatch packs the kept records
  (:class:`~datarax.pipeline.filtered.FilteredDispatch`);
* cursor — :class:`~datarax.pipeline.driver_cursor.CursorDriver`: batches peeked from a
  cursor on the host and committed as handed out, on a worker ``prefetch`` batches
  ahead, or on the loop's thread (``prefetch=0``, or a source read where it is asked);
  filtered, the cursor keeps only the records the predicate keeps
  (:class:`~datarax.pipeline.filtered.FilteredReads`).

A driver never keeps the position: the source does. ``next_batch()`` hands out the
next batch (the source's position moved past it) with its record count, and raises
``StopIteration`` at the pass's end or :class:`SourceMoved` when what it prepared
belongs to a position the source was moved away from (the iterator then opens a new
driver where the source stands).
"""

from __future__ import annotations

from typing import Any

from datarax.pipeline.ahead import DispatchAhead
from datarax.typing import Batch


class SourceMoved(Exception):
    """The source was moved or read from outside (``set_state``, ``nnx.update``, a direct
    read) since the driver prepared its batches: continue from where it stands.
    Internal: never reaches the user."""


class Driver:
    """One pass's batches, read one way (see the module); ``ahead`` its worker (None:
    none), handed to the session's ``reuse`` (a ``PassReuse``) when the pass ends."""

    ahead: DispatchAhead | None = None
    reuse: Any

    def next_batch(self) -> tuple[Batch, int]:
        """The next batch handed out and its record count (the source's position moved
        past it); ``StopIteration`` at the pass's end, :class:`SourceMoved` when the
        source was moved from outside."""
        raise NotImplementedError

    def release(self) -> None:
        """Stop its worker and end its reading session (the position is kept)."""
        ahead, self.ahead = self.ahead, None
        if ahead is not None:
            ahead.stop()

    def end(self) -> None:
        """The pass ended cleanly: its worker, done, kept for the next pass of this
        pipeline (the next epoch's: no thread to start); the rest released."""
        ahead = self.ahead
        if ahead is not None and ahead.finished:
            self.ahead = None
            self.reuse.park(ahead)
        self.release()
