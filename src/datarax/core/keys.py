"""Per-record random keys: one derivation every stochastic stage shares.

A record's key depends only on the stage's base key, the epoch and the record's
stable index, so its augmentation is the same at any batch size, in any shuffle
order, on any host and after any resume, and changes from epoch to epoch.

Example:
    >>> import jax, jax.numpy as jnp
    >>> base = jax.random.key(0)
    >>> a = record_keys(base, 0, jnp.array([5, 7]))
    >>> b = record_keys(base, 0, jnp.array([7]))
    >>> bool((jax.random.key_data(a[1]) == jax.random.key_data(b[0])).all())
    True
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def record_keys(base_key: Any, epoch: Any, record_indices: Any) -> Any:
    """Keys for each record: ``fold_in(fold_in(base_key, epoch), index)``."""
    epoch_key = jax.random.fold_in(base_key, jnp.asarray(epoch, jnp.uint32))
    indices = jnp.asarray(record_indices).astype(jnp.uint32)
    return jax.vmap(lambda i: jax.random.fold_in(epoch_key, i))(indices)


def as_key(key: Any) -> Any:
    """A typed PRNG key from a typed key, raw uint32 key data or an int seed."""
    if isinstance(key, int):
        return jax.random.key(key)
    key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    return jax.random.wrap_key_data(key)
