"""Reading from object storage: remote paths, a bounded local shard cache, read-ahead.

Public API (a source uses these; users usually only pass ``paths="s3://bucket/dataset"``
to a source, and perhaps ``cache=ShardCache(...)``):

* :func:`expand_user` ``(paths)``: a local path's leading ``~`` expanded (URLs untouched);
  every path a user names goes through it.
* :func:`is_remote` ``(paths) -> bool``: a URL with a scheme (``s3://``, ``gs://``,
  ``https://``, ``memory://``, ``file://`` ... any fsspec protocol).
* :func:`list_objects` ``(paths, storage_options=None) -> list[RemoteObject]``: one URL, a
  glob or a list, sorted, with size and version tag; :func:`read_json` ``(url)`` for
  metadata (None when absent); :func:`join_url`.
* :class:`RemoteObject` ``(url, size, etag=None, sha256=None, records=None)``.
* :class:`ShardCache` ``(directory=None, max_bytes=None)``: the local folder
  (``DATARAX_CACHE_DIR``, default ``~/.cache/datarax``) and its limit
  (``DATARAX_CACHE_BYTES``, default 64 GiB); shared safely by processes (file locks,
  atomic renames), reused across restarts, least recently used files evicted first, files
  in use never; ``acquire(obj, download) -> CacheEntry``, ``usage()``, ``clear()``.
* :class:`RemoteShards` ``(objects, cache=None, storage_options=None, threads=4, ahead=8,
  behind=1)``:
  ``local_path(i)``, ``open(i, opener)`` (a kept-open handle), ``plan(indices, start, stop,
  ends)`` (read ahead in the epoch's order, ``ahead`` files, ``threads`` downloads at a
  time), ``stats()``, ``failed()``, ``close()``.
* :class:`Fetcher`: one download, in ranges, resumed after a dropped connection, retried
  with backoff on transient failures only (:func:`is_transient`: throttling, a store's
  5xx, a timeout, a dropped connection; :class:`RetryPolicy`), verified (SHA-256 from the dataset's
  metadata, else size and ETag); counted in :class:`StorageStats` (``fetched``,
  ``fetched_bytes``, ``cache_hits``, ``retries``, ``throttled``, ``resumed``, ``evicted``,
  ``failed``, ``wait_s``).
* Errors: :class:`RemoteObjectError` (a ``RecordError`` naming the URL: deleted, changed,
  refused for a reason of its own), :class:`RemoteStoreError` (the store still failing
  after every retry, or access refused) and :class:`CacheFullError` (limit reached by
  files in use, or disk full); the last two are never skipped as bad records.

fsspec, s3fs and gcsfs come with ``pip install "datarax[remote]"``; they are imported when
a remote path is read, and nothing is created on disk before that.

Example:
    >>> import fsspec, tempfile
    >>> fsspec.filesystem("memory").pipe("/storage-doc/x.bin", b"12345")
    >>> [(o.name, o.size) for o in list_objects("memory://storage-doc/*.bin")]
    [('x.bin', 5)]
    >>> shards = RemoteShards(list_objects("memory://storage-doc/x.bin"),
    ...                       cache=ShardCache(tempfile.mkdtemp(), max_bytes="1K"))
    >>> open(shards.local_path(0), "rb").read()
    b'12345'
    >>> shards.close()
"""

from __future__ import annotations

from datarax.storage.cache import (
    DEFAULT_CACHE_BYTES,
    CacheEntry,
    ShardCache,
    default_cache_dir,
    parse_bytes,
)
from datarax.storage.errors import CacheFullError, RemoteObjectError, RemoteStoreError
from datarax.storage.fetch import Fetcher
from datarax.storage.retry import RetryPolicy, StorageStats, is_transient
from datarax.storage.shards import RemoteShards
from datarax.storage.urls import RemoteObject, expand_user, is_remote, join_url, list_objects, read_json

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "CacheEntry",
    "CacheFullError",
    "Fetcher",
    "RemoteObject",
    "RemoteObjectError",
    "RemoteStoreError",
    "RemoteShards",
    "RetryPolicy",
    "ShardCache",
    "StorageStats",
    "default_cache_dir",
    "expand_user",
    "is_remote",
    "is_transient",
    "join_url",
    "list_objects",
    "parse_bytes",
    "read_json",
]
