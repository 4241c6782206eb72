"""Data sources: in memory, ArrayRecord files, TensorFlow Datasets, Hugging Face.

The kind bases (see :mod:`datarax.core.data_source`) are exported here too, for
writing your own source (with :class:`StructuralConfig`, the base of its config):
:class:`IndexedSource` (traceable ``get_batch_at``),
:class:`RandomAccessSource` (records read by index on host threads) and
:class:`StreamSource` (forward-only ``get_batch``).

Each name is imported on first use: ``from datarax.sources import MemorySource`` loads
neither the ArrayRecord, Hugging Face nor TFDS sources.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from datarax.exports import lazy_exports

if TYPE_CHECKING:
    from datarax.core.config import StructuralConfig
    from datarax.core.data_source import DataSourceModule, SourceKind
    from datarax.core.indexed import IndexedSource
    from datarax.core.stream import StreamSource
    from datarax.dataset.labels import LabelEncoder
    from datarax.mixing.source import MixSource, MixSourceConfig
    from datarax.sources.array_record import ArrayRecordSourceConfig, ArrayRecordSourceModule
    from datarax.sources.concat import ConcatSource, ConcatSourceConfig
    from datarax.sources.flat_map import FlatMapSource, FlatMapSourceConfig
    from datarax.sources.hf.config import HFEagerConfig, HFStreamingConfig
    from datarax.sources.hf.eager import HFEagerSource
    from datarax.sources.hf.factory import from_hf
    from datarax.sources.hf.streaming import HFStreamingSource
    from datarax.sources.image_decoder import ImageDecoder, decode_images
    from datarax.sources.interleave import InterleaveSource, InterleaveSourceConfig
    from datarax.sources.memory import MemorySource, MemorySourceConfig
    from datarax.sources.npy import NpySource, NpySourceConfig
    from datarax.sources.random_access import RandomAccessSource
    from datarax.sources.shuffle_buffer import ShuffleBufferSource, ShuffleBufferSourceConfig
    from datarax.sources.tfds.config import TFDSEagerConfig, TFDSStreamingConfig
    from datarax.sources.tfds.eager import TFDSEagerSource
    from datarax.sources.tfds.factory import from_tfds
    from datarax.sources.tfds.streaming import TFDSStreamingSource

# Each exported name and the module that defines it.
_HOMES = {
    "ArrayRecordSourceConfig": "datarax.sources.array_record",
    "ArrayRecordSourceModule": "datarax.sources.array_record",
    "ConcatSource": "datarax.sources.concat",
    "ConcatSourceConfig": "datarax.sources.concat",
    "DataSourceModule": "datarax.core.data_source",
    "FlatMapSource": "datarax.sources.flat_map",
    "FlatMapSourceConfig": "datarax.sources.flat_map",
    "HFEagerConfig": "datarax.sources.hf.config",
    "HFEagerSource": "datarax.sources.hf.eager",
    "HFStreamingConfig": "datarax.sources.hf.config",
    "HFStreamingSource": "datarax.sources.hf.streaming",
    "ImageDecoder": "datarax.sources.image_decoder",
    "IndexedSource": "datarax.core.indexed",
    "InterleaveSource": "datarax.sources.interleave",
    "InterleaveSourceConfig": "datarax.sources.interleave",
    "LabelEncoder": "datarax.dataset.labels",
    "MemorySource": "datarax.sources.memory",
    "MemorySourceConfig": "datarax.sources.memory",
    "MixSource": "datarax.mixing.source",
    "MixSourceConfig": "datarax.mixing.source",
    "NpySource": "datarax.sources.npy",
    "NpySourceConfig": "datarax.sources.npy",
    "RandomAccessSource": "datarax.sources.random_access",
    "ShuffleBufferSource": "datarax.sources.shuffle_buffer",
    "ShuffleBufferSourceConfig": "datarax.sources.shuffle_buffer",
    "SourceKind": "datarax.core.data_source",
    "StreamSource": "datarax.core.stream",
    "StructuralConfig": "datarax.core.config",
    "TFDSEagerConfig": "datarax.sources.tfds.config",
    "TFDSEagerSource": "datarax.sources.tfds.eager",
    "TFDSStreamingConfig": "datarax.sources.tfds.config",
    "TFDSStreamingSource": "datarax.sources.tfds.streaming",
    "decode_images": "datarax.sources.image_decoder",
    "from_hf": "datarax.sources.hf.factory",
    "from_tfds": "datarax.sources.tfds.factory",
}

# written out (not list(_HOMES)): type checkers read a literal __all__ as the re-exports
__all__ = [
    "ArrayRecordSourceConfig", "ArrayRecordSourceModule", "ConcatSource",
    "ConcatSourceConfig", "DataSourceModule", "FlatMapSource", "FlatMapSourceConfig",
    "HFEagerConfig", "HFEagerSource", "HFStreamingConfig", "HFStreamingSource",
    "ImageDecoder", "IndexedSource", "InterleaveSource", "InterleaveSourceConfig",
    "LabelEncoder", "MemorySource", "MemorySourceConfig", "MixSource",
    "MixSourceConfig", "NpySource", "NpySourceConfig", "RandomAccessSource",
    "ShuffleBufferSource", "ShuffleBufferSourceConfig", "SourceKind", "StreamSource",
    "StructuralConfig", "TFDSEagerConfig", "TFDSEagerSource", "TFDSStreamingConfig",
    "TFDSStreamingSource", "decode_images", "from_hf", "from_tfds",
]


__getattr__, __dir__ = lazy_exports(globals(), _HOMES)
