"""The room a :class:`~datarax.storage.shards.RemoteShards` needs in its cache (a mixin of
``RemoteShards``, on that class's bookkeeping)."""

from __future__ import annotations

import os
import time
import weakref
from typing import Any

from datarax.storage.errors import CacheFullError
from datarax.storage.handles import close_all
from datarax.storage.urls import FileBlock

__all__ = ["ShardRoom"]

_POLL_S = 0.2  # a reader waiting on other readers of the folder looks again after this long
OPEN: weakref.WeakSet[Any] = weakref.WeakSet()  # this process's readers (messages)


class ShardRoom:
    """Room-keeping methods of :class:`~datarax.storage.shards.RemoteShards`."""

    _lock: Any
    _entries: Any
    _ahead: Any
    _order: Any
    _closed: bool

    def _check_room(self) -> None:
        """Refuse a cache too small for the files a reader uses at once."""
        sizes = sorted((o.size for o in self.objects), reverse=True)
        need = sum(sizes[:self.behind])
        if need <= self.cache.max_bytes:
            return
        limit, folder = self.cache.max_bytes, self.cache.directory
        blocks = isinstance(self.objects[0], FileBlock)  # shuffle_block: windows of blocks
        if self.behind == 1 and not blocks:
            largest = max(self.objects, key=lambda o: o.size)
            what = (f"'{largest.url}' ({largest.size} bytes) is larger than the cache limit of "
                    f"{limit} bytes ('{folder}')")
        elif blocks:
            what = (f"the cache '{folder}' (limit {limit} bytes) cannot hold the {self.behind} "
                    f"blocks a reader uses at once (a window of {self.behind} blocks): the "
                    f"largest {self.behind} take {need} bytes")
        else:
            what = (f"the cache '{folder}' (limit {limit} bytes) cannot hold the {self.behind} "
                    f"files a reader uses at once (a window of {self.behind} files, or every "
                    f"file for a global shuffle): the largest {self.behind} take {need} bytes")
        unit = "blocks" if blocks else "files"
        comfortable = need + sum(sizes[self.behind:2 * self.behind])
        ahead = (f" ({comfortable} lets the next {unit} download while these are read)"
                 if comfortable > need else "")  # a global shuffle holds every file already
        fewer = ("a smaller shuffle_window or shuffle_block" if blocks else
                 "a smaller shuffle_window, or shuffle_window=W instead of a global shuffle; "
                 "with shuffle_block='8M' too, windows of W blocks of 8 MB of the files, "
                 "downloaded a block at a time: the cache then needs about two windows")
        smaller = f"read fewer {unit} at once ({fewer})"
        if self.behind == 1 and not blocks:  # one file at a time already: read it in parts
            smaller = ("read the files in parts (shuffle_files=True, shuffle_window=W, "
                       "shuffle_block='8M' downloads blocks of 8 MB: the cache then needs about "
                       "two windows of blocks; or ArrayRecordSourceModule(..., ranged_reads=True) "
                       "reads records by byte range and downloads no file)")
        raise CacheFullError(
            f"{what}. Raise the limit to at least {need} bytes{ahead} with DATARAX_CACHE_BYTES "
            f"or the source's cache=ShardCache(..., max_bytes=...), or {smaller}.")

    def _make_room(self, wanted: int, full: CacheFullError, deadline: float,
                   generation: int, seen: object) -> object:
        """After the cache refused ``wanted`` (``full``): release files held for later, or
        wait for other readers (of this source, else of the folder while it changes);
        raise when nothing changed since the refusal (``generation``, ``seen``)."""
        with self._lock:
            if full.disk_full:  # the local disk, not the limit: its message says what to do
                raise full
            self._full_at = max(self._full_at, self._order.progress)  # read-ahead waits
            held = set(self._entries)
            idle = self._release_passed()
            need = self.objects[wanted].size
            size = sum(self.objects[j].size for j in self._entries)
            # downloads of this source end soon, read-ahead ones evictable then: wait for
            # them before releasing what the reader may still read
            victims = [] if self._prefetching - {wanted} else self._victims(wanted)
            for j in victims:
                if len(self._entries) < len(held) and size + need <= self.cache.max_bytes:
                    break
                size -= self.objects[j].size
                idle += self._drop(j)
            if len(self._entries) == len(held) and self._generation == generation:
                # nothing released, here or by other readers since the refusal: wait for them
                others = ({j for j in self._busy() if j in self._entries}
                          | set(self._inflight)) - {wanted}
                if time.monotonic() > deadline:
                    raise self._too_full(wanted) from full
                wait = 0.5
                if not others:  # only other readers of the folder can free room
                    now = self.cache.snapshot()
                    if now == seen:
                        raise self._too_full(wanted) from full
                    seen, wait = now, _POLL_S
                self._wanting_room += 1
                try:  # until a reader finishes with a file, or a download ends
                    self._changed.wait(timeout=wait)
                finally:
                    self._wanting_room -= 1
            else:
                seen = None
        close_all(idle)
        return seen

    def _ahead_paths(self) -> set[str]:
        """The cached paths of files read ahead (a read-ahead never evicts them)."""
        with self._lock:
            return set(self._ahead.values())

    def _ahead_ranked(self) -> list[str]:
        """The same paths in the order the plan reads them (evicted last, the last first)."""
        with self._lock:
            order = {i: k for k, i in enumerate(self._order.upcoming(self.ahead))}
            ranked = sorted(self._ahead.items(), key=lambda item: order.get(item[0], len(order)))
        return [path for _, path in ranked]

    def _victims(self, wanted: int) -> list[int]:
        """Held files nobody is using, in the order to release them for ``wanted``."""
        if not self._order.planned:  # no plan: whoever fetched a file may still use its path
            return []
        busy = self._busy()
        place = self._order.place(wanted)
        here = self._order.progress if place is None else place

        def order(j: int) -> tuple[int, int]:
            pos = self._order.place(j)
            if pos is None:
                return (0, 0)
            return (1, -pos) if pos > here else (2, pos)

        return sorted((j for j in self._entries if j not in busy and j != wanted), key=order)

    def held_bytes(self) -> int | None:
        """Bytes of the files this reader holds in its cache (None once closed)."""
        if self._closed:
            return None
        return sum(self.objects[j].size for j in list(self._entries))

    def _too_full(self, wanted: int) -> CacheFullError:
        obj = self.objects[wanted]
        ours = sum(self.objects[j].size for j in self._entries)
        used = self.cache.usage()
        folder = os.path.realpath(self.cache.directory)
        held = {r: r.held_bytes() for r in list(OPEN) if r is not self
                and os.path.realpath(r.cache.directory) == folder}
        here = [r for r, n in held.items() if n is not None]
        theirs = sum(held[r] or 0 for r in here)
        if here:  # this process's other readers: say which, and what to do about them
            files = here[0].objects
            more = f" and {len(files) - 1} more files" if len(files) > 1 else ""
            others = "another source" if len(here) == 1 else f"{len(here)} other sources"
            who = (f"{theirs} bytes are held by {others} in this process reading through the "
                   f"same folder ('{files[0].url}'{more}; a source holds the files it reads "
                   f"until it is closed), and {max(0, used - ours - theirs)} bytes by other "
                   "processes or downloads")
            fix = ("Close the other source (source.close()) before reading this one, give each "
                   "source its own folder (cache=ShardCache('<another folder>')), or raise the "
                   "limit (DATARAX_CACHE_BYTES, or cache=ShardCache(..., max_bytes=...)) so it "
                   "holds the files every source of the folder uses at once.")
        else:
            who = (f"{max(0, used - ours)} bytes are held by other readers of the folder (other "
                   "processes) or being downloaded")
            fix = ("Raise the limit (DATARAX_CACHE_BYTES, or the source's cache=ShardCache(..., "
                   "max_bytes=...)) so it holds the files every reader of the folder uses at "
                   "once, or free space by ending other readers of the folder.")
        return CacheFullError(
            f"the cache '{self.cache.directory}' (limit {self.cache.max_bytes} bytes, "
            f"{used} bytes used) cannot hold '{obj.url}' ({obj.size} bytes): this source holds "
            f"{ours} bytes of files in use, and {who}. {fix}")
