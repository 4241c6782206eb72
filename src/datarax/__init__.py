"""datarax: data pipelines for JAX, built on Flax NNX.

The names a program starts with; the rest live in the subpackages. Each is imported on
first use, and ``import datarax`` changes nothing global (no JAX option, no thread priority).

Example:
    >>> import numpy as np
    >>> from flax import nnx
    >>> from datarax import MemorySource, MemorySourceConfig, Pipeline
    >>> source = MemorySource(MemorySourceConfig(), {"x": np.arange(6, dtype=np.int32)})
    >>> [b["x"].shape for b in Pipeline(source=source, stages=[], batch_size=4, rngs=nnx.Rngs(0))]
    [(4,), (2,)]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from datarax.exports import lazy_exports

if TYPE_CHECKING:
    from datarax.compilation_cache import enable_compilation_cache
    from datarax.core.config import StructuralConfig
    from datarax.core.data_source import DataSourceModule
    from datarax.core.errors import DataraxError
    from datarax.operators.element import ElementOperator, ElementOperatorConfig
    from datarax.pipeline.pipeline import Pipeline
    from datarax.sources.array_record import ArrayRecordSourceConfig, ArrayRecordSourceModule
    from datarax.sources.hf.factory import from_hf
    from datarax.sources.image_decoder import decode_images
    from datarax.sources.memory import MemorySource, MemorySourceConfig
    from datarax.sources.tfds.factory import from_tfds

__version__ = "0.1.0"

# written out (not list(_HOMES)): type checkers read a literal __all__ as the re-exports
__all__ = [
    "ArrayRecordSourceConfig", "ArrayRecordSourceModule", "DataSourceModule", "DataraxError",
    "ElementOperator", "ElementOperatorConfig", "MemorySource", "MemorySourceConfig",
    "Pipeline", "StructuralConfig", "decode_images", "enable_compilation_cache", "from_hf",
    "from_tfds",
]

_HOMES = {
    "ArrayRecordSourceConfig": "datarax.sources.array_record",
    "ArrayRecordSourceModule": "datarax.sources.array_record",
    "DataSourceModule": "datarax.core.data_source",
    "DataraxError": "datarax.core.errors",
    "ElementOperator": "datarax.operators.element",
    "ElementOperatorConfig": "datarax.operators.element",
    "MemorySource": "datarax.sources.memory",
    "MemorySourceConfig": "datarax.sources.memory",
    "Pipeline": "datarax.pipeline.pipeline",
    "StructuralConfig": "datarax.core.config",
    "decode_images": "datarax.sources.image_decoder",
    "enable_compilation_cache": "datarax.compilation_cache",
    "from_hf": "datarax.sources.hf.factory",
    "from_tfds": "datarax.sources.tfds.factory",
}

# Modules reachable as attributes after a plain ``import datarax``.
_MODULES = (
    "checkpoint", "core", "dag", "metrics", "mixing", "operators", "pipeline", "samplers",
    "sharding", "sources", "testing", "text",
)


__getattr__, __dir__ = lazy_exports(globals(), _HOMES, _MODULES)
