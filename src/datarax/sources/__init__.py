"""Data sources: in memory, ArrayRecord files, TensorFlow Datasets, Hugging Face."""

from datarax.sources.array_record import ArrayRecordSourceConfig, ArrayRecordSourceModule
from datarax.sources.hf import (
    HFEagerConfig,
    HFEagerSource,
    HFStreamingConfig,
    HFStreamingSource,
    from_hf,
)
from datarax.sources.memory import MemorySource, MemorySourceConfig
from datarax.sources.tfds import (
    TFDSEagerConfig,
    TFDSEagerSource,
    TFDSStreamingConfig,
    TFDSStreamingSource,
    from_tfds,
)

__all__ = [
    "ArrayRecordSourceConfig",
    "ArrayRecordSourceModule",
    "HFEagerConfig",
    "HFEagerSource",
    "HFStreamingConfig",
    "HFStreamingSource",
    "from_hf",
    "MemorySource",
    "MemorySourceConfig",
    "TFDSEagerConfig",
    "TFDSEagerSource",
    "TFDSStreamingConfig",
    "TFDSStreamingSource",
    "from_tfds",
]
