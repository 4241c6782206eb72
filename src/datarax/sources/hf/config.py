"""Configs of the Hugging Face sources: the shared fields, eager and streaming."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from datarax.core.config import check_int
from datarax.core.errors import ConfigError
from datarax.sources._dataset_config import DatasetConfig, hf_dataset_hint, local_path
from datarax.sources.random_access import BadRecordFields
from datarax.storage.urls import expand_user, path_list


@dataclass(frozen=True)
class HFConfig(DatasetConfig):
    """Fields of both HF configs: :class:`DatasetConfig`'s, plus ``data_files``."""

    data_files: str | tuple[str, ...] | None = None

    refused_options: ClassVar[dict[str, str]] = dict.fromkeys(("config_name", "subset"), (
        "Dataset configs/variants (e.g. 'sst2' within 'glue') are not supported: pass a "
        "standalone dataset's name as name= (e.g. 'stanfordnlp/sst2')."))

    def __post_init__(self) -> None:
        super().__post_init__()
        cls = type(self).__name__
        object.__setattr__(self, "name", local_path(self.name))
        if self.name is not None and not (isinstance(self.name, str) and self.name):
            hint = hf_dataset_hint(self.name)  # a datasets object: named by its type
            got = f"a {type(self.name).__name__}" if hint else repr(self.name)
            raise ConfigError(
                f"{cls}.name must be a non-empty str (a Hub id, a local folder or file; a "
                f"pathlib.Path is taken too) or None, got {got}.{hint}")
        if self.name is not None:  # a local folder or file: '~/data' is the home folder's
            object.__setattr__(self, "name", expand_user(self.name))
        files = self.data_files
        if isinstance(files, Mapping):  # load_dataset's {split: files}
            first = next(iter(files), "train")
            raise ConfigError(
                f"{cls}.data_files holds the files of one split, not a dict of splits "
                f"(got {sorted(files)}): pass that split's files with its name, e.g. "
                f"data_files=files[{first!r}], split={first!r}.")
        if files is not None:  # one path stays one str, a list becomes a tuple
            paths = path_list(files, f"{cls}.data_files (the files of split '{self.split}')")
            one = isinstance(files, (str, os.PathLike))
            object.__setattr__(self, "data_files", paths[0] if one else tuple(paths))
        if self.name is None and files is None:
            raise ConfigError(
                f"{cls} needs name= (a Hub id, a local folder or file) or data_files=."
            )


@dataclass(frozen=True)
class HFEagerConfig(HFConfig):
    """Configuration of :class:`HFEagerSource`: the fields of
    :class:`~datarax.sources._dataset_config.DatasetConfig`, and

    Attributes:
        name: Hub id, local folder (data files or ``save_to_disk`` output) or data file/glob;
            a local path may be any ``os.PathLike`` (``pathlib.Path``), stored as ``str``.
        data_files: path/glob or list of them (``str`` or ``os.PathLike``, stored as
            ``str``) holding split ``split`` (``name`` then
            names the builder, e.g. ``"parquet"``, or may be omitted).
        streaming: must stay False (use :class:`HFStreamingConfig` to stream).
    """

    streaming: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.streaming is not False:
            raise ConfigError(
                "HFEagerConfig.streaming must be False; use HFStreamingConfig / "
                "HFStreamingSource to stream."
            )


@dataclass(frozen=True)
class HFStreamingConfig(BadRecordFields, HFConfig):
    """Configuration of :class:`HFStreamingSource` (fields of :class:`HFEagerConfig`, plus).

    Attributes:
        streaming: must stay True (use :class:`HFEagerConfig` to load eagerly).
        chunk_size: records read per Arrow chunk; bounds memory with the buffer below.
        shuffle_buffer_size: with ``shuffle=True``, pass ``e`` reads the shards (files)
            in an order drawn from ``seed + e`` and mixes records through a rolling
            buffer of this many records.
        on_error: ``"raise"`` (default) stops at a record that cannot be converted to
            the declared fields; ``"skip"`` drops it, counts it
            (``source.skipped_records()``, ``get_state()["skipped"]``) and goes on.
        max_skipped: with ``"skip"``, most records one pass may skip (None: no limit).
        max_skipped_fraction: with ``"skip"``, most records one pass may skip as a
            fraction of the pass (checked as it goes when the split declares its size,
            else at the end of the pass).
    """

    streaming: bool = True
    chunk_size: int = 1024
    shuffle_buffer_size: int = 1000
    on_error: str = "raise"
    max_skipped: int | None = None
    max_skipped_fraction: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.streaming is not True:
            raise ConfigError(
                "HFStreamingConfig.streaming must be True; use HFEagerConfig / "
                "HFEagerSource to load the split into memory."
            )
        check_int(self, "chunk_size", minimum=1)
        check_int(self, "shuffle_buffer_size", minimum=1)
        self.error_policy()
