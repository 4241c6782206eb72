"""Batches on devices: placement over a mesh, and multi-process global batches.

:class:`BatchPlacement` is what ``Pipeline(..., sharding=...)`` uses to hand out
batches as sharded global ``jax.Array``s. Each process's Pipeline reads a disjoint,
equally long share of every epoch (``shard_index``/``shard_count`` default to
``jax.process_index()``/``jax.process_count()``); :func:`global_batch` turns those
shares into one ``jax.Array`` per field over a mesh of every process's devices.
"""

from datarax.sharding.global_batch import data_mesh, global_batch, global_batches
from datarax.sharding.placement import BatchPlacement

__all__ = ["BatchPlacement", "data_mesh", "global_batch", "global_batches"]
