"""Samplers: record orderings (the Feistel index shuffle) and index samplers with state.

The samplers are imported on first use; the index shuffle (which a shuffled source's
order needs) at once: its functions share the name of their module, ``index_shuffle``,
so the package binds the function here, before any import of the module could bind it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from datarax.exports import lazy_exports
from datarax.samplers.index_shuffle import index_shuffle, index_shuffle_jnp, index_shuffle_np

if TYPE_CHECKING:
    from datarax.samplers.samplers import (
        RangeSampler, Sampler, SequentialSampler, ShuffledSampler, SlidingWindowSampler,
    )

_HOMES = {
    **dict.fromkeys(("RangeSampler", "Sampler", "SequentialSampler", "ShuffledSampler",
                     "SlidingWindowSampler"), "datarax.samplers.samplers"),
    **dict.fromkeys(("index_shuffle", "index_shuffle_jnp", "index_shuffle_np"),
                    "datarax.samplers.index_shuffle"),
}

# written out (not list(_HOMES)): type checkers read a literal __all__ as the re-exports
__all__ = [
    "RangeSampler",
    "Sampler",
    "SequentialSampler",
    "ShuffledSampler",
    "SlidingWindowSampler",
    "index_shuffle",
    "index_shuffle_jnp",
    "index_shuffle_np",
]


__getattr__, __dir__ = lazy_exports(globals(), _HOMES)
