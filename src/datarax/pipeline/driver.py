"""What one pass of a pipeline drives: a compiled driver or a cursor driver, chosen once.

:class:`~datarax.pipeline.driver_compiled.CompiledDriver` computes batches from positions
inside the compiled step; :class:`~datarax.pipeline.driver_cursor.CursorDriver` peeks
them from a cursor on the host and commits each as handed out. A driver never keeps the
position: the source does.
"""

from __future__ import annotations

from typing import Any

from datarax.pipeline.ahead import DispatchAhead
from datarax.typing import Batch


class SourceMoved(Exception):
    """The source was moved or read from outside since the driver prepared its batches:
    continue from where it stands. Internal."""


class Driver:
    """One pass's batches, read one way; ``ahead``: its worker, parked in ``reuse`` at the end."""

    ahead: DispatchAhead | None = None
    reuse: Any

    def next_batch(self) -> tuple[Batch, int]:
        """The next batch handed out and its record count; ``StopIteration`` at the pass's
        end, :class:`SourceMoved` when the source was moved from outside."""
        raise NotImplementedError

    def release(self) -> None:
        """Stop its worker and end its reading session (the position is kept)."""
        ahead, self.ahead = self.ahead, None
        if ahead is not None:
            ahead.stop()

    def end(self) -> None:
        """The pass ended cleanly: its finished worker is parked for the next pass."""
        ahead = self.ahead
        if ahead is not None and ahead.finished:
            self.ahead = None
            self.reuse.park(ahead)
        self.release()
