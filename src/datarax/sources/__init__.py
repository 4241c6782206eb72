"""Data sources: in memory, ArrayRecord files, TensorFlow Datasets, Hugging Face.

The kind bases (see :mod:`datarax.core.data_source`) are exported here too, for
writing your own source: :class:`IndexedSource` (traceable ``get_batch_at``),
:class:`RandomAccessSource` (records read by index on host threads) and
:class:`StreamSource` (forward-only ``get_batch``).
"""

from datarax.core.data_source import DataSourceModule, SourceKind
from datarax.core.indexed import IndexedSource
from datarax.core.stream import StreamSource
from datarax.sources.array_record import ArrayRecordSourceConfig, ArrayRecordSourceModule
from datarax.sources.hf import (
    HFEagerConfig,
    HFEagerSource,
    HFStreamingConfig,
    HFStreamingSource,
    from_hf,
)
from datarax.sources.label_encoder import LabelEncoder
from datarax.sources.memory import MemorySource, MemorySourceConfig
from datarax.sources.npy import NpySource, NpySourceConfig
from datarax.sources.random_access import RandomAccessSource
from datarax.sources.tfds import (
    TFDSEagerConfig,
    TFDSEagerSource,
    TFDSStreamingConfig,
    TFDSStreamingSource,
    from_tfds,
)

ArrayRecordSource = ArrayRecordSourceModule  # shorter alias of the seed's name

__all__ = [
    "ArrayRecordSource",
    "ArrayRecordSourceConfig",
    "ArrayRecordSourceModule",
    "DataSourceModule",
    "HFEagerConfig",
    "HFEagerSource",
    "HFStreamingConfig",
    "HFStreamingSource",
    "IndexedSource",
    "LabelEncoder",
    "MemorySource",
    "MemorySourceConfig",
    "NpySource",
    "NpySourceConfig",
    "RandomAccessSource",
    "SourceKind",
    "StreamSource",
    "TFDSEagerConfig",
    "TFDSEagerSource",
    "TFDSStreamingConfig",
    "TFDSStreamingSource",
    "from_hf",
    "from_tfds",
]
