"""``from_tfds``: pick the eager or the streaming source for a split."""

from __future__ import annotations

from typing import Any

from flax import nnx

from datarax.sources._dataset_config import EAGER_MAX_BYTES, factory_config, streaming_choice
from datarax.sources.tfds.config import TFDSEagerConfig, TFDSStreamingConfig
from datarax.sources.tfds.eager import TFDSEagerSource
from datarax.sources.tfds.features import Decoder
from datarax.sources.tfds.opening import open_builder, tfds_module
from datarax.sources.tfds.streaming import TFDSStreamingSource

def from_tfds(
    name: str,
    split: str = "train",
    *,
    streaming: bool | None = None,
    rngs: nnx.Rngs | None = None,
    **config: Any,
) -> TFDSEagerSource | TFDSStreamingSource:
    """A TFDS source for ``name``/``split``: eager or streaming.

    ``streaming=True`` / ``False`` chooses explicitly and always wins. With
    ``streaming=None`` the split is loaded eagerly (:class:`TFDSEagerSource`) when the
    dataset declares its size at most :data:`EAGER_MAX_BYTES` (256 MiB) and no
    streaming-only option (``num_threads``, ``read_ahead``, ``on_error``,
    ``max_skipped``, ``max_skipped_fraction``) is given; otherwise it is streamed.

    ``config`` holds further config fields (``data_dir``, ``shuffle``, ``seed``, ...).

    Example:
        >>> from datarax.sources import from_tfds
        >>> source = from_tfds("mnist", "train", shuffle=True, seed=42)  # doctest: +SKIP
    """
    where = None if streaming is not None else "from_tfds"  # the mode (its config) unnamed
    streaming = streaming_choice("from_tfds", streaming, TFDSEagerConfig, TFDSStreamingConfig,
                                 config)
    settings = {"name": name, "split": split, **config}
    if streaming is None:
        streaming = not _fits_eager(factory_config(where, TFDSEagerConfig, settings))
    if streaming:
        return TFDSStreamingSource(factory_config(where, TFDSStreamingConfig, settings), rngs=rngs)
    return TFDSEagerSource(factory_config(where, TFDSEagerConfig, settings), rngs=rngs)


def _fits_eager(config: TFDSEagerConfig) -> bool:
    """Whether the dataset declares the split's size, at most ``EAGER_MAX_BYTES`` (unknown
    field names and float64 fields are refused first)."""
    where = "from_tfds"
    info = open_builder(tfds_module(where), config, where).info
    Decoder(info, config, where)  # refuses unknown field names / float64 up front
    try:
        size = int(info.splits[config.split.split("[")[0]].num_bytes)
    except Exception:  # unknown split / undeclared size: decide for streaming
        return False
    return 0 < size <= EAGER_MAX_BYTES
