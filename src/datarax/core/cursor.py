"""``ReadAheadCursor``: how a pipeline reads a source's batches ahead of its position.

Invariant: a source's position counts what its consumer has received, so read-ahead must
not move it. A worker thread *peeks* batches; the consumer's thread *commits* each one it
hands out. Anything else that moves or reads the source ends the cursor's session.
:meth:`ReadAheadCursor.release` ends only the cursor's own session, so a pass let go late
never ends the pass that took over. Implementation:
:class:`~datarax.sources.read_ahead.SessionCursor`.

Example:
    >>> import numpy as np
    >>> from datarax.sources import NpySource, NpySourceConfig
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "x.npy"); np.save(path, np.arange(5))
    >>> src = NpySource(NpySourceConfig(paths=path))
    >>> cursor: ReadAheadCursor = src.batch_cursor()
    >>> [cursor.peek(2)[2], cursor.peek(2)[2]], src.index  # read ahead: position unmoved
    ([2, 4], 0)
    >>> cursor.commit(2); src.index, cursor.current
    (2, True)
    >>> newer = src.batch_cursor()  # the next pass takes over the source ...
    >>> cursor.release(); newer.current  # ... and the old one's release leaves it alone
    True
    >>> src.close()
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np


class SessionEnded(RuntimeError):
    """A peek for a reading session that was ended meanwhile. Internal."""


class ReadAheadCursor(Protocol):
    """Batches of one reading session of a source, read ahead of its position."""

    @property
    def current(self) -> bool:
        """False once something else moved or read the source (the session ended)."""
        ...

    def peek(self, batch_size: int) -> tuple[dict[str, Any], np.ndarray, int] | None:
        """``(batch, stable indices, end)`` of the batch after the last one peeked
        (``end``: the position once handed out), or None at the pass's end; raises
        ``SessionEnded`` once not :attr:`current`."""
        ...

    def commit(self, end: int | None) -> None:
        """Hand out everything before position ``end`` (None: the rest of the pass)."""
        ...

    def ready(self, batch_size: int) -> bool:
        """Whether :meth:`peek` of ``batch_size`` would return without waiting for a
        read (False where the cursor cannot tell)."""
        ...

    def release(self) -> None:
        """End this cursor's session if it is still the open one (position kept); any thread."""
        ...
