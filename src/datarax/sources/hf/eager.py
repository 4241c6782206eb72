"""``HFEagerSource``: a Hugging Face split loaded once into device arrays."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from typing import Any

import numpy as np
from flax import nnx

from datarax.sources._columns import select_keys, text_on_host
from datarax.sources._dataset_config import (
    dataset_config_and_name,
    empty_split,
)
from datarax.core.errors import DataraxError, RecordError
from datarax.sources.hf.arrow import is_image, table_to_columns
from datarax.sources.hf.config import HFEagerConfig
from datarax.sources.hf.locate import opened_split
from datarax.sources.hf.remote import local_config, remote_files
from datarax.sources.memory import MemorySource
from datarax.sources.source_call import MISSING
from datarax.storage import ShardCache


class HFEagerSource(MemorySource):
    """A Hugging Face split loaded once into device arrays (indexed, compiled path).

    Serving is :class:`~datarax.sources.MemorySource`'s (stable index = row in the
    split; text fields kept on the host), except that the shuffle is seeded by
    ``config.seed`` whether or not ``rngs`` is given. ``name`` / ``data_files`` may be
    URLs: the files are fetched into the shard cache (``cache``, with the filesystem's
    ``storage_options``), loaded from there and released once loaded.

    Example:
        >>> from datarax.sources import HFEagerSource, HFEagerConfig
        >>> src = HFEagerSource(HFEagerConfig(name="my_local_folder", split="train",  # doctest: +SKIP
        ...                                   exclude_keys=("sentence",), shuffle=True))
        >>> src.get_batch_at(0, 4)["label"]  # doctest: +SKIP
    """

    config: HFEagerConfig  # pyright: ignore[reportIncompatibleVariableOverride]

    config_class = HFEagerConfig

    def __init__(
        self,
        config: HFEagerConfig = MISSING,
        /,
        *extra: Any,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
        cache: ShardCache | None = None,
        storage_options: Mapping[str, Any] | None = None,
        **settings: Any,
    ) -> None:
        config, name = dataset_config_and_name(type(self), config, extra, name, settings,
                                               example="imdb")
        where = "HFEagerSource"
        files = remote_files(config, where, cache=cache, storage_options=storage_options)
        if files is None:
            columns = _load_eager_columns(config, where)
        else:
            try:
                # datasets fingerprints local files by their mtime, which the shard cache
                # renews on each use: prepare in a folder of our own, dropped once loaded,
                # rather than a new copy in datasets' cache at every build
                with tempfile.TemporaryDirectory(prefix="datarax-hf-",
                                                 ignore_cleanup_errors=True) as prepared:
                    columns = _load_eager_columns(local_config(config, files), where, prepared)
            finally:
                files.release()
        # rngs is accepted, as by every NNX module, but config.seed seeds the shuffle
        super().__init__(config, columns, rngs=None, name=name)  # type: ignore[arg-type]


def _load_eager_columns(config: HFEagerConfig, where: str,
                        cache_dir: str | None = None) -> dict[str, np.ndarray]:
    ds, _ = opened_split(config, where, streaming=False, cache_dir=cache_dir)
    keys = select_keys(list(ds.column_names), config.include_keys, config.exclude_keys, where=where)
    if len(ds) == 0:
        raise empty_split(config, where)
    table = ds.select_columns(keys).with_format("arrow")[:]
    try:
        columns = table_to_columns(table, keys, config, where, features=ds.features)
    except DataraxError:
        raise
    except Exception as err:  # an image that does not decode: named with its record
        raise _undecodable(table, keys, ds.features, config, where) or err
    return text_on_host(columns)


def _undecodable(table: Any, keys: list[str], features: Any, config: HFEagerConfig,
                 where: str) -> RecordError | None:
    """The error naming the first image field and record that does not decode; None
    when every image decodes."""
    for key in keys:
        feature = features.get(key)
        if not is_image(feature):
            continue
        for i, value in enumerate(table.column(key).to_pylist()):
            try:
                feature.decode_example(value)
            except Exception as err:  # noqa: BLE001 - reported with field and record
                error = RecordError(
                    f"{where}: field '{key}' of record {i} of split {config.split!r} does not "
                    f"decode as an image: {type(err).__name__}: {err}. Fix or filter the data "
                    "(Dataset.filter), or drop the field (exclude_keys).",
                    index=i,
                )
                error.__cause__ = err
                return error
    return None
