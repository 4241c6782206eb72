"""datarax: data pipelines for JAX, built on Flax NNX.

Importing datarax changes nothing global: no JAX option, file or thread priority.
:func:`enable_compilation_cache` turns JAX's persistent compilation cache on when
you ask for it.

Example:
    >>> import numpy as np
    >>> from flax import nnx
    >>> from datarax.pipeline import Pipeline
    >>> from datarax.sources import MemorySource, MemorySourceConfig
    >>> source = MemorySource(MemorySourceConfig(), {"x": np.arange(6, dtype=np.int32)})
    >>> [b["x"].shape for b in Pipeline(source=source, stages=[], batch_size=4, rngs=nnx.Rngs(0))]
    [(4,), (2,)]
"""

from datarax.compilation_cache import enable_compilation_cache as enable_compilation_cache

__version__ = "0.1.0"
