"""Cached copies damaged on the local disk, and files a ranged read found deleted or
changed in the store. A mixin of :class:`~datarax.storage.shards.RemoteShards`."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, TypeVar

from datarax.storage.errors import CacheFullError, RemoteObjectError, RemoteStoreError
from datarax.storage.handles import close_all

__all__ = ["ShardDamage"]

T = TypeVar("T")


class ShardDamage:
    """Damage-handling methods of :class:`~datarax.storage.shards.RemoteShards`."""

    _lock: Any
    _entries: Any
    _failed: Any

    def refuse(self, err: RemoteObjectError) -> None:
        """The file ``err`` names was found deleted or changed (by a ranged read): its units
        not held or cached raise ``err`` from now on, as a download would."""
        with self._lock:
            for i, obj in enumerate(self.objects):
                if obj.url == err.url and i not in self._entries \
                        and self.cache.path_of(obj) is None:
                    self._failed.setdefault(i, err)
            self._notify()

    def reading(self, i: int, attempt: Callable[[], T]) -> T:
        """``attempt()``, a read of file ``i``'s cached copy; when it fails on the copy itself
        (not the store), :meth:`recheck` it and, when removed, read once more from a fresh
        download."""
        try:
            return attempt()
        except (RemoteObjectError, RemoteStoreError, CacheFullError):
            raise
        except Exception:
            if not self.recheck(i):
                raise
        return attempt()

    def recheck(self, i: int) -> bool:
        """After a read of file ``i``'s cached copy failed, remove it when damaged (SHA-256
        differs; without one, on its first failure). Once per file; returns whether removed."""
        obj = self.objects[i]
        with self._lock:
            if self._closed or i in self._rechecked:
                return False
            self._rechecked.add(i)
            entry = self._entries.get(i)
        path = entry.path if entry is not None else self.cache.path_of(obj)
        if path is None:
            return False
        if not self.cache.discard(path, _sha256 if obj.sha256 else None, obj.sha256):
            return False
        with self._lock:
            idle = self._drop(i)  # a handle another thread reads now: closed with the source
        close_all(idle)
        return True


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
