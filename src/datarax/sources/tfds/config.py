"""Configs of the TensorFlow Datasets sources: the shared fields, eager and streaming."""

from __future__ import annotations

from dataclasses import dataclass

from datarax.core.config import check_bool, check_int
from datarax.core.errors import ConfigError
from datarax.sources._dataset_config import DatasetConfig
from datarax.sources.random_access import BadRecordFields


@dataclass(frozen=True)
class TFDSConfig(DatasetConfig):
    """Fields of both TFDS configs: :class:`DatasetConfig`'s, plus ``download``."""

    name: str = ""
    download: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(
                f"{type(self).__name__}.name must name a TFDS dataset (e.g. 'mnist'), got "
                f"{self.name!r}."
            )
        check_bool(self, "download")


@dataclass(frozen=True)
class TFDSEagerConfig(TFDSConfig):
    """Configuration of :class:`TFDSEagerSource`: the fields of
    :class:`~datarax.sources._dataset_config.DatasetConfig`, and

    Attributes:
        name: TFDS dataset name (``"mnist"``, ``"cifar10/config:1.0.0"``).
        data_dir: folder of prepared TFDS datasets (default: TFDS's own default).
        download: download and prepare (as ArrayRecord) when missing; False: read only.
    """


@dataclass(frozen=True)
class TFDSStreamingConfig(BadRecordFields, TFDSConfig):
    """Configuration of :class:`TFDSStreamingSource` (fields of :class:`TFDSEagerConfig`, plus).

    Attributes:
        num_threads: host threads reading and decoding records.
        read_ahead: chunks read ahead of the consumer (None: ``2 * num_threads``);
            with the chunk size (the batch size, at least 64) it bounds memory.
        on_error: ``"raise"`` (default) stops at a record that cannot be read or
            decoded; ``"skip"`` drops it, counts it and goes on.
        max_skipped, max_skipped_fraction: with ``"skip"``, most records one epoch may
            skip, in all and as a fraction of its records (None: no limit).
    """

    num_threads: int = 4
    read_ahead: int | None = None
    on_error: str = "raise"
    max_skipped: int | None = None
    max_skipped_fraction: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(self, "num_threads", minimum=1)
        if self.read_ahead is not None:
            check_int(self, "read_ahead", minimum=1)
        self.error_policy()
