"""``ReadAheadCursor``: how a pipeline reads a source's batches ahead of its position.

Invariant: a source's position counts what its consumer has received
(:mod:`datarax.core.position`), so batches read ahead must not move it. A pipeline's
worker thread *peeks* batches through the cursor ``batch_cursor()`` returns, and the
consumer's thread *commits* each one it hands out (moving the source's position and
skip count past it). Anything else that moves or reads the source (``set_state``,
``nnx.update``, a direct ``get_batch``, ``close``) ends the cursor's session: it turns
stale and the pipeline starts a new one from the source's position.

A session belongs to the pass that opened it: :meth:`ReadAheadCursor.release` ends the
cursor's own session and nothing else, so a pass let go late (an abandoned iterator
collected by the garbage collector, on whatever thread) never ends the reading of the
pass that took over the source. A peek for an ended session raises
:class:`SessionEnded`, which a pipeline never hands to its user: it continues from the
source's position.

``ready(batch_size) -> bool`` says whether ``peek(batch_size)`` would return without
waiting for a read: a pipeline takes every batch that is ready in one go (their device
copies made by one call); a cursor that cannot tell says False (one at a time).

Implementation: :class:`~datarax.sources.read_ahead.SessionCursor`, the one cursor of
host readers, Hugging Face streams and packed text (the read-ahead engine).

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
    """A peek for a reading session that was ended meanwhile (the source was moved,
    read or closed). Internal: a pipeline continues from the source's position."""


class ReadAheadCursor(Protocol):
    """Batches of one reading session of a source, read ahead of its position."""

    @property
    def current(self) -> bool:
        """False once something else moved or read the source (the session ended)."""
        ...

    def peek(self, batch_size: int) -> tuple[dict[str, Any], np.ndarray, int] | None:
        """``(batch, stable indices, end)`` of the batch after the last one peeked —
        ``end`` is the source's position once it is handed out — or None at the pass's
        end. Any one thread; raises ``SessionEnded`` once not :attr:`current`, and a
        bad record's error at the batch that would hold it."""
        ...

    def commit(self, end: int | None) -> None:
        """Hand out everything before position ``end`` (None: the rest of the pass):
        the consumer's thread, in order."""
        ...

    def ready(self, batch_size: int) -> bool:
        """Whether :meth:`peek` of ``batch_size`` would return without waiting for a
        read (False where the cursor cannot tell)."""
        ...

    def release(self) -> None:
        """End this cursor's reading session if it is still the open one (its read-ahead
        and reader threads let go; the position is kept); a newer session, opened by
        another pass or read, is left alone. Any thread."""
        ...
