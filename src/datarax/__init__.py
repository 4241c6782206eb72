"""datarax: data pipelines for JAX, built on Flax NNX.

Example:
    >>> import numpy as np
    >>> from flax import nnx
    >>> from datarax.pipeline import Pipeline
    >>> from datarax.sources import MemorySource, MemorySourceConfig
    >>> source = MemorySource(MemorySourceConfig(), {"x": np.arange(6, dtype=np.int32)})
    >>> [b["x"].shape for b in Pipeline(source=source, stages=[], batch_size=4, rngs=nnx.Rngs(0))]
    [(4,), (2,)]
"""

__version__ = "0.1.0"
