"""datarax: data pipelines for JAX, built on Flax NNX.

Importing datarax turns on JAX's persistent compilation cache unless you configured
one or set ``DATARAX_COMPILATION_CACHE=0`` (see :mod:`datarax.compilation_cache`).

Example:
    >>> import numpy as np
    >>> from flax import nnx
    >>> from datarax.pipeline import Pipeline
    >>> from datarax.sources import MemorySource, MemorySourceConfig
    >>> source = MemorySource(MemorySourceConfig(), {"x": np.arange(6, dtype=np.int32)})
    >>> [b["x"].shape for b in Pipeline(source=source, stages=[], batch_size=4, rngs=nnx.Rngs(0))]
    [(4,), (2,)]
"""

from datarax.compilation_cache import enable_by_default as _enable_compilation_cache

__version__ = "0.1.0"

_enable_compilation_cache()
