"""``ReaderCursor``: a :class:`~datarax.core.cursor.ReadAheadCursor` over one reading
session of a source's reader.

The base of :class:`~datarax.sources.random_access.BatchCursor` (a
:class:`~datarax.sources.host_reader.HostReader`) and
:class:`~datarax.sources.hf.streaming.StreamCursor` (a Hugging Face stream). Each says
how it peeks; they commit alike: the reader counts the batch handed out (its bad
records become skipped), the source's ``skipped`` follows the reader's count and its
position moves to where the reader then stands. They release alike: the session is the
pass's own, so :meth:`ReaderCursor.release` ends it only while it is still the reader's
open one (the reader checks that under its own lock).
"""

from __future__ import annotations

from typing import Any

import numpy as np


class ReaderCursor:
    """Batches of reading session ``session`` of ``reader`` (None: the pass was over
    when the cursor was made) for ``source`` standing in pass ``epoch``.

    ``reader``: ``session``, ``skipped`` (bad records before what was handed out) and
    ``commit(end)`` (None: the rest of the pass, which ends the session). A subclass
    defines ``peek``, :meth:`_reader_position` and :meth:`_end_session`.
    """

    def __init__(self, source: Any, reader: Any, epoch: int, session: int | None) -> None:
        self._source = source
        self._reader = reader
        self._epoch = epoch
        self._session = session

    @property
    def current(self) -> bool:
        """Whether the reader still serves this cursor's session."""
        return self._session is None or self._session == self._reader.session

    def ready(self, batch_size: int) -> bool:
        """False: this reader cannot tell whether a peek would wait (a subclass whose
        reader can says so)."""
        return False

    def _reader_position(self) -> int:
        """Where the reader's consumer stands in the pass (after a commit)."""
        raise NotImplementedError

    def _end_session(self, session: int) -> None:
        """End reading session ``session`` of the reader, if it is still the open one."""
        raise NotImplementedError

    def release(self) -> None:
        """End this cursor's reading session if it is still the reader's open one (its
        read-ahead and threads let go, the position kept); a newer session, of the pass
        that took over the source, is left alone. Any thread."""
        if self._session is not None:
            self._end_session(self._session)

    def commit(self, end: int | None) -> None:
        """Hand out everything before position ``end`` of the pass (None: its end,
        which also ends the reading session)."""
        source, reader = self._source, self._reader
        if self._session is None:  # nothing was left to read
            source.datarax_position.move(
                self._epoch, (source.epoch_size() or 0) if end is None else int(end)
            )
            return
        if not self.current:  # moved from outside: the position is already set there
            return
        reader.commit(end)
        skipped = source.skipped
        if int(skipped.get_raw_value()) != reader.skipped:
            # raw: once per batch on the consumer's thread, outside any trace
            skipped.set_raw_value(np.asarray(reader.skipped, np.int64))
        source.datarax_position.move(self._epoch, self._reader_position())
