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
from datarax.storage.urls import RemoteObject, expand_user, is_remote, join_url, list_objects, read_json

__all__ = [
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
