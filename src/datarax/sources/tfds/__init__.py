"""TensorFlow Datasets sources, both reading a split through ``tfds.data_source`` (random
access over ArrayRecord, no TensorFlow): :class:`TFDSEagerSource` loads it once into
device arrays (an indexed :class:`~datarax.sources.MemorySource`), :class:`TFDSStreamingSource`
reads it by index on host threads (bounded read-ahead, exact resume, ``on_error="skip"``);
:func:`from_tfds` picks one. ``docs/sources/tfds.md`` covers ``data_dir``, downloads,
TFRecord-only datasets and how fields are converted.

Needs the ``tfds`` extra: ``pip install "datarax[tfds]"``.
"""

from datarax.sources.tfds.config import TFDSEagerConfig, TFDSStreamingConfig
from datarax.sources.tfds.eager import TFDSEagerSource
from datarax.sources._dataset_config import EAGER_MAX_BYTES
from datarax.sources.tfds.factory import from_tfds
from datarax.sources.tfds.streaming import TFDSStreamingSource

__all__ = [
    "EAGER_MAX_BYTES",
    "TFDSEagerConfig",
    "TFDSEagerSource",
    "TFDSStreamingConfig",
    "TFDSStreamingSource",
    "from_tfds",
]
