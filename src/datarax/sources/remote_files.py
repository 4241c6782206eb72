"""Remote files a source reads whole: listed once, fetched into the shard cache, held.

Sources whose reader works on local paths (memory-mapped ``.npy``, Hugging Face
``datasets``, :mod:`datarax.text.documents`) fetch every remote file into the
:class:`~datarax.storage.ShardCache` when built and hold it while they read, so every
epoch and resume reads the same local bytes in the same order. Downloads, retries,
verification and the cache's limits are :class:`~datarax.storage.RemoteShards`'.

Example:
    >>> import fsspec, tempfile
    >>> from datarax.storage import ShardCache
    >>> fsspec.filesystem("memory").pipe("/remote-files-doc/a.txt", b"abc")
    >>> files = RemoteFiles.listed("memory://remote-files-doc/a.txt", where="doc",
    ...                          cache=ShardCache(tempfile.mkdtemp(), max_bytes="1K"))
    >>> files.urls, open(files.local_paths()[0], "rb").read()
    (['memory://remote-files-doc/a.txt'], b'abc')
    >>> files.release()
"""

from __future__ import annotations

import concurrent.futures
import functools
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from datarax.storage import (
    CacheFullError,
    RemoteObject,
    RemoteShards,
    ShardCache,
    StorageStats,
    list_objects,
)
from datarax.storage.cache import given_cache

__all__ = ["RemoteFiles"]


class RemoteFiles:
    """Remote files fetched into a :class:`~datarax.storage.ShardCache` and held there,
    all at once, until :meth:`release` (see the module docstring).

    Args:
        objects: the files (from :func:`~datarax.storage.list_objects`), in reading order.
        where: the source's name, for messages.
        cache: the shard cache (default: ``DATARAX_CACHE_DIR`` / ``DATARAX_CACHE_BYTES``).
        storage_options: passed to the fsspec filesystem.
        threads: downloads at a time.
        stats: the :class:`~datarax.storage.StorageStats` to count in (default: new),
            e.g. the one the listing of ``objects`` counted its retries in.
    """

    def __init__(self, objects: Sequence[RemoteObject], *, where: str,
                 cache: ShardCache | None = None,
                 storage_options: Mapping[str, Any] | None = None, threads: int = 4,
                 stats: StorageStats | None = None) -> None:
        self.objects = tuple(objects)
        self.where = where
        self.cache = given_cache(cache, where)
        self.storage_options = dict(storage_options or {})
        self.threads = threads
        self._lock = threading.Lock()
        self._shards: RemoteShards | None = None
        self._paths: list[str] | None = None
        self._stats = stats if stats is not None else StorageStats()  # every hold's, and the listing's

    def __reduce__(self) -> tuple[Any, ...]:
        # a copy (another process) holds its own copies of the files when it reads
        return (functools.partial(RemoteFiles, self.objects, where=self.where, cache=self.cache,
                                  storage_options=self.storage_options, threads=self.threads), ())

    @classmethod
    def listed(cls, paths: str | Sequence[str], *, where: str, cache: ShardCache | None = None,
             storage_options: Mapping[str, Any] | None = None) -> RemoteFiles:
        """The files ``paths`` names (a URL, a glob pattern or a list), listed now (the
        listing's retries counted in :meth:`stats`).

        Raises:
            RecordError: a file is missing or a pattern matches nothing (naming the URL).
            MissingExtraError: the URL's fsspec filesystem is not installed.
        """
        stats = StorageStats()
        return cls(list_objects(paths, storage_options, stats=stats), where=where, cache=cache,
                   storage_options=storage_options, stats=stats)

    @property
    def urls(self) -> list[str]:
        """The files' URLs, in reading order."""
        return [o.url for o in self.objects]

    def local_paths(self) -> list[str]:
        """Local paths of every file (fetched first when not cached), held in the cache
        until :meth:`release`.

        Raises:
            CacheFullError: the files together do not fit the cache's limit.
            RemoteObjectError: a file was deleted or changed since it was listed.
            RemoteStoreError: the store still fails after every retry, or refuses access.
        """
        with self._lock:
            if self._paths is not None:
                return list(self._paths)
            total = sum(o.size for o in self.objects)
            if total > self.cache.max_bytes:
                raise CacheFullError(
                    f"{self.where} reads all its {len(self.objects)} remote files at once "
                    f"({total} bytes), more than the shard cache's limit of "
                    f"{self.cache.max_bytes} bytes ('{self.cache.directory}'); raise "
                    "DATARAX_CACHE_BYTES or the source's cache max_bytes.")
            shards = RemoteShards(self.objects, cache=self.cache,
                                  storage_options=self.storage_options, threads=self.threads,
                                  stats=self._stats)
            try:
                workers = max(1, min(self.threads, len(self.objects)))
                with concurrent.futures.ThreadPoolExecutor(
                        workers, thread_name_prefix="datarax-fetch") as pool:
                    paths = list(pool.map(shards.local_path, range(len(self.objects))))
            except BaseException:
                shards.close()
                raise
            self._shards, self._paths = shards, paths
            return list(paths)

    def stats(self) -> dict[str, Any]:
        """Downloads, cache hits, retries ... (:class:`~datarax.storage.StorageStats`)
        since this object was made, the listing's included; ``held`` files and
        ``cache_dir``."""
        with self._lock:
            held = self._shards.stats()["held"] if self._shards is not None else 0
        return {**self._stats.snapshot(), "held": held, "cache_dir": self.cache.directory}

    def release(self) -> None:
        """Let the cache evict the files again (they stay until it needs the room); a
        later :meth:`local_paths` holds them again."""
        with self._lock:
            shards, self._shards, self._paths = self._shards, None, None
            if shards is not None:
                shards.close()
