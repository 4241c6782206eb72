"""Multi-process data: assemble per-process batches into globally sharded arrays.

Each process's :class:`~datarax.pipeline.Pipeline` already reads a disjoint, equally
long share of every epoch (``shard_index``/``shard_count`` default to
``jax.process_index()``/``jax.process_count()``); :func:`global_batch` turns those
shares into one ``jax.Array`` per field over a mesh of every process's devices.
"""

from datarax.sharding.global_batch import data_mesh, global_batch, global_batches

__all__ = ["data_mesh", "global_batch", "global_batches"]
