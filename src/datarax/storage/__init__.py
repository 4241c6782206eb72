"""Reading from object storage: remote paths, a bounded local shard cache, read-ahead.

Users usually only pass ``paths="s3://bucket/dataset"`` to a source, and perhaps
``cache=ShardCache(...)``. :func:`list_objects` lists a URL, glob or list;
:class:`ShardCache` is the bounded local folder shared by processes (``DATARAX_CACHE_DIR``,
``DATARAX_CACHE_BYTES``); :class:`RemoteShards` reads an epoch's files ahead through it;
:class:`Fetcher` downloads one file in ranges, retried on transient failures only
(:func:`is_transient`, :class:`RetryPolicy`; a request gives up after
``DATARAX_RETRY_BUDGET`` seconds, 60 by default) and verified, counted in
:class:`StorageStats`. :class:`ArrayRecordRanges` reads single records of an ArrayRecord
file by byte range.
:class:`RemoteObjectError` is a ``RecordError`` (a file deleted or changed);
:class:`RemoteStoreError` and :class:`CacheFullError` are never skipped as bad records.
fsspec, s3fs and gcsfs are the ``remote`` extra, imported when a remote path is read.
Each name is imported on first use: ``datarax.storage.errors`` (for an ``except``
clause) loads neither the cache nor the downloads.

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

# Each exported name and the module that defines it: importing one of the package's
# modules (``datarax.storage.errors``, say, for an ``except`` clause) loads none of the
# others (the cache, the downloads, the ranged reader).
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
