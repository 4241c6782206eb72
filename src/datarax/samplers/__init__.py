"""Samplers: record orderings (the Feistel index shuffle) and index samplers with state."""

from datarax.samplers.index_shuffle import index_shuffle, index_shuffle_jnp, index_shuffle_np
from datarax.samplers.samplers import (
    RangeSampler,
    Sampler,
    SequentialSampler,
    ShuffledSampler,
    SlidingWindowSampler,
)

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
