"""Samplers: record orderings (the Feistel index shuffle)."""

from datarax.samplers.index_shuffle import index_shuffle, index_shuffle_jnp, index_shuffle_np

__all__ = ["index_shuffle", "index_shuffle_jnp", "index_shuffle_np"]
