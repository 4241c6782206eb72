"""``TFDSEagerSource``: a TFDS split loaded once into device arrays."""

from __future__ import annotations

from typing import Any

import numpy as np
from flax import nnx

from datarax.core.batch import batch_length
from datarax.core.dtypes import fit_column
from datarax.core.errors import DataraxError, RecordError
from datarax.core.spec import flatten_fields
from datarax.sources._columns import text_on_host
from datarax.sources._dataset_config import (
    dataset_config_and_name,
    empty_split,
)
from datarax.sources.host_reader import HostReader
from datarax.sources.epoch_order import EpochOrder
from datarax.sources.memory import MemorySource
from datarax.sources.source_call import MISSING
from datarax.sources.tfds.config import TFDSConfig, TFDSEagerConfig
from datarax.sources.tfds.features import Decoder, decode_text
from datarax.sources.tfds.opening import (
    TFRecordOnly,
    open_builder,
    open_data_source,
    record_error,
    tensorflow_installed,
    tfds_module,
    tfrecord_message,
    unknown_split,
)


class TFDSEagerSource(MemorySource):
    """A TFDS split loaded once into device arrays (indexed, compiled path).

    Serving is :class:`~datarax.sources.MemorySource`'s (stable index = record of the
    split), except that the shuffle is seeded by ``config.seed`` whether or not
    ``rngs`` is given, so eager and streaming serve the same order for one config.

    Example:
        >>> from datarax.sources import TFDSEagerSource, TFDSEagerConfig
        >>> source = TFDSEagerSource(TFDSEagerConfig(name="mnist", split="train",  # doctest: +SKIP
        ...                                          shuffle=True, seed=42))
        >>> source.element_spec()["image"].shape  # doctest: +SKIP
        (28, 28, 1)
    """

    config: TFDSEagerConfig  # pyright: ignore[reportIncompatibleVariableOverride]

    config_class = TFDSEagerConfig

    def __init__(
        self,
        config: TFDSEagerConfig = MISSING,
        /,
        *extra: Any,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
        num_threads: int = 4,
        **settings: Any,
    ) -> None:
        config, name = dataset_config_and_name(type(self), config, extra, name, settings,
                                               example="mnist")
        where = "TFDSEagerSource"
        try:
            data, info = open_data_source(config, where)
        except TFRecordOnly:
            if not tensorflow_installed():
                raise DataraxError(tfrecord_message(config, where, eager=True)) from None
            columns = _load_with_tensorflow(config, where)
        else:
            columns = _load_all(data, info, config, where, num_threads)
        # rngs is accepted, as by every NNX module, but config.seed seeds the shuffle
        super().__init__(config, text_on_host(columns), rngs=None, name=name)  # type: ignore[arg-type]


def _load_all(data: Any, info: Any, config: TFDSConfig, where: str, num_threads: int) -> dict[str, np.ndarray]:
    decoder = Decoder(info, config, where)
    n = len(data)
    if n == 0:
        raise empty_split(config, where)
    reader = HostReader(data, decoder, num_threads=num_threads, chunk_size=min(n, 1024),
                        name=where, read_next_epoch=False)  # one pass, then closed
    try:
        reader.start(EpochOrder(length=n, seed=None, epoch=0))
        read = reader.next_batch(n)
    except RecordError as err:
        hint = decoder.varying_hint(err.__cause__) or ""
        raise record_error(err, config, where, hint) from err.__cause__
    finally:
        reader.close()
    assert read is not None
    return {k: v for k, v in read.columns.items()}


def _load_with_tensorflow(config: TFDSConfig, where: str) -> dict[str, np.ndarray]:
    """The whole split through TensorFlow (``tfds.load``; TFRecord-only datasets)."""
    tfds = tfds_module(where)
    builder = open_builder(tfds, config, where)
    try:
        dataset = builder.as_dataset(split=config.split, batch_size=-1)
    except (ValueError, KeyError) as err:
        if "split" in str(err).lower():
            raise unknown_split(tfds, config, where) from err
        raise
    arrays = flatten_fields(tfds.as_numpy(dataset))
    decoder = Decoder(builder.info, config, where)
    columns: dict[str, np.ndarray] = {}
    for key in decoder.keys:
        value = np.asarray(arrays[key])
        if key in decoder.text:
            text = value.astype(object)
            columns[key] = decode_text(text) if key in decoder.utf8 else text
        else:
            columns[key] = fit_column(key, value, where=where, cast_float64=config.cast_float64)
    if batch_length(columns) == 0:
        raise empty_split(config, where)
    return columns
