"""Remote data files (``s3://``, ``gs://``, ``https://``, any fsspec URL) for the Hugging
Face sources.

A ``name`` or ``data_files`` that is a URL (a file, a glob or a list) is listed once
when the source is built and fetched into the shard cache
(:mod:`datarax.sources.remote_files`); ``datasets`` reads the cached copies, while the
source's config keeps the URLs.

Example:
    >>> config = HFStreamingConfig(name="s3://bucket/data/train-*.parquet")
    >>> remote_urls(config, "doc")
    ['s3://bucket/data/train-*.parquet']
    >>> remote_urls(HFStreamingConfig(name="data/train.parquet"), "doc") is None
    True
"""

from __future__ import annotations

import glob
from collections.abc import Mapping
from typing import Any, TypeVar

from datarax.core.errors import ConfigError
from datarax.sources.remote_files import RemoteFiles
from datarax.sources.hf.config import HFConfig, HFStreamingConfig  # noqa: F401 - the example
from datarax.sources.hf.locate import builder_for
from datarax.storage import ShardCache, is_remote
from datarax.storage.urls import all_remote

__all__ = ["local_config", "remote_files", "remote_urls"]

C = TypeVar("C", bound=HFConfig)

_FORMATS = "Parquet (.parquet), JSON / JSON Lines (.json, .jsonl), CSV (.csv), Arrow (.arrow) or text (.txt)"


def remote_urls(config: HFConfig, where: str) -> list[str] | None:
    """The URLs (files or glob patterns) ``config`` reads, or None when it reads local
    files or the Hub.

    Raises:
        ConfigError: local paths and URLs are mixed, or ``name`` is a URL that names no
            data file (a remote folder).
    """
    files = config.data_files
    if files is not None:
        items = [files] if isinstance(files, str) else list(files)
        if not all_remote(items, f"{where}: data_files"):
            return None
        if config.name is not None and is_remote(config.name):
            raise ConfigError(
                f"{where}: with data_files={items!r}, name is the format ('parquet', 'json', "
                f"...), not the URL {config.name!r}; drop name or pass the format.")
        return items
    name = config.name
    if name is None or not is_remote(name):
        return None
    if not glob.has_magic(name) and builder_for(name) is None:
        raise ConfigError(
            f"{where}: {name!r} names no data file; a remote split is read from its data "
            f"files ({_FORMATS}): name them, e.g. 's3://bucket/ds/data/train-*.parquet', "
            "or pass data_files=[...] (a remote folder or saved dataset is not read as one).")
    return [name]


def remote_files(config: HFConfig, where: str, *, cache: ShardCache | None = None,
                 storage_options: Mapping[str, Any] | None = None) -> RemoteFiles | None:
    """The remote data files of ``config``, listed now (not fetched yet); None when it
    reads local files or the Hub.

    Raises:
        RecordError: a file is missing or a pattern matches nothing (naming the URL).
        ConfigError: the format cannot be told from the first file's extension.
        MissingExtraError: the URL's fsspec filesystem is not installed.
    """
    urls = remote_urls(config, where)
    if urls is None:
        return None
    files = RemoteFiles.listed(urls, where=where, cache=cache, storage_options=storage_options)
    if config.data_files is None or config.name is None:
        first = files.urls[0]
        if builder_for(first) is None:
            raise ConfigError(
                f"{where}: cannot tell the format of '{first}' from its extension; pass "
                "name='parquet' (or json, csv, arrow, text) with data_files=[its URLs].")
    return files


def local_config(config: C, files: RemoteFiles) -> C:
    """``config`` reading the cached copies of ``files`` (fetched and held now)."""
    builder = config.name if config.data_files is not None and config.name is not None \
        else builder_for(files.urls[0])
    return config.replace(name=builder, data_files=tuple(files.local_paths()))  # type: ignore[return-value]
