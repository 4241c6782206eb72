"""Reading from object storage: remote paths, a bounded local shard cache, read-ahead.

Users usually only pass ``paths="s3://bucket/dataset"`` to a source, and perhaps
``cache=ShardCache(...)``. :func:`list_objects` lists a URL, glob or list;
:class:`ShardCache` is the bounded local folder shared by processes;
:class:`RemoteShards` reads an epoch's files ahead through it; :class:`Fetcher` downloads
one file in ranges, retried on transient failures only (:class:`RetryPolicy`) and
verified; :class:`ArrayRecordRanges` reads single records by byte range.
:class:`RemoteObjectError` is a ``RecordError`` (a file deleted or changed);
:class:`RemoteStoreError` and :class:`CacheFullError` are never skipped as bad records.
fsspec, s3fs and gcsfs are the ``remote`` extra. Each name is imported on first use.

Example:
    >>> import fsspec, tempfile
    >>> from datarax.storage import RemoteShards, ShardCache, list_objects
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

from typing import TYPE_CHECKING

from datarax.exports import lazy_exports

if TYPE_CHECKING:
    from datarax.storage.array_record_ranges import ArrayRecordRanges
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
    from datarax.storage.urls import (
        RemoteObject, expand_user, is_remote, join_url, list_objects, read_json)

# Each exported name and the module that defines it.
_HOMES = {
    "DEFAULT_CACHE_BYTES": "datarax.storage.cache",
    "ArrayRecordRanges": "datarax.storage.array_record_ranges",
    "CacheEntry": "datarax.storage.cache",
    "CacheFullError": "datarax.storage.errors",
    "Fetcher": "datarax.storage.fetch",
    "RemoteObject": "datarax.storage.urls",
    "RemoteObjectError": "datarax.storage.errors",
    "RemoteStoreError": "datarax.storage.errors",
    "RemoteShards": "datarax.storage.shards",
    "RetryPolicy": "datarax.storage.retry",
    "ShardCache": "datarax.storage.cache",
    "StorageStats": "datarax.storage.retry",
    "default_cache_dir": "datarax.storage.cache",
    "expand_user": "datarax.storage.urls",
    "is_remote": "datarax.storage.urls",
    "is_transient": "datarax.storage.retry",
    "join_url": "datarax.storage.urls",
    "list_objects": "datarax.storage.urls",
    "parse_bytes": "datarax.storage.cache",
    "read_json": "datarax.storage.urls",
}

__all__ = [  # written out: type checkers read a literal __all__
    "DEFAULT_CACHE_BYTES",
    "ArrayRecordRanges",
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

__getattr__, __dir__ = lazy_exports(globals(), _HOMES)
