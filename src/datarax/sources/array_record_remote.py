"""How :class:`~datarax.sources.array_record.ArrayRecordSourceModule` cuts its files for
a window shuffle, and the :class:`~datarax.storage.shards.RemoteShards` it reads remote
files through: whole files, or with ``shuffle_block`` the blocks of
:mod:`datarax.storage.blocks` (a window of ``shuffle_window`` blocks read at once, the
cache holding about two windows).

Example:
    >>> from datarax.sources.array_record import ArrayRecordSourceConfig
    >>> block_bytes(ArrayRecordSourceConfig(shuffle_files=True, shuffle_window=4,
    ...                                     shuffle_block="8M"))
    8388608
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from datarax.core.errors import ConfigError, RecordError
from datarax.host.counts import count_words, python_ints
from datarax.storage import (
    CacheFullError,
    RemoteObject,
    RemoteShards,
    ShardCache,
    StorageStats,
    parse_bytes,
)
from datarax.storage.array_record_ranges import tail_path
from datarax.storage.cache import given_cache
from datarax.storage.fetch import Fetcher
from datarax.storage.blocks import MIN_BLOCK_BYTES, FileBlocks, footers_of

__all__ = ["block_bytes", "check_block_bytes", "check_cache_for_processes", "local_blocks",
           "older_block_setting", "RANGED_CHUNK", "ranged_chunk", "remote_reading", "window_chunk"]


def block_bytes(config: Any) -> int | None:
    """The config's ``shuffle_block`` in bytes (None: a block is a file)."""
    value = config.shuffle_block
    return None if value is None else parse_bytes(value)


def check_block_bytes(config: Any) -> None:
    """Refuse a ``shuffle_block`` that is not a size, too small, or without a window; a
    size is kept in bytes, a Python int (``"64K"``, ``65536`` and ``np.int64(65536)``
    make equal configs, so a state saved under one restores under another).

    Example:
        >>> from datarax.sources.array_record import ArrayRecordSourceConfig
        >>> ArrayRecordSourceConfig(shuffle_files=True, shuffle_window=4,
        ...                         shuffle_block="64K").shuffle_block
        65536
    """
    object.__setattr__(config, "shuffle_block", python_ints(config.shuffle_block))
    where = f"{type(config).__name__}.shuffle_block={config.shuffle_block!r}"
    try:
        size = block_bytes(config)
    except (ConfigError, ValueError, TypeError) as err:
        raise ConfigError(f"{where} is not a size in bytes ({err}); give an int or a "
                          "string like '8M'.") from err
    if isinstance(config.shuffle_block, bool) or size is None or size < MIN_BLOCK_BYTES:
        raise ConfigError(f"{where} is smaller than {MIN_BLOCK_BYTES} bytes: a block costs a "
                          "request to download; use blocks of a few MB (e.g. '8M').")
    if config.shuffle_window is None:
        raise ConfigError(f"{where} cuts files into blocks for a window shuffle and needs "
                          "shuffle_window=W (blocks per window) and shuffle_files=True; set "
                          "them, or drop shuffle_block.")
    object.__setattr__(config, "shuffle_block", size)


def older_block_setting(state: Any) -> Any:
    """``state`` with a ``shuffle_block`` its settings name as a string (a state saved
    before sizes were kept in bytes) given in bytes, so it restores as it did."""
    saved = state.get("settings") if isinstance(state, dict) else None
    if not isinstance(saved, dict) or not isinstance(saved.get("shuffle_block"), str):
        return state
    try:
        size = parse_bytes(saved["shuffle_block"])
    except (ConfigError, ValueError, TypeError):
        return state  # not a size: the settings check names it
    return {**state, "settings": {**saved, "shuffle_block": size}}


def local_blocks(files: Sequence[str], config: Any) -> FileBlocks | None:
    """The blocks of local ``files`` (their footers read from disk), or None without
    ``shuffle_block`` or ``shuffle_files``."""
    size = block_bytes(config)
    if size is None or not config.shuffle_files:
        return None
    return FileBlocks.cut(footers_of(files), size)


def remote_reading(objects: Sequence[RemoteObject], config: Any, *, cache: ShardCache | None,
                   storage_options: Mapping[str, Any] | None, stats: StorageStats,
                   ranged: bool = False) -> tuple[RemoteShards, FileBlocks | None]:
    """The :class:`RemoteShards` remote ``objects`` are read through, and their blocks
    (None: whole files). Files read at once (the cache must hold them): a window's, or
    every file for a global shuffle; with ``ranged`` (records read by range), one.

    Raises:
        CacheFullError: the cache cannot hold what a reader uses at once.
        RecordError: a file's footer disagrees with the dataset's record count.
    """
    cache = given_cache(cache, "ArrayRecordSourceModule")
    window = config.shuffle_window if config.shuffle_files else None
    size = block_bytes(config) if window is not None else None
    if ranged and size is not None:
        raise ConfigError("ArrayRecordSourceModule: ranged_reads=True reads single records "
                          "and shuffle_block downloads blocks of them; choose one.")
    if size is None:
        # ranged: records by range, the cache holds their footers (a file is downloaded
        # only where ranged reads cannot decode it: refused then if it does not fit)
        at_once = 0 if ranged else window or (len(objects) if config.shuffle_files else 1)
        try:
            # a global shuffle needs every file at once: all read ahead, 16 at a time
            # (docs/benchmarks.md)
            remote = RemoteShards(objects, cache=cache, storage_options=storage_options,
                                  ahead=max(8, 2 * (window or 0), at_once), behind=at_once,
                                  threads=min(16, max(4, at_once)), stats=stats)
        except CacheFullError as err:
            if window is not None or not config.shuffle_files:
                raise
            raise CacheFullError(f"{err} {ranged_cost(objects)}") from err
        return remote, None
    assert window is not None
    cache = cache if cache is not None else ShardCache()
    cache.ensure()  # an unusable folder is named now
    # footers by range (kept beside the cache: a restart reads none); no file need fit
    opener = Fetcher(storage_options, stats=stats)
    footers = footers_of(objects, fetcher=opener, cache=cache)
    for obj, footer in zip(objects, footers, strict=True):
        if obj.records is not None and obj.records != footer.num_records:
            raise RecordError(
                f"ArrayRecordSourceModule: the shard '{obj.url}' holds {footer.num_records} "
                f"records, its dataset's metadata says {obj.records}; the folder mixes files "
                "of different conversions. Convert the data again.", path=obj.url)
    blocks = FileBlocks.cut(footers, size).with_tails([tail_path(cache, o) for o in objects])
    # open handles for the readers' chunks in flight (about two windows), not for every
    # block (each costs its copy on the local disk); 8 blocks at a time (docs/benchmarks.md)
    remote = RemoteShards(blocks.objects(objects), cache=cache, storage_options=storage_options,
                          ahead=max(8, 2 * window), behind=window, handles=3 * window + 4,
                          threads=8, stats=stats)
    for url, version in opener.versions().items():  # blocks: of the version footers were
        remote.fetcher.pin(url, version)
    return remote, blocks


def ranged_cost(objects: Sequence[RemoteObject]) -> str:
    """What ``ranged_reads=True`` would cost a global shuffle of ``objects`` an epoch."""
    records = [o.records for o in objects]
    total = sum(o.size for o in objects)
    count = (f"{sum(records):,} requests an epoch (one a record" if None not in records
             else "one request a record read each epoch (")
    return (f"Or keep the global shuffle without downloading the files: "
            f"ArrayRecordSourceModule(..., ranged_reads=True) reads each record by byte range, "
            f"about {count}, all hosts together; {len(objects)} files, {total:,} bytes), "
            "each request paying the store's latency.")


def check_cache_for_processes(remote: RemoteShards, processes: int, ranged: bool = False) -> None:
    """Refuse remote files read by worker processes through a cache smaller than all of
    them: a worker holds the files it has read until the source is closed."""
    total = sum(o.size for o in remote.objects)
    if ranged and processes:
        remote.close()
        raise ConfigError(
            f"ArrayRecordSourceModule: ranged_reads=True reads records by range in this "
            f"process; decode_processes={processes} cannot use them. Use decode_processes=0, "
            "or download the files (ranged_reads=False).")
    if not processes or total <= remote.cache.max_bytes:
        return
    limit, folder = remote.cache.max_bytes, remote.cache.directory
    remote.close()
    raise CacheFullError(
        f"ArrayRecordSourceModule: decode_processes={processes} reads the remote files in "
        f"worker processes, which keep each file they read in the cache until the source is "
        f"closed, so the cache '{folder}' (limit {limit} bytes) must hold all "
        f"{count_words(len(remote.objects), 'file')} ({total} bytes). Raise the limit to at least "
        f"{total} "
        "bytes with DATARAX_CACHE_BYTES or the source's cache=ShardCache(..., max_bytes=...), "
        "or read a data set larger than the cache with decode_processes=0 (reader threads).")


def window_chunk(remote: Any, blocks: Any, window: int | None) -> int | None:
    """Block windows read through a cache of 2 windows or more: a reader thread's chunk
    at most an average window's records, so the chunks in flight read neighbouring
    windows the cache holds together, not far-apart ones it evicts and downloads again.
    None: no cap (under 2 windows the default chunks refetch less)."""
    if remote is None or blocks is None or not window:
        return None
    largest = sorted((o.size for o in remote.objects), reverse=True)[:window]
    if remote.cache.max_bytes < 2 * sum(largest):
        return None
    return max(1, window * int(blocks.ends[-1]) // len(blocks.ends))  # an average window


RANGED_CHUNK = 512
"""Positions a reader thread reads at most at once under ``ranged_reads=True`` (whole
batches, at least one): about a request a record, so a chunk of the default 16 batches
(4,096 records of 256) made the batch after the first wait for 4,096 requests, and a
``break``, restore or ``close`` wait for every thread's; 4 threads of 512 still keep
the 64 connections busy."""


def ranged_chunk(remote: Any, ranged: bool) -> int | None:
    """:data:`RANGED_CHUNK` for a remote source read by range, else None (no cap)."""
    return RANGED_CHUNK if ranged and remote is not None else None
