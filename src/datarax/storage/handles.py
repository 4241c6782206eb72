"""``OpenHandles``: the open handles on a set of files, one per file, shared by the threads
reading it, kept for later reads and closed when idle over a limit.

Not thread-safe: :class:`~datarax.storage.shards.RemoteShards` calls it under its own lock
and closes the handles it hands back outside that lock (:func:`close_all`).

Example:
    >>> import io
    >>> handles = OpenHandles(limit=1)
    >>> for i in range(2):
    ...     record, _ = handles.add(i, io.BytesIO(bytes([i])), None)
    ...     handles.done(record)
    >>> idle = handles.trim()  # over the limit: the least recently used idle handle
    >>> [h.getvalue() for _, h in idle], sorted(handles.files())
    ([b'\\x00'], [1])
    >>> close_all(idle + handles.close())
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

__all__ = ["Closer", "Handle", "OpenHandles", "close_all"]

Closer = Callable[[Any], None]


@dataclasses.dataclass
class Handle:
    """One open handle (``value``), its ``closer`` and how many readers use it now."""

    value: Any
    closer: Closer
    users: int = 0


class OpenHandles:
    """Open handles by file index, at most ``limit`` kept when idle; handles let go are
    returned as ``(closer, handle)`` pairs for :func:`close_all`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: collections.OrderedDict[int, Handle] = collections.OrderedDict()
        self._orphans: list[tuple[Closer, Any]] = []  # let go while in use: closed by close()

    def __contains__(self, i: int) -> bool:
        return i in self._open

    def files(self) -> set[int]:
        """The files with an open handle."""
        return set(self._open)

    def take(self, i: int) -> Handle | None:
        """File ``i``'s open handle with one more user, or None when it has none."""
        record = self._open.get(i)
        if record is not None:
            record.users += 1
            self._open.move_to_end(i)
        return record

    def add(self, i: int, value: Any,
            closer: Closer | None) -> tuple[Handle, list[tuple[Closer, Any]]]:
        """Keep ``value`` as file ``i``'s handle, with one user (another reader's handle
        instead when it opened it meanwhile, ``value`` handed back to close)."""
        record = self.take(i)
        if record is not None:
            return record, [(closer or _close, value)]
        record = self._open[i] = Handle(value, closer or _close, users=1)
        return record, []

    def done(self, record: Handle) -> None:
        """One user of ``record`` (from :meth:`take` or :meth:`add`) less."""
        record.users -= 1

    def pop(self, i: int) -> list[tuple[Closer, Any]]:
        """Let file ``i``'s handle go: handed back when idle, else closed by :meth:`close`."""
        record = self._open.pop(i, None)
        if record is None:
            return []
        if record.users:
            self._orphans.append((record.closer, record.value))
            return []
        return [(record.closer, record.value)]

    def pop_attached(self, i: int) -> list[tuple[Closer, Any]]:
        """:meth:`pop`, but a handle on a copy of its own (``detached``) stays open."""
        record = self._open.get(i)
        if record is not None and getattr(record.value, "detached", False):
            return []
        return self.pop(i)

    def trim(self) -> list[tuple[Closer, Any]]:
        """Let the least recently used idle handles go until at most ``limit`` are kept."""
        out = []
        for i in list(self._open):
            if len(self._open) <= self.limit:
                break
            if self._open[i].users == 0:
                record = self._open.pop(i)
                out.append((record.closer, record.value))
        return out

    def close(self) -> list[tuple[Closer, Any]]:
        """Let every handle go, in use or not (the reader is being closed)."""
        out = [(r.closer, r.value) for r in self._open.values()] + self._orphans
        self._open.clear()
        self._orphans = []
        return out


def _close(handle: Any) -> None:
    handle.close()


def close_all(handles: list[tuple[Closer, Any]]) -> None:
    """Close each ``(closer, handle)``; a failing close is ignored (its reads raised)."""
    for close, handle in handles:
        with contextlib.suppress(Exception):
            close(handle)
