"""``copy.deepcopy`` of a :class:`~datarax.pipeline.Pipeline`: an independent copy, the
one ``nnx.clone`` makes.

NNX's own ``deepcopy`` copies a module's graph definition as well, and a pipeline's holds
its bookkeeping (the live iterator, its worker threads and locks, compiled programs),
which cannot be copied. The copy here shares that static structure, as ``nnx.clone``
does (but for its source's reader, files and buffers: the copy's own, see
:mod:`datarax.core.source_copy`), and copies every Variable (the position, the keys and
their counts): it continues from the position the original stands at, gets bookkeeping
of its own when first used, and iterating or closing either leaves the other where it
was.
"""

from __future__ import annotations

import copy
from typing import Any

from flax import nnx

from datarax.core.source_copy import own_host_parts


def deepcopy_pipeline(pipeline: Any, memo: dict[int, Any]) -> Any:
    """``copy.deepcopy(pipeline)``: ``nnx.merge`` of its graph definition and a deep copy
    of its Variables. Its modules and Variables go into ``memo``, so a structure that
    holds the pipeline and one of its parts (its source, say) is copied with the copy's
    part in that place.

    Example:
        >>> import copy
        >>> import numpy as np
        >>> from datarax.pipeline import Pipeline
        >>> from datarax.sources import MemorySource, MemorySourceConfig
        >>> src = MemorySource(MemorySourceConfig(), {"x": np.arange(5, dtype=np.int32)})
        >>> p = Pipeline(source=src, batch_size=2)
        >>> it = iter(p); first = next(it)
        >>> twin = copy.deepcopy(p)
        >>> [b["x"].tolist() for b in twin], next(it)["x"].tolist()
        ([[2, 3], [4]], [2, 3])
    """
    graphdef, state = nnx.split(pipeline)
    twin = nnx.merge(graphdef, copy.deepcopy(state))
    own_host_parts(pipeline, twin, memo)  # the source's reader, files, ... of its own
    return twin


__all__ = ["deepcopy_pipeline"]
