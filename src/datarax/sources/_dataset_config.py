"""Checks and messages shared by the TFDS and Hugging Face source configs."""

from __future__ import annotations

from typing import Any

from datarax.core.config import check_bool, check_int, check_seed
from datarax.core.errors import ConfigError, DataraxError
from datarax.sources._columns import normalize_keys


def check_dataset_fields(config: Any) -> None:
    """Validate the fields every dataset config has: split, data_dir, include/exclude
    keys, shuffle, seed, cast_float64, track_metadata and num_epochs."""
    cls = type(config).__name__
    if not isinstance(config.split, str) or not config.split.strip():
        raise ConfigError(f"{cls}.split must be a non-empty str such as 'train', got {config.split!r}.")
    if config.data_dir is not None and not isinstance(config.data_dir, str):
        raise ConfigError(f"{cls}.data_dir must be a str or None, got {config.data_dir!r}.")
    normalize_keys(config, "include_keys")
    normalize_keys(config, "exclude_keys")
    check_bool(config, "shuffle")
    check_seed(config, "seed")
    check_bool(config, "cast_float64")
    check_bool(config, "track_metadata")
    check_int(config, "num_epochs", minimum=1, allowed=(-1,))


def empty_split(config: Any, where: str) -> DataraxError:
    """The error for a split (or slice) of ``config.name`` that holds no records."""
    return DataraxError(
        f"{where}: split {config.split!r} of dataset {config.name!r} holds no records; "
        "pick a split (or slice) that has some."
    )
