"""Batches on devices: placement over a mesh, and multi-process global batches.

``Pipeline(..., sharding=...)`` places batches with a :class:`BatchPlacement`;
:func:`global_batch` turns each process's share into one ``jax.Array`` per field over a
mesh of every process's devices.
"""

from datarax.sharding.global_batch import data_mesh, global_batch, global_batches
from datarax.sharding.placement import BatchPlacement

__all__ = ["BatchPlacement", "data_mesh", "global_batch", "global_batches"]
